"""SearchSpace: a space file read once into frozen values.

    load_space(path)                 -> SearchSpace (ConfigError "<what> in <file>:<line>" on any mistake)

The reading itself lives in source (nodes with line numbers), sections (the run settings as
settings models, validated by validation), params (kinds and encodings), build (params,
conditions, forbidden, baselines) and fixed (fixed flags, env). What uses a space with Optuna
(suggest, config_from_params, parse_set_overrides, enumerate_choices, forbidden_reason) lives in
sampling and is importable from here as well.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tuner.bench.settings import BenchSettings
from tuner.config import FlagValue, LaunchTimeouts
from tuner.errors import ConfigError
from tuner.gate.settings import GateSettings
from tuner.secrets import REDACTED, is_secret_env, is_secret_name, redact_value
from tuner.sglang.knobs import flag_context
from tuner.space.build import Forbidden, parse_baselines, parse_forbidden, parse_params
from tuner.space.fixed import parse_env, parse_fixed_flags
from tuner.space.goals import Objective, Slo
from tuner.space.params import Condition, Param, ParamKind, Target
from tuner.space.sampling import (
    config_from_params,
    enumerate_choices,
    forbidden_reason,
    parse_set_overrides,
    suggest,
)
from tuner.space.sections import Budget, EngineSpec, SamplerSpec, SearchSettings, SpaceFile, WorkerSettings
from tuner.space.source import Section, read_source
from tuner.space.validation import read_settings

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


@dataclass(frozen=True, kw_only=True, slots=True, repr=False)
class SearchSpace:
    """Everything one space file says: what to search, how to launch, measure and judge a trial.

    Built by `load_space`; the defaults of the keys a file leaves out are those of `SpaceFile`.
    """

    name: str
    version: int | str
    description: str
    path: Path
    engine: EngineSpec
    sglang_version: str  # "auto" = the installed release, else pinned ("0.5.9")
    checked_sglang_version: str  # the release whose option table validated this file
    host: str
    fixed_flags: tuple[tuple[str, FlagValue], ...]
    env: tuple[tuple[str, str], ...]
    gpus: tuple[int, ...]  # CUDA_VISIBLE_DEVICES; empty = all
    gpu_busy_policy: str  # "wait" | "fail" | "ignore"
    params: tuple[Param, ...]
    forbidden: tuple[Forbidden, ...]
    baselines: tuple[Mapping[str, object], ...]
    gate: GateSettings
    bench: BenchSettings
    objectives: tuple[Objective, ...]
    constraints: tuple[Slo, ...]
    budget: Budget
    timeouts: LaunchTimeouts
    sampler: SamplerSpec
    search: SearchSettings
    log_dir: Path
    workers: WorkerSettings = field(default_factory=WorkerSettings)

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
        return tuple((k, redact_value(k, v)) for k, v in self.env)

    def redacted_fixed_flags(self) -> tuple[tuple[str, FlagValue], ...]:
        """`fixed_flags` with the values of credential-like flags (api-key, ...) replaced by ***."""
        return tuple((k, REDACTED if is_secret_name(k) else v) for k, v in self.fixed_flags)

    @property
    def secret_values(self) -> tuple[str, ...]:
        """Resolved secret values, for scrubbing logs and exported commands."""
        values = [v for k, v in self.env if is_secret_env(k) and v]
        values += [str(v) for k, v in self.fixed_flags if is_secret_name(k) and isinstance(v, str) and v]
        return tuple(values)

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
    top = Section(src, src.root, "", None)
    doc = read_settings(SpaceFile, top, skip=SpaceFile.line_aware_keys())
    environ = os.environ if environ is None else environ
    try:
        ctx = flag_context(doc.release)
    except ConfigError as exc:
        raise top.error("sglang_version", str(exc)) from None

    if "params" in top and not top.seq("params"):
        raise top.error("params", "expected at least one param to search (got an empty list)")
    params = parse_params(src, top.seq("params"), ctx)
    forbidden = parse_forbidden(src, top.seq("forbidden"), params)
    baselines = parse_baselines(src, top.seq("baselines"), params, forbidden)
    fixed = parse_fixed_flags(top.section("fixed_flags", None), ctx, params, environ)
    if doc.engine.kind == "sglang" and not any(k in ("model-path", "model") for k, _ in fixed):
        raise top.error("fixed_flags", "model-path is required for the sglang engine")
    study = f"{doc.name}-v{doc.version}"
    return SearchSpace(
        name=doc.name,
        version=doc.version,
        description=doc.description,
        path=src.path,
        engine=doc.engine,
        sglang_version=doc.release,
        checked_sglang_version=ctx.checked_version,
        host=doc.host,
        fixed_flags=fixed,
        env=parse_env(top.section("env", None), environ),
        gpus=doc.gpus,
        gpu_busy_policy=doc.gpu_busy_policy,
        params=params,
        forbidden=forbidden,
        baselines=baselines,
        gate=doc.gate,
        bench=doc.bench,
        objectives=doc.objectives,
        constraints=doc.constraints,
        budget=doc.budget,
        timeouts=doc.timeouts,
        sampler=doc.sampler,
        search=doc.search,
        workers=doc.workers,
        log_dir=Path(doc.log_dir) if doc.log_dir is not None else Path("runs") / study,
    )
