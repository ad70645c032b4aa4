"""Checks of a scenario file's values: one line per mistake naming file, key and what was expected.

Each section is described by a table of `Field`s (type, bounds, default); `check_section`
turns a raw YAML mapping into keyword arguments for the section's dataclass or raises
ConfigError("scenario: FILE: KEY: expected ... (got ...)").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tuner.errors import ConfigError

_MISSING = object()


@dataclass(frozen=True, kw_only=True, slots=True)
class Field:
    """One key of a section: its type (int | float | str | bool), bounds and default."""

    kind: str
    default: Any = _MISSING
    low: float | None = None  # inclusive
    high: float | None = None  # inclusive
    above: float | None = None  # exclusive lower bound
    choices: tuple[str, ...] | None = None
    optional: bool = False  # null allowed (value None)
    check: Callable[[Any], str | None] | None = None  # extra rule: a message or None


class ScenarioError(ConfigError):
    """A scenario file's value is wrong (one line: file, key, expected, got)."""


def fail(where: str, key: str, expected: str, got: Any) -> ScenarioError:
    """The one-line error for `key` of the scenario file `where`."""
    shown = repr(got) if not isinstance(got, (dict, list)) else type(got).__name__
    return ScenarioError(f"scenario: {where}: {key}: expected {expected} (got {shown})")


def _type_ok(kind: str, value: Any) -> bool:
    if kind == "any":
        return True
    if kind == "bool":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if kind == "int":
        return isinstance(value, int)
    if kind == "float":
        return isinstance(value, (int, float)) and math.isfinite(value)
    return isinstance(value, str)


_NOUN = {
    "any": "a value",
    "int": "an integer",
    "float": "a number",
    "str": "a string",
    "bool": "true or false",
}


def describe(spec: Field) -> str:
    """What a field accepts, in words ("a number > 0", "one of ok, nan")."""
    if spec.choices is not None:
        return "one of " + ", ".join(spec.choices)
    text = _NOUN[spec.kind]
    if spec.above is not None:
        text += f" > {spec.above:g}"
    if spec.low is not None and spec.high is not None:
        text += f" in [{spec.low:g}, {spec.high:g}]"
    elif spec.low is not None:
        text += f" >= {spec.low:g}"
    elif spec.high is not None:
        text += f" <= {spec.high:g}"
    return text + (" or null" if spec.optional else "")


def check_value(spec: Field, value: Any, where: str, key: str) -> Any:
    """`value` if it satisfies `spec`, else ScenarioError."""
    if value is None and spec.optional:
        return None
    if not _type_ok(spec.kind, value):
        raise fail(where, key, describe(spec), value)
    if spec.choices is not None and value not in spec.choices:
        raise fail(where, key, describe(spec), value)
    if spec.kind in ("int", "float") and (
        (spec.above is not None and not value > spec.above)
        or (spec.low is not None and value < spec.low)
        or (spec.high is not None and value > spec.high)
    ):
        raise fail(where, key, describe(spec), value)
    if spec.check is not None and (problem := spec.check(value)) is not None:
        raise fail(where, key, problem, value)
    return float(value) if spec.kind == "float" else value


def check_section(
    raw: Any, fields: Mapping[str, Field], where: str, section: str, *, required: bool = True
) -> dict[str, Any]:
    """Keyword arguments for a section's dataclass from the raw mapping `raw`."""
    if raw is None and not required:
        raw = {}
    if not isinstance(raw, dict):
        raise fail(where, section, "a mapping", raw)
    for key in raw:
        if key not in fields:
            raise fail(where, f"{section}.{key}", "one of the keys " + ", ".join(fields), "an unknown key")
    out: dict[str, Any] = {}
    for key, spec in fields.items():
        if key not in raw:
            if spec.default is _MISSING:
                raise fail(where, f"{section}.{key}", f"{describe(spec)} (required)", "nothing")
            continue
        out[key] = check_value(spec, raw[key], where, f"{section}.{key}")
    return out


def check_batch_map(raw: Any, where: str, key: str) -> tuple[tuple[int, float], ...]:
    """A factor that is one number, or a mapping {min batch: factor}; as ascending (min_batch, factor)."""
    if _type_ok("float", raw):
        if raw <= 0:
            raise fail(where, key, "a number > 0 or a mapping {min batch: factor > 0}", raw)
        return ((1, float(raw)),)
    if not isinstance(raw, dict) or not raw:
        raise fail(where, key, "a number > 0 or a mapping {min batch: factor > 0}", raw)
    steps = []
    for bs, factor in raw.items():
        if not _type_ok("int", bs) or bs < 1:
            raise fail(where, f"{key}.{bs}", "a batch size (integer >= 1) as the key", bs)
        if not _type_ok("float", factor) or factor <= 0:
            raise fail(where, f"{key}.{bs}", "a factor > 0", factor)
        steps.append((int(bs), float(factor)))
    return tuple(sorted(steps))
