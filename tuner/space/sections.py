"""The run settings of a space file, each section declared once as a settings model.

`SpaceFile` is the whole document: its keys (in the order the spec lists them), their defaults
and checks. Engine, objectives, SLOs, budget and sampler are declared here; gate, bench and
launch timeouts beside the stages that use them (tuner.gate.settings, tuner.bench.settings,
tuner.config). The searched part and the fixed launch (params, forbidden, baselines,
fixed_flags, env) are checked against the SGLang option table by the line-aware readers in
tuner.space.build and tuner.space.fixed; `SpaceFile` only declares those keys.
"""

from __future__ import annotations

import re
import socket
import sys
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BeforeValidator, Field, ValidationInfo, field_validator, model_validator

from tuner.bench.settings import BenchSettings
from tuner.config import LaunchTimeouts
from tuner.errors import ConfigError
from tuner.gate.settings import GateSettings
from tuner.metrics import DEFAULT_OBJECTIVES
from tuner.names import NAME_PATTERN, control_problem
from tuner.settings import Duration, Settings, mistake, non_empty, show, space_dir
from tuner.sglang.knobs import VERSION_PATTERN, check_version_text
from tuner.space.field_checks import gpus_field as _gpus
from tuner.space.field_checks import space_name_field as _space_name
from tuner.space.field_checks import version_field as _version
from tuner.space.goals import CAPACITY_METRICS, Objective, Slo
from tuner.space.sim_inject import sim_inject_problem

SIM_DEFAULT_SGLANG_VERSION = "0.5.9"


def _release(value: object) -> object:
    """A release number written as text or as a YAML number."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return value


class EngineSpec(Settings):
    """What serves a trial: real SGLang or the simulator, started with the same flags."""

    SIM_ONLY: ClassVar[tuple[str, ...]] = ("scenario", "sim_sglang_version", "gpu_backed", "sim_inject")

    kind: Literal["sglang", "sim"]
    python: str = Field(default=sys.executable, min_length=1)
    scenario: str | None = Field(default=None, min_length=1)  # sim only: a name or a scenario YAML path
    # sim only: the release whose flags and logs it imitates
    sim_sglang_version: Annotated[str | None, BeforeValidator(_release)] = Field(
        default=None,
        pattern=f"^(?:{VERSION_PATTERN})$",
        json_schema_extra={"expected": "a release such as 0.5.9"},
    )
    # sim only: hold real GPU memory for the model (torch) and read it through NVML
    gpu_backed: bool = False
    # sim only: faults to inject, each KEY=VALUE as `--sim-inject` takes it (http_error_rate=0.5, ...)
    sim_inject: tuple[Annotated[str, Field(pattern=r"^[a-z_]+=[A-Za-z0-9_.:-]+$")], ...] = Field(
        default=(), strict=False
    )

    @field_validator("sim_inject")
    @classmethod
    def _known_injections(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for item in value:
            problem = sim_inject_problem(item)
            if problem:
                raise ValueError(problem)
        return value

    @property
    def module(self) -> str:
        """The module launched with `python -m`."""
        return "sglang.launch_server" if self.kind == "sglang" else "tuner.sim"

    @model_validator(mode="before")
    @classmethod
    def _sim_keys(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, dict):
            return data
        if data.get("kind") == "sglang":
            for key in cls.SIM_ONLY:
                if key in data:
                    allowed = [k for k in cls.file_keys() if k not in cls.SIM_ONLY]
                    raise mistake(f"unknown key; allowed: {', '.join(allowed)}", at=(key,))
        if data.get("kind") != "sim":
            return data
        if data.get("scenario") is None:
            needs = "the sim engine needs a scenario (a name such as tiny-fast, or a .yaml path)"
            raise mistake(needs, at=("scenario",))
        version = data.get("sim_sglang_version")
        return {
            **data,
            "scenario": _scenario(data["scenario"], space_dir(info)),
            "sim_sglang_version": SIM_DEFAULT_SGLANG_VERSION if version is None else version,
        }


def _scenario(scenario: object, folder: Path | None) -> object:
    """A scenario name, or the path of a scenario file (relative to the space file's folder)."""
    if not isinstance(scenario, str):
        return scenario
    if scenario.endswith((".yaml", ".yml")):
        if folder is None:
            return scenario
        path = Path(scenario) if Path(scenario).is_absolute() else folder / scenario
        if not path.is_file():
            raise mistake(f"scenario file not found: {path}", at=("scenario",))
        return str(path)
    if not re.fullmatch(NAME_PATTERN, scenario):
        raise mistake(f"expected a scenario name or a .yaml path (got {show(scenario)})", at=("scenario",))
    return scenario





class Budget(Settings):
    """When a study stops: a number of trials and/or a wall-clock limit, or a machine that keeps failing.

    After an infrastructure fault (port taken, GPUs held, server killed from outside) the next
    trial waits `infra_backoff_s`, doubling up to `infra_backoff_max_s`; after
    `max_infra_failures` in a row the run stops (the study stays resumable).
    """

    n_trials: int | None = Field(default=None, ge=1, le=1_000_000)
    timeout_s: Duration | None = Field(default=None, gt=0, validation_alias="timeout")
    parallel: int = Field(default=1, ge=1, le=1_024)  # trials at once on one node, on disjoint GPU sets
    max_infra_failures: int = Field(default=3, ge=1, le=10_000)
    infra_backoff_s: Duration = Field(default=2.0, validation_alias="infra_backoff")
    infra_backoff_max_s: Duration = Field(default=60.0, validation_alias="infra_backoff_max")


class WorkerSettings(Settings):
    """How workers sharing a study watch each other: heartbeats of running trials, retries of lost ones."""

    heartbeat_s: Duration = Field(default=60.0, ge=1, validation_alias="heartbeat")
    # No heartbeat for this long: the trial's worker is taken for dead (its node, its process) and
    # the next worker to ask fails the trial and retries it. Generous: a live trial reaped ends badly.
    grace_s: Duration = Field(default=900.0, ge=2, validation_alias="grace")
    # of a trial whose worker died or an infrastructure fault ended
    retries: int = Field(default=1, ge=0, le=100)

    @model_validator(mode="after")
    def _grace_covers_beats(self) -> WorkerSettings:
        if self.grace_s < 2 * self.heartbeat_s:
            raise mistake(
                f"must be at least twice heartbeat ({self.heartbeat_s:g} s), got {self.grace_s:g} s",
                at=("grace",),
            )
        return self


class SamplerSpec(Settings):
    """Which Optuna sampler, its seed and random start-up trials."""

    kind: Literal["structured", "tpe", "gp", "random"] = "structured"
    seed: int | None = Field(default=None, ge=0, le=2**32 - 1)  # numpy's samplers take seeds below 2**32
    n_startup_trials: int = Field(default=8, ge=0, le=100_000)


class Finalists(Settings):
    """Near the end of the budget, the best front candidates are launched again (counted in the budget)."""

    count: int = Field(default=3, ge=0, le=1_000)  # candidates re-measured; 0 turns it off
    repeats: int = Field(default=1, ge=0, le=100)  # launches of each, on top of its first measurement
    capacity: bool = False  # after the budget, `tuner capacity` for each finalist under the space's SLOs
    # only candidates within this share of the best first objective are re-measured (noise is ~1-5%)
    margin: float = Field(default=0.05, ge=0)


class SearchSettings(Settings):
    """How the study learns from failures (see tuner/search)."""

    prune: bool = True  # suggestions a failure rule or the memory model covers are not launched
    finalists: Finalists = Field(default_factory=Finalists)
    # asks in a row all pruned: the space is exhausted
    max_pruned_asks: int = Field(default=200, ge=1, le=1_000_000)


class LineAware:
    """Marks a key of `SpaceFile` whose value the line-aware readers check (params, fixed flags, ...)."""


LINE_AWARE = LineAware()
ReadByLine = Annotated[object, LINE_AWARE]


def _sglang_version(value: object) -> object:
    text = _release(value)
    try:
        check_version_text(text if isinstance(text, str) else "")
    except ConfigError as exc:
        raise mistake(f"{exc} (got {show(value)})") from None
    return text


def _default_objectives() -> tuple[Objective, ...]:
    return tuple(Objective.model_validate(m) for m in DEFAULT_OBJECTIVES)


_HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.\-]*[A-Za-z0-9])?|\[?[0-9A-Fa-f:.]+\]?")


class SpaceFile(Settings):
    """A whole space file: every top-level key, its default and its checks (see template.yaml)."""

    name: Annotated[str, AfterValidator(_space_name)] = Field(
        pattern=f"^{NAME_PATTERN}$", json_schema_extra={"expected": "a name of letters, digits, _ . -"}
    )
    version: Annotated[int | str, BeforeValidator(_version)] = 1
    description: str = Field(default="", json_schema_extra={"expected": "text"})
    engine: EngineSpec = EngineSpec(kind="sglang")
    # auto = the installed release; else pinned ("0.5.9"). For the sim: its sim_sglang_version.
    sglang_version: Annotated[str, BeforeValidator(_sglang_version)] = "auto"
    host: str = Field(default="127.0.0.1", min_length=1, max_length=253)
    fixed_flags: ReadByLine = None
    env: ReadByLine = None
    gpus: Annotated[tuple[int, ...], BeforeValidator(_gpus)] = ()  # CUDA_VISIBLE_DEVICES; () = all
    gpu_busy_policy: Literal["wait", "fail", "ignore"] = "wait"
    params: ReadByLine = None
    forbidden: ReadByLine = None
    baselines: ReadByLine = None
    gate: GateSettings = Field(default_factory=GateSettings)
    bench: BenchSettings = Field(default_factory=BenchSettings)
    objectives: Annotated[tuple[Objective, ...], non_empty("objective")] = Field(
        default_factory=_default_objectives, strict=False
    )
    constraints: tuple[Slo, ...] = Field(default=(), strict=False)
    budget: Budget = Field(default_factory=Budget)
    timeouts: LaunchTimeouts = Field(default_factory=LaunchTimeouts)
    sampler: SamplerSpec = Field(default_factory=SamplerSpec)
    search: SearchSettings = Field(default_factory=SearchSettings)
    workers: WorkerSettings = Field(default_factory=WorkerSettings)
    log_dir: str | None = Field(default=None, min_length=1, max_length=4096)  # None = runs/<study name>

    @field_validator("host")
    @classmethod
    def _resolvable_host(cls, value: str) -> str:
        if not _HOST.fullmatch(value):
            raise ValueError(
                f"expected a host name or an IP address such as 127.0.0.1, no scheme, port or spaces "
                f"(got {show(value[:60])})"
            )
        try:  # the server binds it and the clients reach it: a name nothing resolves is a mistake now
            socket.getaddrinfo(value.strip("[]"), None, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            why = getattr(exc, "strerror", None) or exc
            raise ValueError(f"cannot resolve host {value!r} ({why})") from None
        return value

    @field_validator("log_dir")
    @classmethod
    def _printable_log_dir(cls, value: str | None) -> str | None:
        problem = control_problem(value) if value is not None else None
        if problem:  # a NUL or a newline cannot be a folder's name the tool writes into
            raise ValueError(problem)
        return value

    @field_validator("constraints", mode="before")
    @classmethod
    def _no_constraints(cls, value: object) -> object:
        return () if value is None else value

    @field_validator("objectives")
    @classmethod
    def _objectives_differ(cls, objectives: tuple[Objective, ...]) -> tuple[Objective, ...]:
        for index, o in enumerate(objectives):
            if any(p.metric == o.metric for p in objectives[:index]):
                raise mistake(f"duplicate objective {o.metric}", at=(index,))
            if o.metric in CAPACITY_METRICS.values() and o.capacity is None:
                raise mistake(
                    f"{o.metric} is measured by a load search; expected "
                    "`capacity: {slo: [ttft_p99_ms <= 2000], load: request_rate}`",
                    at=(index,),
                )
            rate_search = any(p.capacity and p.capacity.load == "request_rate" for p in objectives)
            if o.metric == "capacity_request_rate_per_gpu" and not rate_search:
                raise mistake(
                    "capacity_request_rate_per_gpu needs a capacity objective with load: request_rate",
                    at=(index,),
                )
            if o.capacity is not None and any(p.capacity is not None for p in objectives[:index]):
                raise mistake("one capacity objective at most (one load search per launch)", at=(index,))
        return objectives

    @model_validator(mode="after")
    def _sim_release(self) -> SpaceFile:
        simulated = self.engine.sim_sglang_version
        if self.engine.kind == "sim" and self.sglang_version not in ("auto", simulated):
            raise mistake(
                f"{self.sglang_version} differs from engine.sim_sglang_version {simulated}; "
                "for the sim set only the latter",
                at=("sglang_version",),
            )
        return self

    @property
    def release(self) -> str:
        """The SGLang release the file is checked against: for the sim, the one it imitates."""
        if self.engine.kind == "sim" and self.engine.sim_sglang_version is not None:
            return self.engine.sim_sglang_version
        return self.sglang_version

    @classmethod
    def line_aware_keys(cls) -> frozenset[str]:
        """The keys the line-aware readers check after the model (params, fixed_flags, ...)."""
        return frozenset(name for name, f in cls.model_fields.items() if LINE_AWARE in f.metadata)
