"""Launch flags for one SGLang release: render a TrialConfig, check an argv (--config YAML: config_yaml.py).

Pure functions over an `OptionTable` (the installed SGLang's parser or the
built-in facts of a release). Spellings are looked up in the table by the
dest they store into, never by comparing version numbers, so a release newer
than every known one works as long as its parser keeps the dests. When an
argv is wrong, the message names the flag, the release and, where the tables
(or the few renames they cannot show; see renames.py) know one, the spelling
to use instead.
"""

from __future__ import annotations

import argparse
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import fields
from functools import cache

from tuner.config import CudaGraph, FlagValue, TrialConfig
from tuner.errors import ConfigError, FlagError
from tuner.knobs.cuda_graph import DESTS as _GRAPH_DESTS
from tuner.sglang.options import ArgvError, OptionSpec, OptionTable, build_parser
from tuner.sglang.renames import (
    CANONICAL_KINDS,
    PHASE_OFF,
    WORKING_KINDS,
    canonical,
    deprecated_message,
    missing_message,
    replacement,
    retired_message,
)
from tuner.sglang.structured import field_owner

log = logging.getLogger(__name__)

__all__ = [
    "current_spelling",
    "render_flags",
    "replacement",
    "validate_flags",
]


# ---------------------------------------------------------------- rendering


def render_flags(
    config: TrialConfig,
    table: OptionTable,
    *,
    fixed: Mapping[str, FlagValue] | None = None,
    host: str = "127.0.0.1",
    port: int,
) -> tuple[str, ...]:
    """The launch flags of `config` for `table`'s release (without `python -m sglang.launch_server`).

    Order: `fixed` as given, the knobs, `config.flags` as given, then --host and --port.
    Raises ConfigError when two sources set the same option, FlagError when the
    release has no option for a knob that is set.
    """
    items: list[tuple[str, tuple[str, ...]]] = []  # (source, argv piece)
    for name, value in (fixed or {}).items():
        items.append((f"fixed flag {name!r}", _flag_tokens(name, value, table)))
    items.extend(_knob_tokens(config, table))
    for name, value in config.flags:
        items.append((f"config flag {name!r}", _flag_tokens(name, value, table)))
    items.append(("host", ("--host", host)))
    items.append(("port", ("--port", str(port))))
    _refuse_duplicates(items, table)
    return tuple(token for _, piece in items for token in piece)


def _knob_tokens(config: TrialConfig, table: OptionTable) -> list[tuple[str, tuple[str, ...]]]:
    """The knobs held in TrialConfig fields, in the fields' order (tuner.sglang.structured): a field
    its knob's `dests` name is one flag taking the field's value; the CUDA-graph setting is spelled
    part by part (`_graph_tokens`)."""
    out: list[tuple[str, tuple[str, ...]]] = []
    for name in (f.name for f in fields(config)):
        knob, value = field_owner(name), getattr(config, name)
        if knob is None or value is None:
            continue
        if name in knob.dests:
            out.append((name, (_knob_flag(table, knob.dests[name], name), _text(value))))
        elif isinstance(value, CudaGraph):
            out.extend(_graph_tokens(value, table))
        else:
            raise FlagError(f"{name}: the {knob.kind} knob names no option dests for it (tuner.knobs)")
    return out


def _graph_tokens(graph: CudaGraph, table: OptionTable) -> list[tuple[str, tuple[str, ...]]]:
    if not graph.enabled:
        return [("cuda_graph.enabled", _graphs_off(table))]
    out: list[tuple[str, tuple[str, ...]]] = []
    if graph.max_bs is not None:
        flag = _knob_flag(table, _GRAPH_DESTS["max_bs"], "cuda_graph.max_bs")
        out.append(("cuda_graph.max_bs", (flag, str(graph.max_bs))))
    if graph.bs:
        flag = _knob_flag(table, _GRAPH_DESTS["bs"], "cuda_graph.bs")
        out.append(("cuda_graph.bs", (flag, *(str(b) for b in graph.bs))))
    return out


def _knob_flag(table: OptionTable, dests: tuple[str, ...], knob: str) -> str:
    for dest in dests:
        flag = canonical(table, dest)
        if flag:
            return flag
    raise FlagError(
        f"{knob}: SGLang {table.version} has no launch option for it "
        f"(expected one storing into {' or '.join(dests)}; table: {table.source})"
    )


def _graphs_off(table: OptionTable) -> tuple[str, ...]:
    # The release's own, non-deprecated spelling: --disable-cuda-graph up to 0.5.13; from 0.5.14,
    # where that switch only survives as deprecated (with a warning), the per-phase switches, which
    # together mean the same. The deprecated switch only for a release that has nothing else.
    legacy = canonical(table, "disable_cuda_graph", ("store_true",))
    if legacy:
        return (legacy,)
    if all(_current(table, flag) for flag in PHASE_OFF):
        return PHASE_OFF
    deprecated = canonical(table, "disable_cuda_graph", WORKING_KINDS)
    if deprecated:
        return (deprecated,)
    raise FlagError(
        f"cuda_graph.enabled=False: SGLang {table.version} has neither --disable-cuda-graph "
        f"nor {' and '.join(PHASE_OFF)} (table: {table.source})"
    )


def _current(table: OptionTable, flag: str) -> bool:
    """`flag` works in `table`'s release and is not deprecated there."""
    spec = table.find(flag)
    return spec is not None and spec.kind in CANONICAL_KINDS


def current_spelling(flag: str, table: OptionTable) -> tuple[str, ...]:
    """The non-deprecated spelling(s) of `flag` in `table`'s release; `(flag,)` when it is current.

    An alias becomes its dest's canonical option; a deprecated switch its canonical twin (or, for
    --disable-cuda-graph, the per-phase switches). Anything else is returned as given, for
    validate_flags to judge in the release's own words.
    """
    spec = table.find(flag)
    if spec is None or not spec.is_deprecated or spec.kind == "removed":
        return (flag,)
    if spec.kind == "alias":
        found = canonical(table, spec.dest, ("store",))
        return (found,) if found else (flag,)
    if spec.kind == "deprecated_store_true":
        twin = canonical(table, spec.dest, ("store_true",))
        if twin:
            return (twin,)
        if spec.dest == "disable_cuda_graph" and all(_current(table, f) for f in PHASE_OFF):
            return PHASE_OFF
    return (flag,)


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]*$")


def _flag_tokens(name: str, value: FlagValue, table: OptionTable) -> tuple[str, ...]:
    if not _NAME.match(name):
        hint = name.lstrip("-").replace("_", "-")
        raise ConfigError(
            f"flag name {name!r}: expected the option's name without leading dashes, "
            f"words joined by '-' (e.g. {hint!r})"
        )
    flag = f"--{name}"
    spelled = current_spelling(flag, table)
    if isinstance(value, bool):
        if value:
            return spelled
        negative = f"--no-{name}"
        spec = table.find(flag)
        if spec is not None and spec.kind == "bool_optional" and negative in spec.opts:
            return (negative,)
        return ()
    if len(spelled) == 1:
        flag = spelled[0]
    if isinstance(value, tuple):
        return (flag, *(_text(v) for v in value))
    return (flag, _text(value))


def _text(value: object) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def _refuse_duplicates(items: list[tuple[str, tuple[str, ...]]], table: OptionTable) -> None:
    seen: dict[str, str] = {}
    for source, piece in items:
        if not piece:
            continue
        spec = resolve_option(piece[0].split("=", 1)[0], table)
        if spec is None:
            continue  # validate_flags reports it with the release's own words
        if spec.dest in seen:
            raise ConfigError(
                f"{piece[0]}: set twice for SGLang {table.version} "
                f"(by {seen[spec.dest]} and by {source}); expected one of them"
            )
        seen[spec.dest] = source


# --------------------------------------------------------------- validation


def validate_flags(argv: Sequence[str], table: OptionTable) -> tuple[str, ...]:
    """Check `argv` against `table`'s parser; raise FlagError where that release would fail.

    Returns (and logs) warnings for spellings that work but should change:
    deprecated aliases and abbreviations that a later release may make ambiguous.
    """
    problems: list[str] = []
    warnings: list[str] = []
    for token in argv:
        if not token.startswith("--") or token == "--":
            continue
        flag = token.split("=", 1)[0]
        spec = table.find(flag)
        if spec is not None:
            if spec.kind == "removed":
                problems.append(retired_message(flag, table))
            elif spec.is_deprecated:
                warnings.append(deprecated_message(flag, table))
            continue
        matches = sorted(f for f in table.flags() if f.startswith(flag))
        if len(matches) == 1:
            warnings.append(
                f"{flag} is an abbreviation of {matches[0]} in SGLang {table.version}; "
                f"spell it out (a later release may add a flag that makes it ambiguous)"
            )
        elif matches:
            problems.append(missing_message(flag, table, ambiguous=matches))
        elif " " not in token:
            problems.append(missing_message(flag, table))
    if problems:
        raise FlagError("\n".join(dict.fromkeys(problems)))
    try:
        _parser(table).parse_args(list(argv))
    except ArgvError as exc:
        raise FlagError(_argparse_problem(str(exc), argv, table)) from None
    for message in warnings:
        log.warning("%s", message)
    return tuple(warnings)


_ARGUMENT = re.compile(r"^argument (\S+): (.*)$", re.S)


def _argparse_problem(message: str, argv: Sequence[str], table: OptionTable) -> str:
    where = f"SGLang {table.version}"
    found = _ARGUMENT.match(message)
    if found:
        flag = found.group(1).split("/")[0]
        detail = found.group(2)
        spec = table.find(flag)
        got = re.search(r"'(.*?)'", detail)
        got_text = got.group(1) if got else ""
        if "invalid choice" in detail and spec is not None and spec.choices:
            return (
                f"{flag}: invalid choice {got_text!r} for {where} (valid choices: {', '.join(spec.choices)})"
            )
        if "invalid" in detail and "value" in detail and spec is not None:
            many = spec.nargs not in (None, 0, 1)
            shape = f"space-separated {spec.value_type}s" if many else f"one {spec.value_type}"
            spaced = " ".join(re.split(r"[,\s]+", got_text))
            fix = f"; write {flag} {spaced}" if many else ""
            return f"{flag}: expected {shape} for {where} (got {got_text!r}){fix}"
        if "expected" in detail and spec is not None:
            return f"{flag}: wrong number of values for {where} ({detail}; nargs={spec.nargs!r})"
        return f"{flag}: rejected by {where} ({detail})"
    if message.startswith("unrecognized arguments:"):
        stray = message.split(":", 1)[1].split()
        return "; ".join(_stray(value, argv, where) for value in stray)
    return f"argv rejected by {where}: {message}"


def _stray(value: str, argv: Sequence[str], where: str) -> str:
    index = list(argv).index(value) if value in argv else -1
    before = next((argv[i] for i in range(index - 1, -1, -1) if argv[i].startswith("--")), None)
    after = f" after {before}" if before else ""
    return f"stray value {value!r}{after} rejected by {where} (that option takes fewer values)"


# --------------------------------------------------------- --config YAML


def resolve_option(flag: str, table: OptionTable) -> OptionSpec | None:
    """The option a flag names in this release (an unambiguous prefix counts, as argparse allows)."""
    spec = table.find(flag)
    if spec is None:
        full = expand_option(flag, table)
        spec = table.find(full) if full else None
    return spec


def expand_option(flag: str, table: OptionTable) -> str | None:
    """The one full flag a prefix abbreviates, or None."""
    matches = [f for f in table.flags() if f.startswith(flag)]
    return matches[0] if len(matches) == 1 else None


@cache
def _parser(table: OptionTable) -> argparse.ArgumentParser:
    """The release's raising parser, built once per table (building one takes tens of milliseconds)."""
    return build_parser(table)


def min_gpus(argv_flags: Sequence[str], table: OptionTable) -> int:
    """A lower bound on the GPUs per node a launch needs: tp x pp / nnodes (data parallelism aside).

    Data-parallel replicas are left out on purpose: their GPU count depends on
    the release and on DP attention, and a lower bound never refuses a launch
    that could run.
    """
    try:
        ns = vars(_parser(table).parse_args(list(argv_flags)))
    except ArgvError:
        return 1
    tp = ns.get("tp_size", ns.get("tensor_parallel_size", 1)) or 1
    pp = ns.get("pp_size", ns.get("pipeline_parallel_size", 1)) or 1
    nodes = ns.get("nnodes", 1) or 1
    return max(1, -(-int(tp) * int(pp) // int(nodes)))
