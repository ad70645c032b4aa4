"""search_spaces/template.yaml documents every key a space file takes (each settings model, nested)."""

from __future__ import annotations

import re
import typing
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel

from tuner.space.goals import Slo
from tuner.space.sections import SpaceFile

TEMPLATE = (Path(__file__).resolve().parents[2] / "search_spaces" / "template.yaml").read_text()
WRITTEN_AS_TEXT = {Slo}  # "metric <= bound" in a space file: its fields are no keys


def _keys(model: type[BaseModel], prefix: str, seen: frozenset[type]) -> Iterator[tuple[str, str]]:
    for name, field in model.model_fields.items():
        key = field.validation_alias if isinstance(field.validation_alias, str) else (field.alias or name)
        yield f"{prefix}{key}", key
        for outer in (field.annotation, *typing.get_args(field.annotation)):
            for inner in (outer, *typing.get_args(outer)):
                if (
                    isinstance(inner, type)
                    and issubclass(inner, BaseModel)
                    and inner not in seen
                    and inner not in WRITTEN_AS_TEXT
                ):
                    yield from _keys(inner, f"{prefix}{key}.", seen | {inner})


def test_every_space_key_is_in_the_template() -> None:
    keys = list(_keys(SpaceFile, "", frozenset()))
    assert any(path == "search.finalists.capacity" for path, _ in keys)
    missing = [
        path for path, key in keys if not re.search(rf"(^|[\s{{,#])\s*{re.escape(key)}\s*:", TEMPLATE, re.M)
    ]
    assert missing == [], f"keys not documented in search_spaces/template.yaml: {missing}"
