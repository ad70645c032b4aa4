"""Checks of flag names and values in a space file against SGLang's option tables.

The space file names flags canonically, without dashes (`tp-size`). A pinned
`sglang_version` is checked against that release's table; "auto" against the
newest known release (the installed SGLang's own parser decides at run time).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from tuner.errors import ConfigError
from tuner.knobs.protocol import Options
from tuner.knobs.registry import knob_owning
from tuner.sglang.options import OptionSpec, OptionTable, builtin_table, known_versions

VERSION_PATTERN = r"\d+\.\d+(\.\d+)?(\.post\d+)?"

# Flags the tuner sets for every trial; a fixed flag or plain flag param may not touch them. (The
# knobs' own dests: each knob's `owned`, tuner.knobs.registry.knob_owning.)
LAUNCHER_DESTS = frozenset({"host", "port"})


@dataclass(frozen=True, kw_only=True, slots=True)
class FlagContext:
    """The option table a space file is checked against, and how it was chosen."""

    table: OptionTable
    checked_version: str
    auto: bool

    @property
    def note(self) -> str:
        if self.auto:
            return (
                f"SGLang {self.checked_version} (the newest known release, checked because sglang_version "
                "is auto; the installed parser decides at run time, or pin sglang_version)"
            )
        return f"SGLang {self.checked_version}"


@dataclass(frozen=True, slots=True)
class _ReleaseOptions:
    ctx: FlagContext

    @property
    def note(self) -> str:
        return self.ctx.note

    def choices(self, dest: str) -> tuple[str, ...] | None:
        specs = [s for s in self.ctx.table.by_dest(dest) if s.kind != "removed"]
        if not specs:
            return None
        return tuple(c for s in specs for c in (s.choices or ()))


def knob_options(ctx: FlagContext) -> Options:
    """The release's options as a knob object reads them (tuner.knobs.protocol.Options)."""
    return _ReleaseOptions(ctx)


def flag_context(version: str) -> FlagContext:
    """The table for a pinned version or, for "auto", the newest known release."""
    if version == "auto":
        newest = known_versions()[-1]
        return FlagContext(table=builtin_table(newest), checked_version=newest, auto=True)
    return FlagContext(table=builtin_table(version), checked_version=version, auto=False)


def releases_with(flag: str) -> tuple[str, ...]:
    """Known releases whose parser accepts `--flag` (for hints when a flag is unknown)."""
    return tuple(v for v in known_versions() if builtin_table(v).find("--" + flag) is not None)


def unknown_flag_message(ctx: FlagContext, flag: str) -> str:
    seen = releases_with(flag)
    if seen:
        span = seen[0] if len(seen) == 1 else f"{seen[0]}–{seen[-1]}"
        where = f"; it exists in SGLang {span}"
    else:
        where = "; no known SGLang release has it"
    return f"unknown flag --{flag} for {ctx.note}{where}"


def find_flag(ctx: FlagContext, flag: str) -> OptionSpec | None:
    if flag.startswith("-") or not re.fullmatch(r"[a-z0-9][a-z0-9-]*", flag):
        return None
    return ctx.table.find("--" + flag)


def takes_list(spec: OptionSpec) -> bool:
    return spec.nargs in ("+", "*") or (isinstance(spec.nargs, int) and spec.nargs > 1)


def is_switch(spec: OptionSpec) -> bool:
    return not spec.takes_value


def check_scalar(spec: OptionSpec, value: object) -> str | None:
    """Why `value` is not a valid single value of option `spec`, or None."""
    if isinstance(value, bool) or value is None:
        return f"expected a {spec.value_type} value"
    if spec.value_type == "int" and not isinstance(value, int):
        return "expected an integer"
    if spec.value_type == "float" and (not isinstance(value, (int, float)) or not math.isfinite(value)):
        return "expected a number"
    if spec.value_type == "str" and not isinstance(value, (str, int, float)):
        return "expected a string"
    if spec.choices and str(value) not in spec.choices:
        return f"expected one of {', '.join(spec.choices)}"
    return None


def check_value(spec: OptionSpec, value: object) -> str | None:
    """Why `value` cannot be given to option `spec` (a bool for switches, lists for nargs flags)."""
    if is_switch(spec):
        return None if isinstance(value, bool) else "this flag is a switch; expected true or false"
    if isinstance(value, (list, tuple)):
        if not takes_list(spec):
            return "this flag takes one value, not a list"
        if not value:
            return "expected a non-empty list"
        for item in value:
            problem = check_scalar(spec, item)
            if problem:
                return f"list item {item!r}: {problem}"
        return None
    return check_scalar(spec, value)


def sparse_backend_choices(ctx: FlagContext) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """Valid (prefill, decode) sparse-attention backends of the target version, or None if it has none."""
    for family in ("dsa", "nsa"):
        prefill = ctx.table.find(f"--{family}-prefill-backend")
        decode = ctx.table.find(f"--{family}-decode-backend")
        if prefill and decode:
            return prefill.choices or (), decode.choices or ()
    return None


def owner_of(spec: OptionSpec) -> str | None:
    """Which knob (its kind) or the launcher owns this option's dest, if any."""
    knob = knob_owning(spec.dest)
    if knob is not None:
        return knob.kind
    if spec.dest in LAUNCHER_DESTS:
        return "launcher"
    return None


def check_version_text(version: str) -> None:
    """Raise ConfigError (without location) when `version` is not auto or a release number."""
    if version != "auto" and not re.fullmatch(VERSION_PATTERN, version):
        raise ConfigError("expected auto or a release such as 0.5.9")
