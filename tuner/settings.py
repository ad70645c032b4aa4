"""The base of every settings model read from a space file, and the value types they share.

A settings model (gate, bench, launch timeouts, budget, ...) is a frozen pydantic model: its
fields, defaults and bounds are declared once, there. Unknown keys are errors; values are not
coerced (a string is not an integer, 1 is not true). In a space file a field is spelled by its
alias when it has one (`settle: 1s` sets `settle_s`); code constructs models by field name.

Validators that need the space file (relative paths) read its folder from the validation
context (`space_dir`); a model built in code has no context and is taken as given. A mistake
that concerns one key of a model is raised with `mistake(message, at=(key,))`, so the space
loader can point at that key's line.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sized
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, ValidationInfo, model_validator
from pydantic_core import PydanticCustomError

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}

MISTAKE = "space_mistake"  # the error type of `mistake`


def parse_duration(value: object) -> float:
    """Seconds from 90, 1.5, "90s", "30m", "8h", "1h30m", "250ms"; ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError("a duration")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip().replace(" ", "")
        if not text:
            raise ValueError("a duration")
        if re.fullmatch(r"\d+(\.\d+)?", text):
            seconds = float(text)
        else:
            pos, seconds = 0, 0.0
            for match in _DURATION_PART.finditer(text):
                if match.start() != pos:
                    raise ValueError("a duration")
                seconds += float(match.group(1)) * _UNIT_S[match.group(2)]
                pos = match.end()
            if pos != len(text) or pos == 0:
                raise ValueError("a duration")
    else:
        raise ValueError("a duration")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError("a duration")
    return seconds


def show(value: object) -> str:
    """A value as the user would recognise it in an error message."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    return str(value)


def mistake(message: str, *, at: tuple[str | int, ...] = ()) -> PydanticCustomError:
    """A validation error with a finished message; `at` names the key (below the model) it is about."""
    return PydanticCustomError(MISTAKE, "{message}", {"message": message, "at": at})


def space_dir(info: ValidationInfo) -> Path | None:
    """The folder of the space file being read, or None for a model built in code."""
    context = info.context
    folder = context.get("space_dir") if isinstance(context, dict) else None
    return folder if isinstance(folder, Path) else None


def _duration(value: object) -> float:
    try:
        return parse_duration(value)
    except ValueError:
        raise mistake(
            f"expected a duration such as 90s, 30m, 8h, 1h30m or seconds (got {show(value)})"
        ) from None


Duration = Annotated[float, BeforeValidator(_duration)]
"""Seconds, written in a space file as 90, 1.5, "90s", "30m", "8h", "1h30m" or "250ms"."""


def _regex(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise mistake(f"not a valid regular expression ({exc})") from None
    return value


Regex = Annotated[str, AfterValidator(_regex)]
"""A string that compiles as a Python regular expression."""

S = TypeVar("S", bound=Sized)


def non_empty(what: str) -> AfterValidator:
    """A check that a list holds at least one element, naming the kind of element expected."""

    def check(value: S) -> S:
        if not len(value):
            raise mistake(f"expected at least one {what}")
        return value

    return AfterValidator(check)


class Settings(BaseModel):
    """A frozen settings model: unknown keys forbidden, no coercion, finite numbers only.

    A key whose value is a settings model and that is given as null (a key with only comments
    under it) takes its default, as if it were absent.
    """

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        strict=True,
        allow_inf_nan=False,
        validate_by_name=True,
        validate_by_alias=True,
    )

    @model_validator(mode="before")
    @classmethod
    def _null_section_is_absent(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        sections = {
            file_key(name, f.validation_alias)
            for name, f in cls.model_fields.items()
            if _is_settings(f.annotation)
        }
        return {key: value for key, value in data.items() if value is not None or key not in sections}

    @classmethod
    def file_keys(cls) -> list[str]:
        """The keys of this model in a space file, in declaration order."""
        return [file_key(name, f.validation_alias) for name, f in cls.model_fields.items()]


def file_key(name: str, alias: object) -> str:
    """How a field is spelled in a space file: its alias when it has one."""
    return alias if isinstance(alias, str) else name


def _is_settings(annotation: object) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, Settings)
