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
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from enum import Enum
from pathlib import PurePath
from typing import Any

import orjson
from pydantic import BaseModel

REDACTED = "***"

# An env key is secret when one of its `_`-separated words is one of these
# (HF_TOKEN, OPENAI_API_KEY, AWS_SECRET_ACCESS_KEY), not when a word merely
# starts with one (TOKENIZERS_PARALLELISM, MAX_TOKENS stay readable).
_SECRET_ENV = re.compile(r"(?:^|_)(TOKEN|KEY|SECRET|PASSWORD|PASSWD|APIKEY|CREDENTIALS?)(?:_|$)", re.I)
# A flag takes a secret when its last word is one of these: --api-key, --admin-api-key,
# --hf-token, --ssl-keyfile-password; not --max-total-tokens or --speculative-token-map.
_SECRET_FLAG = re.compile(r"^--?(?:[a-z0-9]+[-_])*(key|token|secret|password|passwd)$", re.I)
_MIN_SCRUB_LEN = 4  # shorter "secrets" would mangle unrelated text when scrubbed
_PRIMITIVE = (str, int, float, bool, type(None))


def is_secret_flag(flag: str) -> bool:
    """True for a launch flag whose value is a credential (`--api-key`, `--hf-token`, ...)."""
    return bool(_SECRET_FLAG.match(flag))


def is_secret_env(key: str) -> bool:
    """True for an environment variable name that holds a credential (`HF_TOKEN`, ...)."""
    return bool(_SECRET_ENV.search(key))


def redact_argv(argv: Sequence[str]) -> tuple[str, ...]:
    """The argv with the value of every secret flag (`--api-key X`, `--api-key=X`) replaced by ***."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        flag, eq, _ = arg.partition("=")
        if is_secret_flag(flag):
            if eq:
                out.append(f"{flag}={REDACTED}")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(arg)
    return tuple(out)


def redact_env(env: Mapping[str, str] | Iterable[tuple[str, str]]) -> dict[str, str]:
    """The environment with the value of every secret-named variable replaced by ***."""
    items = env.items() if isinstance(env, Mapping) else env
    return {k: (REDACTED if is_secret_env(k) else v) for k, v in items}


def secret_values(argv: Sequence[str], env: Mapping[str, str] | Iterable[tuple[str, str]]) -> frozenset[str]:
    """The literal secrets in an argv and environment, to scrub from every other text (logs echo them)."""
    found: set[str] = set()
    for i, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        if is_secret_flag(flag):
            if eq:
                found.add(value)
            elif i + 1 < len(argv):
                found.add(argv[i + 1])
    items = env.items() if isinstance(env, Mapping) else env
    found.update(v for k, v in items if is_secret_env(k))
    return frozenset(s for s in found if len(s) >= _MIN_SCRUB_LEN)


def scrub(text: str, secrets: frozenset[str]) -> str:
    """The text with every secret (raw or JSON-escaped) replaced by ***."""
    for secret in secrets:
        text = text.replace(secret, REDACTED)
        escaped = orjson.dumps(secret).decode()[1:-1]
        if escaped != secret:
            text = text.replace(escaped, REDACTED)
    return text


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
