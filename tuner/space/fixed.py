"""Reading the fixed part of a launch: fixed flags (checked against the option table) and the environment.

`${NAME}` and `${NAME:-default}` in values come from the user's environment at load; names that look
like credentials are marked secret so callers redact them.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping

from tuner.config import FlagValue
from tuner.knobs.registry import knob_of
from tuner.names import control_problem
from tuner.sglang.knobs import (
    FlagContext,
    check_value,
    find_flag,
    knob_options,
    owner_of,
    unknown_flag_message,
)
from tuner.space.params import Param, Target, fixed_value_problem
from tuner.space.source import Section, show

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand_vars(text: str, environ: Mapping[str, str]) -> str:
    """Replace ${NAME} and ${NAME:-default} from `environ`; KeyError(NAME) when unset without default."""

    def repl(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in environ:
            return environ[name]
        if default is not None:
            return default
        raise KeyError(name)

    expanded = _VAR.sub(repl, text)
    if "${" in _VAR.sub("", text):
        raise KeyError(text[text.index("${", 0) :][:40])
    return expanded


def _expand(sec: Section, key: str, text: str, environ: Mapping[str, str]) -> str:
    try:
        return expand_vars(text, environ)
    except KeyError as exc:
        name = str(exc.args[0])
        if name.startswith("${"):
            raise sec.error(key, f"unclosed {name!r}: expected ${{NAME}} or ${{NAME:-default}}") from None
        raise sec.error(
            key, f"environment variable {name} is not set (use ${{NAME:-default}} for a default)"
        ) from None


def parse_env(sec: Section | None, environ: Mapping[str, str] | None = None) -> tuple[tuple[str, str], ...]:
    """`env:` as (name, value) pairs with ${VAR} resolved from the user's environment."""
    if sec is None:
        return ()
    environ = os.environ if environ is None else environ
    out = []
    for key in sec.names():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise sec.error(key, "not a valid environment variable name", at_key=True)
        value = sec.raw(key)
        if not isinstance(value, str):
            raise sec.error(key, f"env value must be a string; quote it (got {show(value)})")
        value = _expand(sec, key, value, environ)
        problem = control_problem(value)
        if problem:
            raise sec.error(key, f"env value {problem}")
        out.append((key, value))
    return tuple(out)


def parse_fixed_flags(
    sec: Section | None, ctx: FlagContext, params: tuple[Param, ...], environ: Mapping[str, str] | None = None
) -> tuple[tuple[str, FlagValue], ...]:
    """`fixed_flags:` as (flag, value) pairs, each checked against the option table."""
    if sec is None:
        return ()
    environ = os.environ if environ is None else environ
    param_dests, knob_dests = {}, {}
    for p in params:
        spec = find_flag(ctx, p.flag or "") if p.target is Target.FLAG else None
        if spec is not None:
            param_dests[spec.dest] = p.name
        for dest in knob_of(p.knob).owned if p.knob is not None else ():
            knob_dests[dest] = p.name
    seen: dict[str, str] = {}
    out: list[tuple[str, FlagValue]] = []
    for key in sec.names():
        spec = find_flag(ctx, key)
        if spec is None:
            hint = "; write flag names without leading dashes" if key.startswith("-") else ""
            raise sec.error(key, unknown_flag_message(ctx, key.lstrip("-")) + hint, at_key=True)
        owner = owner_of(spec)
        if owner == "launcher":
            raise sec.error(
                key, f"--{key} is set by the tuner for every trial (use the top-level host: key)", at_key=True
            )
        if spec.dest in knob_dests:
            raise sec.error(
                key,
                f"--{key} is also searched by param {knob_dests[spec.dest]!r}; remove one of them",
                at_key=True,
            )
        if spec.dest in param_dests:
            raise sec.error(
                key, f"--{key} is also a param ({param_dests[spec.dest]!r}); remove one of them", at_key=True
            )
        if spec.dest in seen:
            raise sec.error(key, f"--{key} sets the same option as --{seen[spec.dest]}", at_key=True)
        seen[spec.dest] = key
        value = sec.raw(key)
        if isinstance(value, str):
            value = _expand(sec, key, value, environ)
            if control_problem(value):
                raise sec.error(key, f"--{key}: {control_problem(value)}")
            if not value.strip():  # `model-path: ""` would launch a server with no model
                raise sec.error(key, f"--{key}: expected a value (got an empty string)")
        problem = check_value(spec, value) or fixed_value_problem(spec.dest, value, knob_options(ctx))
        if problem:
            raise sec.error(key, f"--{key}: {problem} (got {show(value)})")
        if isinstance(value, float) and not math.isfinite(value):
            raise sec.error(key, f"--{key}: expected a finite number")
        out.append((key, tuple(value) if isinstance(value, list) else value))
    return tuple(out)
