"""The highest load a configuration sustains within its SLOs: the search over measured load points (pure).

    start ─ passes? ── yes: double until a point fails ──┐
            └─ no: halve until a point passes ───────────┴─ bisect between the highest passing
                                                            and the lowest failing point

A point passes when every request completed and every SLO holds on the median of its
measurements. Far from the boundary one measurement decides; once the bracket is narrow
(`near`), a point is measured `repeats` times, and the answer (the highest passing load) is
measured again until it has `repeats` measurements, so one lucky run does not set the capacity.
The search ends when the bracket is within `tolerance` (relative; one step for concurrency) or
after `max_points` measurements.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

from tuner.space.goals import Slo


class Knob(str, Enum):
    """What the search raises: the offered request rate (open loop) or the concurrency (closed loop)."""

    REQUEST_RATE = "request_rate"
    CONCURRENCY = "concurrency"

    @property
    def unit(self) -> str:
        return "req/s" if self is Knob.REQUEST_RATE else "concurrent requests"


@dataclass(frozen=True, kw_only=True, slots=True)
class Measurement:
    """One benchmark run at one load: the SLO metrics and whether every request completed."""

    load: float
    values: Mapping[str, float | None]
    completed: int
    failed: int
    died: str | None = None  # the server died under this load (its failure class)


@dataclass(frozen=True, kw_only=True, slots=True)
class PointVerdict:
    """A load judged over its measurements."""

    load: float
    passed: bool
    runs: int
    medians: Mapping[str, float | None]
    why: str  # "" when it passed, else the SLOs missed or the failed requests
    limits: tuple[str, ...] = ()  # what failed it: "slo:<name>", "served_rate", "failed_requests", "died"
    curve: Mapping[str, float | None] = field(default_factory=dict)  # CURVE_METRICS, medians of its runs


@dataclass(frozen=True, kw_only=True, slots=True)
class SearchPlan:
    """How the search goes: where it starts, how far it may go, when it stops."""

    knob: Knob
    start: float
    slos: tuple[Slo, ...]
    repeats: int = 3
    tolerance: float = 0.1  # bracket width relative to the passing load (request rate)
    max_points: int = 16  # measurements in all
    low: float = 0.05  # never below this load
    high: float = 4096.0  # never above this load
    step: float = 2.0  # the factor of each bracketing step (smaller from a close first guess)
    relative: bool = False  # a concurrency's bracket is done within `tolerance` too (else one request)
    near_factor: float = 3.0  # repeats start once the bracket is within this many tolerances

    def near(self, lo: float, hi: float) -> bool:
        """The bracket is narrow enough that each measurement is repeated."""
        if self.knob is Knob.CONCURRENCY and hi - lo <= 4:
            return True
        return hi <= lo * (1 + self.near_factor * self.tolerance)

    def done(self, lo: float, hi: float) -> bool:
        if self.knob is Knob.CONCURRENCY:
            return hi - lo <= (max(1.0, math.floor(self.tolerance * lo)) if self.relative else 1)
        return hi <= lo * (1 + self.tolerance)

    def between(self, lo: float, hi: float) -> float:
        if self.knob is Knob.CONCURRENCY:
            return float(math.floor((lo + hi) / 2))
        return round(math.sqrt(lo * hi), 3)  # geometric: loads span orders of magnitude

    def clamp(self, load: float) -> float:
        load = min(max(load, self.low), self.high)
        return float(max(1, round(load))) if self.knob is Knob.CONCURRENCY else round(load, 3)


SUSTAINED = 0.9  # an offered rate is sustained when at least this share of it was served
# What the capacity curve shows per load (the median of its runs): served throughput and the latency
# percentiles against the offered load; `served_rate` is the rate judged by the served-rate rule.
CURVE_METRICS = (
    "output_throughput",
    "request_throughput",
    "served_rate",
    "ttft_p50_ms",
    "ttft_p90_ms",
    "ttft_p99_ms",
    "tpot_p50_ms",
    "tpot_p90_ms",
    "tpot_p99_ms",
)
# The kinds of limit a load can hit, in the words `CapacityRecord.bound` uses.
LIMITS = {
    "served_rate": f"the served-rate rule (under {SUSTAINED:.0%} of the offered rate served)",
    "failed_requests": "failed requests",
    "died": "the server dying under load",
    "no_request": "no request completing",
}


def served_rate(run: Measurement) -> float | None:
    """Requests served per second while they arrived: completed / (duration − median latency), so
    the last requests' drain after the arrivals end does not read as falling behind."""
    duration = run.values.get("duration_s")
    if duration is None:
        return run.values.get("request_throughput")
    span = duration - (run.values.get("e2e_p50_ms") or 0.0) / 1000.0
    return run.completed / span if span > 0 else None


def judge_point(
    load: float, runs: Sequence[Measurement], slos: Sequence[Slo], knob: Knob = Knob.CONCURRENCY
) -> PointVerdict:
    """Pass when every request of every run completed, each SLO holds on the median of its runs,
    and (for a request rate) the server kept up: it served at least 90% of the offered rate."""
    medians: dict[str, float | None] = {}
    for slo in slos:
        medians[slo.metric] = _median([r.values.get(slo.metric) for r in runs])
    curve = {
        name: _median([r.values.get(name) for r in runs]) for name in CURVE_METRICS if name != "served_rate"
    }
    curve["served_rate"] = _median([served_rate(r) for r in runs])
    missed, limits = [], []
    deaths = sorted({r.died for r in runs if r.died})
    for s in slos:
        if deaths and medians[s.metric] is None:
            continue  # nothing was measured under a load the server died under: its death says it
        if s.violation(medians[s.metric]) > 0:
            missed.append(f"{s.metric}={_show(medians[s.metric])} (want {s.op} {s.bound:g})")
            limits.append(f"slo:{s.name}")
    if knob is Knob.REQUEST_RATE:
        served = curve["served_rate"]
        if served is not None and served < SUSTAINED * load:
            missed.append(f"served {served:,.2f} req/s of {load:g} offered")
            limits.append("served_rate")
    if deaths:
        missed.append(f"the server died under this load ({', '.join(deaths)})")
        limits.append("died")
    failed = sum(r.failed for r in runs)
    if failed:
        missed.append(f"{failed} failed requests")
        limits.append("failed_requests")
    if not any(r.completed for r in runs) and not deaths:
        missed.append("no request completed")
        limits.append("no_request")
    return PointVerdict(
        load=load,
        passed=not missed,
        runs=len(runs),
        medians=medians,
        why="; ".join(missed),
        limits=tuple(limits),
        curve=curve,
    )


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _show(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


@dataclass(kw_only=True, slots=True)
class Search:
    """The search's state: the measurements so far; `next_load` says where to measure next."""

    plan: SearchPlan
    runs: dict[float, list[Measurement]] = field(default_factory=dict)

    def record(self, measurement: Measurement) -> None:
        self.runs.setdefault(measurement.load, []).append(measurement)

    def verdicts(self) -> dict[float, PointVerdict]:
        plan = self.plan
        return {
            load: judge_point(load, runs, plan.slos, plan.knob) for load, runs in sorted(self.runs.items())
        }

    def bracket(self) -> tuple[float | None, float | None]:
        """The highest passing load below the lowest failing one, and that failing load."""
        verdicts = self.verdicts()
        failing = [v.load for v in verdicts.values() if not v.passed]
        hi = min(failing) if failing else None
        passing = [v.load for v in verdicts.values() if v.passed and (hi is None or v.load < hi)]
        return (max(passing) if passing else None), hi

    def measured(self) -> int:
        return sum(len(r) for r in self.runs.values())

    def next_load(self) -> float | None:
        """The load to measure next, or None when the search is over."""
        plan = self.plan
        if self.measured() >= plan.max_points:
            return None
        if not self.runs:
            return plan.clamp(plan.start)
        lo, hi = self.bracket()
        if lo is None:  # nothing passed yet: halve
            assert hi is not None
            down = plan.clamp(hi / plan.step)
            return None if down >= hi else down
        if hi is None:  # nothing failed yet: double
            up = plan.clamp(lo * plan.step)
            return None if up <= lo else up
        for load in (hi, lo):  # near the boundary, each side is measured `repeats` times
            runs = self.runs[load]
            if plan.near(lo, hi) and len(runs) < plan.repeats and not any(r.died for r in runs):
                return load  # (a server that died under a load has answered for it)
        if plan.done(lo, hi):
            return None
        return plan.between(lo, hi)

    def capacity(self) -> float | None:
        """The highest load that passed below every failing one (None if none passed)."""
        return self.bracket()[0]
