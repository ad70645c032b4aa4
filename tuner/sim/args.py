"""Command line of the simulator: `--sim-*` flags, then SGLang's flags parsed like the release."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from typing import Any

from tuner.sglang.options import OptionTable, build_parser, version_key
from tuner.sim.faults import BAD_USAGE, FREEZE_POINTS

DEFAULT_VERSION = "0.5.9"
DEFAULT_SCENARIO = "tiny-fast"

_INJECT_TYPES: dict[str, type] = {
    "crash_after_ready_s": float,
    "crash_after_requests": int,
    "hang_at": str,
    "ignore_sigterm": int,
    "orphan_child": int,
    "startup_delay_s": float,
    "drift_at": int,
    "kv_canary_violation": int,
    "http_error_rate": float,
    "bad_usage": str,
    "freeze_at": str,
    "warmup_status": int,
}
_BAD_USAGE = tuple(BAD_USAGE)
_HANG_POINTS = ("load", "capture")


@dataclass(frozen=True, kw_only=True, slots=True)
class Injections:
    """Failures a test asks for on purpose (`--sim-inject KEY=VALUE`)."""

    crash_after_ready_s: float | None = None
    crash_after_requests: int | None = None
    hang_at: str | None = None
    ignore_sigterm: bool = False
    orphan_child: bool = False
    startup_delay_s: float = 0.0
    drift_at: int | None = None  # greedy answers differ from token N on: corruption no keyword check sees
    kv_canary_violation: bool = False  # log one KV-canary violation (SGLang 0.5.13+ `--kv-canary log`)
    http_error_rate: float = 0.0  # this share of benchmark requests answered HTTP 500
    bad_usage: str | None = None  # benchmark requests' usage.completion_tokens: negative | huge | text
    freeze_at: str | None = None  # bench: SIGSTOP the server at the first benchmark request
    warmup_status: int | None = None  # a proxy answers the server's own warmup request with this status


@dataclass(frozen=True, kw_only=True, slots=True)
class SimOptions:
    """The simulator's own flags."""

    sglang_version: str = DEFAULT_VERSION
    scenario: str = DEFAULT_SCENARIO
    seed: int | None = None
    noise_pct: float | None = None  # overrides the scenario's perf.noise_pct (0: noise-free)
    platform: str | None = None  # overrides the scenario's platform (the device runtime's words)
    gpu_backed: bool = False  # hold real device memory (torch) instead of publishing state files
    publish_gpus: bool = False  # only write the scenario's gpus.json into the state directory, then exit
    inject: Injections = field(default_factory=Injections)


class SimFlagError(Exception):
    """A bad `--sim-*` flag; main turns it into an argparse-style exit 2."""


def _check_fault(key: str, value: Any) -> None:
    allowed = {"bad_usage": _BAD_USAGE, "freeze_at": FREEZE_POINTS}.get(key)
    if allowed is not None and value not in allowed:
        raise SimFlagError(f"argument --sim-inject: {key} must be one of {allowed} (got {value!r})")
    if key == "http_error_rate" and not 0.0 <= value <= 1.0:
        raise SimFlagError(f"argument --sim-inject: http_error_rate must be in [0, 1] (got {value})")


def _inject(value: str) -> tuple[str, Any]:
    """One `--sim-inject KEY=VALUE`: the key and its typed, checked value."""
    k, eq2, v = value.partition("=")
    if not eq2 or k not in _INJECT_TYPES:
        raise SimFlagError(
            f"argument --sim-inject: expected KEY=VALUE with KEY in {sorted(_INJECT_TYPES)} (got {value!r})"
        )
    try:
        typed = _INJECT_TYPES[k](v)
    except ValueError as exc:
        raise SimFlagError(f"argument --sim-inject: bad value for {k}: {v!r}") from exc
    if k == "hang_at" and v not in _HANG_POINTS:
        raise SimFlagError(f"argument --sim-inject: hang_at must be one of {_HANG_POINTS} (got {v!r})")
    _check_fault(k, typed)
    return k, typed


def _number(name: str, value: str, kind: type[int] | type[float]) -> int | float:
    try:
        return kind(value)
    except ValueError as exc:
        raise SimFlagError(f"argument {name}: invalid {kind.__name__} value: {value!r}") from exc


def _value(key: str, name: str, value: str) -> dict[str, Any]:
    """A valued `--sim-*` flag as the SimOptions field it sets."""
    if key in ("sglang_version", "scenario", "platform"):
        return {key: value}
    if key == "seed":
        return {"seed": _number(name, value, int)}
    if key == "noise":
        noise = _number(name, value, float)
        if not 0 <= noise <= 10:
            raise SimFlagError(f"argument --sim-noise: expected a percentage in [0, 10] (got {value})")
        return {"noise_pct": noise}
    raise SimFlagError(f"unrecognized arguments: {name}")


def split_sim_flags(argv: list[str]) -> tuple[SimOptions, list[str]]:
    """Take the `--sim-*` flags out of argv; the rest are SGLang's."""
    values: dict[str, Any] = {}
    injects: dict[str, Any] = {}
    rest: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if not token.startswith("--sim-"):
            rest.append(token)
            i += 1
            continue
        name, eq, value = token.partition("=")
        if name == "--sim-publish-gpus" and not eq:
            values["publish_gpus"] = True
            i += 1
            continue
        if name == "--sim-gpu-backed":
            if eq and value not in ("true", "1"):
                raise SimFlagError(f"argument --sim-gpu-backed: ignored explicit argument {value!r}")
            values["gpu_backed"] = True
            i += 1
            continue
        if not eq:
            if i + 1 >= len(argv):
                raise SimFlagError(f"argument {name}: expected one argument")
            value = argv[i + 1]
            i += 1
        i += 1
        key = name[len("--sim-") :].replace("-", "_")
        if key == "inject":
            k, v = _inject(value)
            injects[k] = v
        else:
            values.update(_value(key, name, value))
    for flag in ("ignore_sigterm", "orphan_child", "kv_canary_violation"):
        if flag in injects:
            injects[flag] = bool(injects[flag])
    return SimOptions(inject=Injections(**injects), **values), rest


def parser_prog(version: str) -> str:
    return "sglang serve" if version_key(version) >= version_key("0.5.10") else "launch_server.py"


def parse_sglang_argv(table: OptionTable, argv: list[str]) -> dict[str, Any]:
    """Parse like the release: an unknown, ambiguous or malformed flag exits 2 with argparse's message."""
    parser = build_parser(table, prog=parser_prog(table.version), raising=False)
    namespace = parser.parse_args(argv)
    given = vars(namespace)
    if "model_path" not in given:
        spec = table.by_dest("model_path")
        spelled = "/".join(spec[0].opts) if spec else "--model-path"
        parser.error(f"the following arguments are required: {spelled}")
    return given


def _resolve_flag(table: OptionTable, token: str) -> tuple[str, Any] | None:
    name = token.split("=", 1)[0]
    spec = table.find(name)
    if spec is None:
        matches = [f for f in table.flags() if f.startswith(name)]
        if len(matches) != 1:
            return None
        name, spec = matches[0], table.find(matches[0])
    return name, spec


def deprecation_warnings(table: OptionTable, argv: list[str]) -> list[str]:
    """SGLang's warnings for the deprecated spellings used in argv (yellow from 0.5.10)."""
    yellow = version_key(table.version) >= version_key("0.5.10")
    out = []
    for token in argv:
        if not token.startswith("--"):
            continue
        found = _resolve_flag(table, token)
        if found is None:
            continue
        name, spec = found
        if spec.dest == "enable_nan_detection" and version_key(table.version) >= version_key("0.5.10"):
            text = (
                "--enable-nan-detection is deprecated. Use SGLANG_SPEC_NAN_DETECTION=1 and "
                "SGLANG_SPEC_OOB_DETECTION=1 instead."
            )
        elif not spec.is_deprecated:
            continue
        else:
            if spec.dest == "disable_cuda_graph":
                new = "--cuda-graph-backend-decode=disabled"
            else:
                canon = [o for o in table.by_dest(spec.dest) if not o.is_deprecated]
                new = canon[0].opts[0] if canon else "its replacement"
            text = f"'{name}' is deprecated and will be removed in a future release. Use '{new}' instead."
        out.append(f"\033[1;33m{text}\033[0m" if yellow else text)
    return out


def sim_flag_error(version: str, message: str) -> None:
    """Exit 2 with an argparse-style message for a bad `--sim-*` flag."""
    parser = argparse.ArgumentParser(prog=parser_prog(version), add_help=False)
    parser.print_usage(sys.stderr)
    sys.stderr.write(f"{parser.prog}: error: {message}\n")
    sys.exit(2)
