"""Renamed SGLang flags: what a flag is called in another release, and what to say about it.

Pure functions over `OptionTable`s: the built-in facts of every known release plus the
table in use. `replacement` derives the spelling to use from the tables (an alias names
its dest's canonical option, a flag that disappeared names the option that took over its
dest, a flag newer than the release names the older spelling); `_HINTS` covers the few
renames no table shows (env vars, changed meaning). The `*_message` functions are the
words validate_flags (flags.py) uses for a flag a release refuses or deprecates.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

from tuner.sglang.options import OptionSpec, OptionTable, builtin_table, known_versions, version_key

PHASE_OFF = ("--disable-decode-cuda-graph", "--disable-prefill-cuda-graph")
CANONICAL_KINDS = ("store", "store_true", "bool_optional")
WORKING_KINDS = (*CANONICAL_KINDS, "alias", "deprecated_store_true")


@dataclass(frozen=True, kw_only=True, slots=True)
class _Hint:
    """A rename the option tables cannot show: what to use instead of `flag`, when `needs` exist."""

    flag: str
    needs: tuple[str, ...]
    use: str


_HINTS = (
    _Hint(
        flag="--enable-nan-detection",
        needs=(),
        use="the environment variable SGLANG_ENABLE_ASYNC_ASSERT=1 (stop on NaN) or "
        "SGLANG_SANITIZE_NAN_LOGITS=1 (0.5.14+: sanitize and log) instead",
    ),
    _Hint(
        flag="--enable-dp-attention",
        needs=("--attn-dp-size",),
        use="--attn-dp-size N instead of --dp-size N --enable-dp-attention",
    ),
    _Hint(
        flag="--stream-output",
        needs=("--incremental-streaming-output",),
        use="--incremental-streaming-output",
    ),
    _Hint(
        flag="--enable-piecewise-cuda-graph",
        needs=("--cuda-graph-backend-prefill",),
        use="--cuda-graph-backend-prefill breakable (prefill CUDA graphs are on by default)",
    ),
    _Hint(
        flag="--enable-piecewise-cuda-graph",
        needs=("--disable-piecewise-cuda-graph",),
        use="the default (prefill CUDA graphs are on; --disable-piecewise-cuda-graph turns them off)",
    ),
    _Hint(
        flag="--disable-piecewise-cuda-graph",
        needs=("--cuda-graph-backend-prefill",),
        use="--cuda-graph-backend-prefill disabled",
    ),
    _Hint(flag="--disable-cuda-graph", needs=PHASE_OFF, use=" ".join(PHASE_OFF)),
)


def canonical(table: OptionTable, dest: str, kinds: tuple[str, ...] = CANONICAL_KINDS) -> str | None:
    """The first long spelling of the first option of `kinds` storing into `dest`."""
    for opt in table.by_dest(dest):
        if opt.kind in kinds:
            return next((s for s in opt.opts if s.startswith("--")), None)
    return None


def usable(table: OptionTable, flag: str) -> bool:
    """True when `table`'s release has `flag` as a working option (not retired, not ignored)."""
    spec = table.find(flag)
    return spec is not None and spec.kind in WORKING_KINDS


# --------------------------------------------------------------- messages


def missing_message(flag: str, table: OptionTable, *, ambiguous: Sequence[str] = ()) -> str:
    """Why `table`'s release refuses `flag` (absent or ambiguous), with its history and replacement."""
    if ambiguous:
        what = f"{flag} is ambiguous in SGLang {table.version} (could match {', '.join(ambiguous)}"
    else:
        what = f"{flag} is not accepted by SGLang {table.version} ("
    history = _history(flag, table)
    if not history:
        span = f"{known_versions()[0]}–{known_versions()[-1]}"
        what += ("; " if ambiguous else "") + f"no release {span} has it"
        near = difflib.get_close_matches(flag, sorted(table.flags()), n=3, cutoff=0.75)
        tail = f"; did you mean {' or '.join(near)}?" if near else ""
        return what + ")" + tail
    first, last = history[0][0], history[-1][0]
    sep = "; " if ambiguous else ""
    if version_key(first) > version_key(table.version):
        what += f"{sep}added in {first})"
    elif version_key(last) < version_key(table.version):
        what += f"{sep}removed in {_release_after(last, table)})"
    else:
        what += f"{sep}absent from this release, present in {first}–{last})"
    use = replacement(flag, table)
    return what + (f"; use {use}" if use else "")


def retired_message(flag: str, table: OptionTable) -> str:
    """`flag` is known to `table`'s release only to stop on or to ignore; what to use instead."""
    use = replacement(flag, table)
    return (
        f"{flag} is retired in SGLang {table.version}: its parser knows the name only to stop "
        f"or to ignore it (DeprecatedAction)" + (f"; use {use}" if use else "; drop it")
    )


def deprecated_message(flag: str, table: OptionTable) -> str:
    """`flag` still works in `table`'s release but is deprecated; what to use instead."""
    use = replacement(flag, table)
    return f"{flag} is deprecated in SGLang {table.version} but still accepted" + (
        f"; use {use}" if use else ""
    )


# ------------------------------------------------------ rename knowledge


@cache
def _builtin_releases() -> tuple[OptionTable, ...]:
    return tuple(builtin_table(v) for v in known_versions())


def _releases(table: OptionTable) -> tuple[OptionTable, ...]:
    tables = {t.version: t for t in _builtin_releases()}
    tables[table.version] = table  # the installed parser is the truth for its own release
    return tuple(sorted(tables.values(), key=lambda t: version_key(t.version)))


def _history(flag: str, table: OptionTable) -> list[tuple[str, OptionSpec, OptionTable]]:
    """(version, option, table) for every release whose parser knows `flag`, oldest first."""
    out = []
    for release in _releases(table):
        spec = release.find(flag)
        if spec is not None:
            out.append((release.version, spec, release))
    return out


def _release_after(version: str, table: OptionTable) -> str:
    later = [t.version for t in _releases(table) if version_key(t.version) > version_key(version)]
    return later[0] if later else table.version


def replacement(flag: str, table: OptionTable) -> str | None:
    """The spelling to use in `table`'s release instead of `flag`, or None if none is known.

    Derived from the tables: an alias (or deprecated switch) names its dest's
    canonical option; a flag that disappeared names the option that took over
    its dest; a flag newer than the release names the older spelling of its
    dest. `_HINTS` covers the renames no table shows (env vars, changed meaning).
    """
    for hint in _HINTS:
        if hint.flag == flag and all(usable(table, need) for need in hint.needs):
            return hint.use
    history = _history(flag, table)
    for _, spec, release in reversed(history):
        if spec.is_deprecated:
            found = _spelling_in(table, release, spec.dest, exclude=flag, kinds=CANONICAL_KINDS)
            if found:
                return found
    if history:
        _, last, last_release = history[-1]
        found = canonical(table, last.dest)
        if found and found != flag:
            return found
        _, first, first_release = history[0]
        found = _spelling_in(table, first_release, first.dest, exclude=flag, kinds=WORKING_KINDS)
        if found:
            return found
    return None


def _spelling_in(
    table: OptionTable, release: OptionTable, dest: str, *, exclude: str, kinds: tuple[str, ...]
) -> str | None:
    """A spelling `release` stores into `dest` that `table` accepts (canonically first)."""
    candidates = [s for opt in release.by_dest(dest) for s in opt.opts if s != exclude]
    for wanted in (CANONICAL_KINDS, kinds):
        for spelling in candidates:
            spec = table.find(spelling)
            if spec is not None and spec.kind in wanted:
                return spelling
    return None
