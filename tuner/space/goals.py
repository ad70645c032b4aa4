"""What a space file asks of a study: its objectives (a metric and its direction, or the SLO capacity
of each launch) and its SLOs (a bound on a metric), as settings models read with line numbers."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, ValidationInfo, model_validator

from tuner.metrics import ALIASES, OPTIMISABLE, Direction, canonical, direction_of
from tuner.settings import Settings, mistake, non_empty, show, space_dir

DIRECTIONS = tuple(d.value for d in Direction)


def _known_metric(metric: object) -> None:
    if isinstance(metric, str) and canonical(metric) not in OPTIMISABLE:
        raise mistake(
            f"unknown metric {show(metric)}; expected one of {', '.join(OPTIMISABLE)} "
            f"(or bench_serving's {', '.join(ALIASES)})"
        )


class Objective(Settings):
    """One value the study optimises; in a space file a metric name, a mapping with its direction, or
    `capacity: {slo: [...], load: ...}` (the SLO capacity of each launch, see CapacitySpec)."""

    metric: str
    direction: str  # "maximize" | "minimize"; in a space file optional: the metric's own (no other)
    capacity: CapacitySpec | None = None  # the load search that measures a capacity metric

    @model_validator(mode="before")
    @classmethod
    def _direction_of_metric(cls, data: Any) -> Any:
        if isinstance(data, str):
            data = {"metric": data}
        if not isinstance(data, dict):
            return data
        if "capacity" in data and "metric" not in data:
            spec = data["capacity"]
            load = spec.get("load", "request_rate") if isinstance(spec, dict) else "request_rate"
            if load not in CAPACITY_METRICS:
                raise mistake(
                    f"expected {' or '.join(CAPACITY_METRICS)} (got {show(load)})", at=("capacity", "load")
                )
            data = {**data, "metric": CAPACITY_METRICS[load]}
        metric = data.get("metric")
        _known_metric(metric)
        if not isinstance(metric, str):
            return data
        metric = canonical(metric)  # bench_serving's name -> the registry's
        data = {**data, "metric": metric}
        better = direction_of(metric).value
        given = data.get("direction", better)
        if given not in DIRECTIONS:
            raise mistake(f"expected one of {', '.join(DIRECTIONS)} (got {show(given)})", at=("direction",))
        if given != better:
            raise mistake(
                f"{metric} is better when it goes the other way; expected {better}", at=("direction",)
            )
        return {**data, "direction": given}


_SLO = re.compile(r"\s*([a-z0-9_]+)\s*(<=|>=|<|>)\s*(-?\d+(?:\.\d+)?(?:e-?\d+)?)\s*")


class Slo(Settings):
    """A feasibility bound on a metric; in a space file a string such as "ttft_p99_ms <= 2000"."""

    metric: str
    op: Literal["<=", ">=", "<", ">"]
    bound: float

    @property
    def name(self) -> str:
        return f"{self.metric}{self.op}{self.bound:g}"

    @classmethod
    def from_name(cls, name: str) -> Slo | None:
        """`min_free_vram_mib>=2048` (`name`, as the study stores it) back into an Slo (None: not one)."""
        for op in ("<=", ">=", "<", ">"):
            metric, found, bound = name.partition(op)
            if found:
                try:
                    return cls.model_validate(f"{metric} {op} {bound}")
                except (ValidationError, ValueError):
                    return None
        return None

    def violation(self, value: float | None) -> float:
        """Optuna constraint value: ≤ 0 when met, else the distance past the bound (1.0 if unmeasured)."""
        if value is None:
            return 1.0
        excess = value - self.bound if self.op in ("<=", "<") else self.bound - value
        if self.op in ("<", ">") and excess == 0:
            return 1e-9
        return excess

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, dict) and space_dir(info) is None:
            _known_metric(data.get("metric"))
            metric = data.get("metric")
            return {**data, "metric": canonical(metric)} if isinstance(metric, str) else data  # built in code
        match = _SLO.fullmatch(data) if isinstance(data, str) else None
        if match is None:
            raise mistake(f'expected "METRIC <= NUMBER" or "METRIC >= NUMBER" (got {show(data)})')
        _known_metric(match.group(1))
        return {"metric": canonical(match.group(1)), "op": match.group(2), "bound": float(match.group(3))}


LoadKnob = Literal["request_rate", "concurrency"]
CAPACITY_METRICS = {"request_rate": "capacity_request_rate", "concurrency": "capacity_concurrency"}


class CapacitySpec(Settings):
    """The SLO capacity objective: the highest load (bench_serving's request_rate or max_concurrency)
    a launch serves within `slo`, found inside each trial's launch by a bracket-and-bisect load search
    that stops when the bracket is within `precision` (relative; one request for a concurrency)."""

    slo: Annotated[tuple[Slo, ...], non_empty("SLO")] = Field(strict=False)
    load: LoadKnob = "request_rate"
    precision: float = Field(default=0.1, gt=0.0, le=1.0)
    repeats: int = Field(default=2, ge=1, le=10)  # runs of each load near the boundary
    max_runs: int = Field(default=12, ge=2, le=64)  # benchmark runs per launch at most
    start: float | None = Field(default=None, gt=0)  # None: the study's capacities so far, the KV pool
    prompts: int | None = Field(default=None, ge=1)  # requests per load point; None: by the load
    # request_rate: requests in flight at most (the client's cap); None: the benchmark load point's
    max_concurrency: int | None = Field(default=None, ge=1, le=4096)

    @property
    def metric(self) -> str:
        return CAPACITY_METRICS[self.load]

    def line(self) -> str:
        """`ttft_p99_ms<=2000, tpot_p99_ms<=50`: the SLOs as the export and status write them."""
        return ", ".join(s.name for s in self.slo)


Objective.model_rebuild()
