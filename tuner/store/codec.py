"""Pure conversions between the stage dataclasses and the store's rows.

Nothing here touches a database. Gate and benchmark results are read
generically (dataclass fields, a few attribute names), so the store keeps
working whatever fields `tuner.gate.run` and `tuner.bench` end up with:
enums become their value, paths strings, datetimes ISO-8601 UTC, tuples
lists, non-finite floats None (missing, never a fake number).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from enum import Enum
from pathlib import PurePath
from typing import Any

import orjson
from pydantic import BaseModel

_PRIMITIVE = (str, int, float, bool, type(None))


def utc(value: datetime) -> datetime:
    """The same instant as an aware UTC datetime; naive values are taken to be UTC already."""
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


def to_jsonable(value: Any) -> Any:
    """A JSON-ready copy of a value of dataclasses, settings models, enums, paths, datetimes, containers."""
    if isinstance(value, Enum):
        return to_jsonable(value.value)
    if isinstance(value, _PRIMITIVE):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, BaseModel):  # the settings models of a space file
        return {name: to_jsonable(getattr(value, name)) for name in type(value).model_fields}
    if isinstance(value, (list, tuple)):
        if all(type(e) in _PRIMITIVE for e in value):  # fast path: ITL gap lists of thousands of floats
            return list(value)
        return [to_jsonable(e) for e in value]
    if isinstance(value, Mapping):
        return {str(to_jsonable(k)): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return sorted((to_jsonable(e) for e in value), key=repr)
    if isinstance(value, datetime):
        return utc(value).isoformat()
    if isinstance(value, PurePath):
        return str(value)
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return str(value)


def dumps(value: Any) -> str:
    """JSON text of a value (see `to_jsonable`); NaN and infinities become null."""
    return orjson.dumps(to_jsonable(value)).decode()


def loads(text: str | None) -> Any:
    """The decoded JSON column, None for NULL."""
    return None if text is None else orjson.loads(text)


def finite(value: Any) -> float | None:
    """A float column value: None for missing, NaN or infinite."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def integer(value: Any) -> int | None:
    """An integer column value, or None."""
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return None


def pick(source: Any, names: Sequence[str]) -> Any:
    """The first of several spellings of a value that is present and not None.

    A spelling is an attribute or key, dotted for nested values (`ttft.p99_ms`);
    attributes include properties, so derived values (`record.ttft_ms`) count.
    """
    for name in names:
        value = source
        for part in name.split("."):
            value = value.get(part) if isinstance(value, Mapping) else getattr(value, part, None)
            if value is None:
                break
        if value is not None:
            return value
    return None


def fields_of(value: Any) -> dict[str, Any]:
    """A dataclass's top-level fields by name (values unconverted); {} for anything else."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    return {}
