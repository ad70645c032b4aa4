"""SearchSpace: a space file read once into frozen values, and its use with Optuna.

    load_space(path)                 -> SearchSpace (ConfigError "<what> in <file>:<line>" on any mistake)
    suggest(space, trial)            -> (TrialConfig, params)   define-by-run, conditions honoured
    config_from_params(space, p)     -> TrialConfig             baselines, --set, retries, export
    parse_set_overrides(space, kvs)  -> params                  "name=value" strings from the command line
    enumerate_choices(space)         -> params dicts covering every choice and both ends of each range
    forbidden_reason(space, params)  -> why a combination must not be launched, or None

The reading itself lives in space_yaml (nodes with line numbers), space_params (kinds and
encodings), space_build (params, conditions, forbidden, baselines), space_fixed (fixed flags, env) and
space_sections (engine, gate, bench, objectives, SLOs, budget, sampler).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna

from tuner.bench.settings import BenchSettings
from tuner.config import CudaGraph, FlagValue, LaunchTimeouts, TrialConfig
from tuner.errors import ConfigError
from tuner.gate.settings import GateSettings
from tuner.sglang.knobs import check_version_text, flag_context
from tuner.space.build import (
    Forbidden,
    forbidden_match,
    parse_baselines,
    parse_forbidden,
    parse_params,
)
from tuner.space.fixed import is_secret, parse_env, parse_fixed_flags
from tuner.space.params import (
    Condition,
    Param,
    ParamKind,
    Target,
    clean_float,
    condition_holds,
    decode_cuda_graph,
    encode_value,
    parse_text,
    show_choice,
    split_backend_pair,
)
from tuner.space.sections import (
    Budget,
    EngineSpec,
    Objective,
    SamplerSpec,
    Slo,
    parse_bench,
    parse_budget,
    parse_constraints,
    parse_engine,
    parse_gate,
    parse_objectives,
    parse_sampler,
    parse_timeouts,
)
from tuner.space.source import Section, read_source, show

__all__ = [
    "Budget",
    "Condition",
    "EngineSpec",
    "Forbidden",
    "Objective",
    "Param",
    "ParamKind",
    "SamplerSpec",
    "SearchSpace",
    "Slo",
    "Target",
    "config_from_params",
    "enumerate_choices",
    "forbidden_reason",
    "load_space",
    "parse_set_overrides",
    "suggest",
]

REDACTED = "***"

TOP_KEYS = (
    "name",
    "version",
    "description",
    "engine",
    "sglang_version",
    "host",
    "fixed_flags",
    "env",
    "gpus",
    "gpu_busy_policy",
    "params",
    "forbidden",
    "baselines",
    "gate",
    "bench",
    "objectives",
    "constraints",
    "budget",
    "timeouts",
    "sampler",
    "log_dir",
)


@dataclass(frozen=True, kw_only=True, slots=True, repr=False)
class SearchSpace:
    """Everything one space file says: what to search, how to launch, measure and judge a trial."""

    name: str
    version: int | str = 1
    description: str = ""
    path: Path
    engine: EngineSpec
    sglang_version: str = "auto"  # "auto" = the installed release, else pinned ("0.5.9")
    checked_sglang_version: str  # the release whose option table validated this file
    host: str = "127.0.0.1"
    fixed_flags: tuple[tuple[str, FlagValue], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    gpus: tuple[int, ...] = ()  # CUDA_VISIBLE_DEVICES; empty = all
    gpu_busy_policy: str = "wait"  # "wait" | "fail" | "ignore"
    params: tuple[Param, ...] = ()
    forbidden: tuple[Forbidden, ...] = ()
    baselines: tuple[Mapping[str, object], ...] = ()
    gate: GateSettings = field(default_factory=GateSettings)
    bench: BenchSettings = field(default_factory=BenchSettings)
    objectives: tuple[Objective, ...] = ()
    constraints: tuple[Slo, ...] = ()
    budget: Budget = field(default_factory=Budget)
    timeouts: LaunchTimeouts = field(default_factory=LaunchTimeouts)
    sampler: SamplerSpec = field(default_factory=SamplerSpec)
    log_dir: Path

    @property
    def study_name(self) -> str:
        """The Optuna study name: one study per space version (categorical choices are frozen per study)."""
        return f"{self.name}-v{self.version}"

    @property
    def directions(self) -> tuple[str, ...]:
        return tuple(o.direction for o in self.objectives)

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    def redacted_env(self) -> tuple[tuple[str, str], ...]:
        """`env` with the values of TOKEN/KEY/SECRET/PASSWORD-like names replaced by ***."""
        return tuple((k, REDACTED if is_secret(k) else v) for k, v in self.env)

    def redacted_fixed_flags(self) -> tuple[tuple[str, FlagValue], ...]:
        """`fixed_flags` with the values of credential-like flags (api-key, ...) replaced by ***."""
        return tuple((k, REDACTED if is_secret(k) else v) for k, v in self.fixed_flags)

    @property
    def secret_values(self) -> tuple[str, ...]:
        """Resolved secret values, for scrubbing logs and exported commands."""
        values = [v for k, v in self.env if is_secret(k) and v]
        values += [str(v) for k, v in self.fixed_flags if is_secret(k) and isinstance(v, str) and v]
        return tuple(values)

    @property
    def fingerprint(self) -> str:
        """A hash of names, kinds, ranges, choices and conditions: when it changes, bump `version`."""
        shape = [
            [
                p.name,
                p.kind.value,
                p.flag,
                p.low,
                p.high,
                p.step,
                p.log,
                list(p.choices),
                [[c.param, list(c.values)] for c in p.when],
            ]
            for p in self.params
        ]
        return hashlib.sha256(json.dumps(shape, sort_keys=True, default=str).encode()).hexdigest()[:16]

    def __repr__(self) -> str:
        return (
            f"SearchSpace(study_name={self.study_name!r}, path={str(self.path)!r}, engine={self.engine!r}, "
            f"sglang_version={self.sglang_version!r}, fixed_flags={self.redacted_fixed_flags()!r}, "
            f"env={self.redacted_env()!r}, params={[p.name for p in self.params]!r}, "
            f"objectives={[o.metric for o in self.objectives]!r}, budget={self.budget!r})"
        )


def load_space(path: str | Path, *, environ: Mapping[str, str] | None = None) -> SearchSpace:
    """Read and check a space file; every mistake raises ConfigError naming file and line."""
    src = read_source(path)
    top = Section(src, src.root, "", TOP_KEYS, required=("name",))
    space_dir = src.path.parent
    environ = os.environ if environ is None else environ

    name = top.get_str("name", pattern=r"[A-Za-z0-9][A-Za-z0-9_.-]*", what="a name of letters, digits, _ . -")
    version = top.raw("version", 1)
    if isinstance(version, bool) or not isinstance(version, (int, str)) or not str(version).strip():
        raise top.error("version", f"expected an integer or a short string (got {show(version)})")
    engine = parse_engine(top.section("engine", None), space_dir)
    sglang_version = _sglang_version(top, engine)
    try:
        ctx = flag_context(sglang_version)
    except ConfigError as exc:
        raise top.error("sglang_version", str(exc)) from None

    params = parse_params(src, top.seq("params"), ctx)
    forbidden = parse_forbidden(src, top.seq("forbidden"), params)
    baselines = parse_baselines(src, top.seq("baselines"), params, forbidden)
    fixed = parse_fixed_flags(top.section("fixed_flags", None), ctx, params, environ)
    if engine.kind == "sglang" and not any(k in ("model-path", "model") for k, _ in fixed):
        raise top.error("fixed_flags", "model-path is required for the sglang engine")
    gpus = _gpus(top)
    return SearchSpace(
        name=name,
        version=version,
        description=_description(top),
        path=src.path,
        engine=engine,
        sglang_version=sglang_version,
        checked_sglang_version=ctx.checked_version,
        host=top.get_str("host", "127.0.0.1"),
        fixed_flags=fixed,
        env=parse_env(top.section("env", None), environ),
        gpus=gpus,
        gpu_busy_policy=top.get_choice("gpu_busy_policy", ["wait", "fail", "ignore"], "wait"),
        params=params,
        forbidden=forbidden,
        baselines=baselines,
        gate=parse_gate(top.section("gate", None)),
        bench=parse_bench(top.section("bench", None), space_dir),
        objectives=parse_objectives(top),
        constraints=parse_constraints(top),
        budget=parse_budget(top.section("budget", None)),
        timeouts=parse_timeouts(top.section("timeouts", None)),
        sampler=parse_sampler(top.section("sampler", None)),
        log_dir=Path(top.get_str("log_dir", str(Path("runs") / f"{name}-v{version}"))),
    )


def _sglang_version(top: Section, engine: EngineSpec) -> str:
    raw = top.raw("sglang_version", "auto")
    version = str(raw) if isinstance(raw, (str, int, float)) and not isinstance(raw, bool) else ""
    try:
        check_version_text(version)
    except ConfigError as exc:
        raise top.error("sglang_version", f"{exc} (got {show(raw)})") from None
    if engine.kind == "sim":
        assert engine.sim_sglang_version is not None
        if version not in ("auto", engine.sim_sglang_version):
            raise top.error(
                "sglang_version",
                f"{version} differs from engine.sim_sglang_version "
                f"{engine.sim_sglang_version}; for the sim set only the latter",
            )
        return engine.sim_sglang_version
    return version


def _description(top: Section) -> str:
    text = top.raw("description", "")
    if not isinstance(text, str):
        raise top.error("description", f"expected text (got {show(text)})")
    return text


def _gpus(top: Section) -> tuple[int, ...]:
    raw = top.raw("gpus", "all")
    if raw in ("all", None):
        return ()
    if not isinstance(raw, list) or any(isinstance(g, bool) or not isinstance(g, int) or g < 0 for g in raw):
        raise top.error("gpus", f"expected all or a list of GPU indices such as [0, 1] (got {show(raw)})")
    if len(set(raw)) != len(raw):
        raise top.error("gpus", f"duplicate GPU index in {raw}")
    return tuple(raw)


# --- Optuna ---------------------------------------------------------------------------------------


def suggest(space: SearchSpace, trial: optuna.trial.BaseTrial) -> tuple[TrialConfig, dict[str, object]]:
    """Ask `trial` for every active param (define-by-run) and build the TrialConfig."""
    values: dict[str, Any] = {}
    for p in space.params:
        if not condition_holds(p, values):
            continue
        if p.kind in (ParamKind.FLOAT, ParamKind.INT):
            assert p.low is not None and p.high is not None
            if p.kind is ParamKind.FLOAT:
                values[p.name] = trial.suggest_float(p.name, p.low, p.high, step=p.step, log=p.log)
            else:
                step = int(p.step or 1)
                values[p.name] = trial.suggest_int(p.name, int(p.low), int(p.high), step=step, log=p.log)
        else:
            values[p.name] = trial.suggest_categorical(p.name, p.choices)
    return _build(space, values), values


def config_from_params(space: SearchSpace, params: Mapping[str, object]) -> TrialConfig:
    """The TrialConfig of a full params dict; ConfigError for unknown names, missing or bad values.

    Params whose condition does not hold are ignored (a `--set` may switch a parent off).
    """
    known = {p.name for p in space.params}
    unknown = [k for k in params if k not in known]
    if unknown:
        raise ConfigError(f"unknown param {unknown[0]!r} for {space.study_name}; known: {', '.join(known)}")
    values: dict[str, Any] = {}
    for p in space.params:
        if not condition_holds(p, values):
            continue
        if p.name not in params:
            raise ConfigError(f"param {p.name!r} is missing; expected {p.describe()} ({p.source})")
        value = params[p.name]
        try:
            value = encode_value(p, value)
        except ValueError as exc:
            raise ConfigError(f"param {p.name}: expected {exc} (got {show(value)}) ({p.source})") from None
        if not p.contains(value):
            raise ConfigError(
                f"param {p.name}: {show_choice(value)} is outside the space; "
                f"expected {p.describe()} ({p.source})"
            )
        values[p.name] = value
    return _build(space, values)


def _build(space: SearchSpace, values: Mapping[str, Any]) -> TrialConfig:
    mem: float | None = None
    graph: CudaGraph | None = None
    prefill = decode = None
    flags: list[tuple[str, FlagValue]] = []
    for p in space.params:
        if p.name not in values:
            continue
        value = values[p.name]
        if p.kind is ParamKind.FLOAT:
            value = clean_float(p, float(value))
        if p.target is Target.MEM_FRACTION:
            mem = float(value)
        elif p.target is Target.CUDA_GRAPH:
            graph = decode_cuda_graph(value)
        elif p.target is Target.BACKEND_PAIR:
            prefill, decode = split_backend_pair(value)
        elif value is not None:
            flags.append((p.flag or p.name, value))
    return TrialConfig(
        mem_fraction_static=mem,
        cuda_graph=graph,
        sparse_prefill_backend=prefill,
        sparse_decode_backend=decode,
        flags=tuple(flags),
    )


def forbidden_reason(space: SearchSpace, params: Mapping[str, object]) -> str | None:
    """Why this combination must not be launched (a `forbidden:` entry matches), or None."""
    hit = forbidden_match(space.forbidden, params)
    return None if hit is None else f"{hit.reason} ({hit.source})"


def parse_set_overrides(space: SearchSpace, items: Iterable[str]) -> dict[str, object]:
    """`["mem-fraction-static=0.9", "cuda_graph=off"]` -> encoded params; ConfigError on any bad item."""
    out: dict[str, object] = {}
    by_name = {p.name: p for p in space.params}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: expected NAME=VALUE")
        param = by_name.get(key)
        if param is None:
            raise ConfigError(f"--set {item!r}: unknown param {key!r}; known: {', '.join(by_name)}")
        if key in out:
            raise ConfigError(f"--set {item!r}: {key} is set twice")
        try:
            value = parse_text(param, text)
        except ValueError as exc:
            raise ConfigError(f"--set {item!r}: expected {exc} for {key}") from None
        if not param.contains(value):
            raise ConfigError(
                f"--set {item!r}: {show_choice(value)} is outside the space of {key}; "
                f"expected {param.describe()} ({param.source})"
            )
        out[key] = value
    return out


def enumerate_choices(space: SearchSpace) -> Iterator[dict[str, object]]:
    """Params dicts, baselines first, that together hold every choice and both ends of every range.

    Combinations a `forbidden:` entry matches are skipped or varied; duplicates are dropped.
    """
    seen: set[str] = set()

    def fresh(values: dict[str, object]) -> bool:
        key = json.dumps(values, sort_keys=True, default=str)
        if key in seen:
            return False
        seen.add(key)
        return True

    for baseline in space.baselines:
        values = dict(baseline)
        if fresh(values):
            yield values
    for p in space.params:
        for value in p.ends():
            found = _complete(space, {p.name: value})
            if found is not None and fresh(found):
                yield found


def _complete(space: SearchSpace, pinned: dict[str, Any]) -> dict[str, object] | None:
    """A full params dict holding `pinned` (and what its conditions need), avoiding forbidden combos."""
    wanted = dict(pinned)
    by_name = {p.name: p for p in space.params}
    stack = [by_name[n] for n in pinned]
    while stack:  # make the conditions of pinned params (and theirs) hold
        p = stack.pop()
        for cond in p.when:
            if cond.param not in wanted:
                wanted[cond.param] = cond.values[0]
                stack.append(by_name[cond.param])
    base = _fill(space, wanted, {})
    if base is None or forbidden_match(space.forbidden, base) is None:
        return base
    for p in space.params:  # vary one free param at a time until nothing forbidden matches
        if p.name in wanted:
            continue
        for alt in p.ends()[1:]:
            candidate = _fill(space, wanted, {p.name: alt})
            if candidate is not None and forbidden_match(space.forbidden, candidate) is None:
                return candidate
    return None


def _fill(
    space: SearchSpace, wanted: Mapping[str, Any], extra: Mapping[str, Any]
) -> dict[str, object] | None:
    values: dict[str, object] = {}
    for p in space.params:
        if not condition_holds(p, values):
            if p.name in wanted:
                return None
            continue
        values[p.name] = wanted.get(p.name, extra.get(p.name, p.ends()[0]))
    return values
