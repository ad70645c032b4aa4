"""Reading the run settings of a space file: engine, gate, bench, objectives, SLOs, budget, sampler."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from tuner.bench.settings import Api, BenchSettings, LoadPoint, RequestTimeouts, Workload, WorkloadKind
from tuner.config import LaunchTimeouts
from tuner.gate.settings import DEFAULT_PROMPTS, GatePrompt, GateSettings
from tuner.metrics import DEFAULT_OBJECTIVES, OPTIMISABLE, direction_of
from tuner.sglang.knobs import VERSION_PATTERN
from tuner.space.source import Section, python_value, show

SIM_DEFAULT_SGLANG_VERSION = "0.5.9"



@dataclass(frozen=True, kw_only=True, slots=True)
class EngineSpec:
    """What serves a trial: real SGLang or the simulator, started with the same flags."""

    kind: str  # "sglang" | "sim"
    python: str = sys.executable
    scenario: str | None = None  # sim only: a scenario name or a path to a scenario YAML
    sim_sglang_version: str | None = None  # sim only: the release whose flags and logs it imitates

    @property
    def module(self) -> str:
        """The module launched with `python -m`."""
        return "sglang.launch_server" if self.kind == "sglang" else "tuner.sim"


@dataclass(frozen=True, kw_only=True, slots=True)
class Objective:
    """One value the study optimises."""

    metric: str
    direction: str  # "maximize" | "minimize"


@dataclass(frozen=True, kw_only=True, slots=True)
class Slo:
    """A feasibility bound on a metric, e.g. ttft_p99_ms <= 2000."""

    metric: str
    op: str  # "<=" | ">=" | "<" | ">"
    bound: float

    @property
    def name(self) -> str:
        return f"{self.metric}{self.op}{self.bound:g}"

    def violation(self, value: float | None) -> float:
        """Optuna constraint value: ≤ 0 when met, else the distance past the bound (1.0 if unmeasured)."""
        if value is None:
            return 1.0
        excess = value - self.bound if self.op in ("<=", "<") else self.bound - value
        if self.op in ("<", ">") and excess == 0:
            return 1e-9
        return excess


@dataclass(frozen=True, kw_only=True, slots=True)
class Budget:
    """When a study stops: a number of trials and/or a wall-clock limit."""

    n_trials: int | None = None
    timeout_s: float | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class SamplerSpec:
    """Which Optuna sampler, its seed and random start-up trials."""

    kind: str = "tpe"  # "tpe" | "gp" | "random"
    seed: int | None = None
    n_startup_trials: int = 8


def parse_engine(sec: Section | None, space_dir: Path) -> EngineSpec:
    if sec is None:
        return EngineSpec(kind="sglang")
    kind = sec.get_choice("kind", ["sglang", "sim"])
    allowed = ["kind", "python"] + (["scenario", "sim_sglang_version"] if kind == "sim" else [])
    sec = Section(sec.src, sec.node, sec.where, allowed)
    python = sec.get_str("python", sys.executable)
    if kind == "sglang":
        return EngineSpec(kind=kind, python=python)
    if "scenario" not in sec:
        raise sec.error(
            "scenario", "the sim engine needs a scenario (a name such as tiny-fast, or a .yaml path)"
        )
    scenario = sec.get_str("scenario")
    if scenario.endswith((".yaml", ".yml")):
        path = Path(scenario) if Path(scenario).is_absolute() else space_dir / scenario
        if not path.is_file():
            raise sec.error("scenario", f"scenario file not found: {path}")
        scenario = str(path)
    elif not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", scenario):
        raise sec.error("scenario", f"expected a scenario name or a .yaml path (got {show(scenario)})")
    version = str(sec.raw("sim_sglang_version", SIM_DEFAULT_SGLANG_VERSION))
    if not re.fullmatch(VERSION_PATTERN, version):
        raise sec.error("sim_sglang_version", f"expected a release such as 0.5.9 (got {show(version)})")
    return EngineSpec(kind=kind, python=python, scenario=scenario, sim_sglang_version=version)


_PROMPT_KEYS = ("name", "prompt", "expect", "expect_regex", "max_tokens", "min_tokens")


def parse_gate(sec: Section | None) -> GateSettings:
    if sec is None:
        return GateSettings()
    sec = Section(sec.src, sec.node, sec.where, ["enabled", "prompts", "burst_size", "timeout"])
    defaults = {p.name: p for p in DEFAULT_PROMPTS}
    prompts: list[GatePrompt] = []
    for index, node in enumerate(sec.seq("prompts")):
        p = Section(sec.src, node, f"gate.prompts[{index}]", _PROMPT_KEYS, required=("name",))
        name = p.get_str("name")
        base = defaults.get(name)
        if base is None and "prompt" not in p:
            raise p.error("prompt", f"required for a new prompt (built-in names: {', '.join(defaults)})")
        expect_regex = p.get_str("expect_regex", base.expect_regex if base else None)
        if expect_regex is not None:
            try:
                re.compile(expect_regex)
            except re.error as exc:
                raise p.error("expect_regex", f"not a valid regular expression ({exc})") from None
        max_tokens = p.get_int("max_tokens", base.max_tokens if base else 64, min=1)
        min_tokens = p.get_int("min_tokens", base.min_tokens if base else 1, min=0)
        if min_tokens > max_tokens:
            raise p.error("min_tokens", f"min_tokens must be ≤ max_tokens {max_tokens} (got {min_tokens})")
        if any(q.name == name for q in prompts):
            raise p.error("name", f"duplicate gate prompt {name!r}")
        prompts.append(
            GatePrompt(
                name=name,
                prompt=p.get_str("prompt", base.prompt if base else None),
                expect=p.get_str("expect", base.expect if base else None),
                expect_regex=expect_regex,
                max_tokens=max_tokens,
                min_tokens=min_tokens,
            )
        )
    if "prompts" in sec and not prompts:
        raise sec.error("prompts", "expected at least one prompt (or enabled: false)")
    return GateSettings(
        prompts=tuple(prompts) or DEFAULT_PROMPTS,
        burst_size=sec.get_int("burst_size", None, min=1, nullable=True),
        timeout_s=sec.get_duration("timeout", 600.0),
        enabled=sec.get_bool("enabled", True),
    )


def parse_bench(sec: Section | None, space_dir: Path) -> BenchSettings:
    if sec is None:
        return BenchSettings()
    sec = Section(
        sec.src,
        sec.node,
        sec.where,
        [
            "enabled",
            "workload",
            "load_points",
            "warmup_requests",
            "flush_cache",
            "settle",
            "timeouts",
            "objective_point",
        ],
    )
    workload = Workload()
    w = sec.section("workload", ["kind", "input_len", "output_len", "range_ratio", "path", "api", "seed"])
    if w is not None:
        kind = WorkloadKind(w.get_choice("kind", [k.value for k in WorkloadKind], "random"))
        path = w.get_str("path", None)
        if kind is not WorkloadKind.RANDOM and path is None:
            raise w.error("path", f"a {kind.value} workload needs a path to its dataset")
        resolved = None if path is None else (Path(path) if Path(path).is_absolute() else space_dir / path)
        workload = Workload(
            kind=kind,
            input_len=w.get_int("input_len", 1024, min=1),
            output_len=w.get_int("output_len", 1024, min=1),
            range_ratio=w.get_float("range_ratio", 1.0, above=0.0, max=1.0),
            path=resolved,
            api=Api(w.get_choice("api", [a.value for a in Api], "completions")),
            seed=w.get_int("seed", 1),
        )
    points: list[LoadPoint] = []
    for index, node in enumerate(sec.seq("load_points")):
        p = Section(
            sec.src,
            node,
            f"bench.load_points[{index}]",
            ["concurrency", "request_rate", "burstiness", "num_prompts"],
        )
        points.append(
            LoadPoint(
                concurrency=p.get_int("concurrency", 64, min=1, nullable=True),
                request_rate=p.get_float("request_rate", None, above=0.0, nullable=True),
                burstiness=p.get_float("burstiness", 1.0, above=0.0),
                num_prompts=p.get_int("num_prompts", None, min=1, nullable=True),
            )
        )
    if "load_points" in sec and not points:
        raise sec.error("load_points", "expected at least one load point")
    load_points = tuple(points) or (LoadPoint(concurrency=64),)
    objective_point = sec.get_int("objective_point", -1)
    if not -len(load_points) <= objective_point < len(load_points):
        raise sec.error(
            "objective_point", f"must index one of the {len(load_points)} load points (got {objective_point})"
        )
    timeouts = RequestTimeouts()
    t = sec.section("timeouts", ["connect", "first_byte", "idle_read", "stage_deadline"])
    if t is not None:
        timeouts = RequestTimeouts(
            connect_s=t.get_duration("connect", timeouts.connect_s),
            first_byte_s=t.get_duration("first_byte", timeouts.first_byte_s),
            idle_read_s=t.get_duration("idle_read", timeouts.idle_read_s),
            stage_deadline_s=t.get_duration("stage_deadline", timeouts.stage_deadline_s),
        )
    return BenchSettings(
        workload=workload,
        load_points=load_points,
        warmup_requests=sec.get_int("warmup_requests", None, min=0, nullable=True),
        flush_cache=sec.get_bool("flush_cache", True),
        settle_s=sec.get_duration("settle", 1.0),
        timeouts=timeouts,
        objective_point=objective_point,
        enabled=sec.get_bool("enabled", True),
    )


def parse_objectives(sec: Section) -> tuple[Objective, ...]:
    nodes = sec.seq("objectives")
    if "objectives" not in sec:
        return tuple(Objective(metric=m, direction=direction_of(m).value) for m in DEFAULT_OBJECTIVES)
    if not nodes:
        raise sec.error("objectives", "expected at least one objective")
    out: list[Objective] = []
    for index, node in enumerate(nodes):
        where = f"objectives[{index}]"
        raw = python_value(node)
        if isinstance(raw, str):
            metric, direction, at = raw, None, None
        else:
            o = Section(sec.src, node, where, ["metric", "direction"], required=("metric",))
            metric = o.get_str("metric")
            direction = o.get_choice("direction", ["maximize", "minimize"], None)
            at = o
        if metric not in OPTIMISABLE:
            raise sec.src.error(
                node, where, f"unknown metric {show(metric)}; expected one of {', '.join(OPTIMISABLE)}"
            )
        better = direction_of(metric).value
        if direction is not None and direction != better and at is not None:
            raise at.error("direction", f"{metric} is better when it goes the other way; expected {better}")
        if any(o.metric == metric for o in out):
            raise sec.src.error(node, where, f"duplicate objective {metric}")
        out.append(Objective(metric=metric, direction=better))
    return tuple(out)


_SLO = re.compile(r"\s*([a-z0-9_]+)\s*(<=|>=|<|>)\s*(-?\d+(?:\.\d+)?(?:e-?\d+)?)\s*")


def parse_constraints(sec: Section) -> tuple[Slo, ...]:
    out: list[Slo] = []
    for index, node in enumerate(sec.seq("constraints")):
        raw = python_value(node)
        where = f"constraints[{index}]"
        match = _SLO.fullmatch(raw) if isinstance(raw, str) else None
        if match is None:
            raise sec.src.error(
                node, where, f'expected "METRIC <= NUMBER" or "METRIC >= NUMBER" (got {show(raw)})'
            )
        metric, op, bound = match.group(1), match.group(2), float(match.group(3))
        if metric not in OPTIMISABLE:
            raise sec.src.error(
                node, where, f"unknown metric {metric!r}; expected one of {', '.join(OPTIMISABLE)}"
            )
        out.append(Slo(metric=metric, op=op, bound=bound))
    return tuple(out)


def parse_budget(sec: Section | None) -> Budget:
    if sec is None:
        return Budget()
    sec = Section(sec.src, sec.node, sec.where, ["n_trials", "timeout"])
    return Budget(
        n_trials=sec.get_int("n_trials", None, min=1, nullable=True),
        timeout_s=sec.get_duration("timeout", None, nullable=True),
    )


_LAUNCH_KEYS = ("startup", "idle_log", "ready_poll", "sigint_grace", "sigterm_grace", "release")


def parse_timeouts(sec: Section | None) -> LaunchTimeouts:
    if sec is None:
        return LaunchTimeouts()
    sec = Section(sec.src, sec.node, sec.where, _LAUNCH_KEYS)
    base = LaunchTimeouts()
    values = {}
    for key in _LAUNCH_KEYS:
        seconds = sec.get_duration(key, getattr(base, f"{key}_s"))
        if key in sec and seconds <= 0:
            raise sec.error(key, f"must be > 0 (got {seconds:g} s)")
        values[f"{key}_s"] = seconds
    return LaunchTimeouts(**values)


def parse_sampler(sec: Section | None) -> SamplerSpec:
    if sec is None:
        return SamplerSpec()
    sec = Section(sec.src, sec.node, sec.where, ["kind", "seed", "n_startup_trials"])
    return SamplerSpec(
        kind=sec.get_choice("kind", ["tpe", "gp", "random"], "tpe"),
        seed=sec.get_int("seed", None, min=0, nullable=True),
        n_startup_trials=sec.get_int("n_startup_trials", 8, min=0),
    )
