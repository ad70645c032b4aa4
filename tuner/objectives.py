"""Judging a trial: from a TrialResult to its outcome, objective values and constraints (pure).

`judge` is computed once per trial and stored as is: the store's row, Optuna's tell and every
report read the same verdict. A configuration that crashed, ran out of memory or failed the
gate is infeasible (constraint `failure` > 0); Optuna is told it as FAIL without values
(tuner.search.told), while the verdict keeps pessimistic but plausible values for the live
display and the row, never a score that could rank best (0.0 is the floor of a maximised
objective; a minimised latency gets the worst one seen, doubled). A measured trial that misses
an SLO is `slo_violation`: COMPLETE with its measured values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from tuner.bench.goodput import point_goodput
from tuner.config import Outcome, Verdict
from tuner.metrics import Direction, trial_values
from tuner.result import TrialResult
from tuner.space.goals import Objective, Slo

FAILURE_CONSTRAINT = "failure"
PESSIMISTIC_LATENCY_MS = 600_000.0


def judge(
    result: TrialResult,
    objectives: Sequence[Objective],
    slos: Sequence[Slo],
    *,
    worst_seen: Mapping[str, float] | None = None,
) -> Verdict:
    """The verdict on one result under the study's objectives and SLOs."""
    metrics = {**trial_values(result), **goodput_values(result, latency_bounds(slos))}
    constraints = constraint_values(metrics, slos, failed=not result.ok)
    feasible = result.ok and is_feasible(constraints)
    outcome = Outcome.SLO_VIOLATION if result.ok and not feasible else result.outcome
    values = objective_values(metrics, objectives, measured=result.ok, worst_seen=worst_seen or {})
    return Verdict(
        outcome=outcome, values=values, constraints=constraints, feasible=feasible, metrics=metrics
    )


def latency_bounds(slos: Sequence[Slo]) -> dict[str, float]:
    """bench_serving's `--goodput` bounds (ttft, tpot, e2el in ms) the space's latency constraints set:
    a constraint on any percentile of TTFT, TPOT or E2E latency bounded from above (`ttft_p99_ms <=
    2000`) bounds each request's value of that latency; the tightest bound of a family wins."""
    out: dict[str, float] = {}
    for slo in slos:
        family = slo.metric.split("_", 1)[0]
        key = {"ttft": "ttft", "tpot": "tpot", "e2e": "e2el"}.get(family)
        if key is not None and slo.metric.endswith("_ms") and slo.op in ("<=", "<"):
            out[key] = min(slo.bound, out.get(key, slo.bound))
    return out


def goodput_values(result: TrialResult, bounds: Mapping[str, float]) -> dict[str, float | None]:
    """`request_goodput` and `slo_attainment` of the objective load point under `bounds` (None when
    unbounded or unmeasured)."""
    point = None
    if bounds and result.bench is not None and result.bench.points:
        try:
            point = result.bench.points[result.bench.objective_point]
        except IndexError:
            point = None
    found = point_goodput(point.records, bounds, point.metrics.duration_s) if point is not None else None
    if found is None:
        return {"request_goodput": None, "slo_attainment": None}
    return {"request_goodput": found.request_goodput, "slo_attainment": found.slo_attainment}


def objective_values(
    metrics: Mapping[str, float | None],
    objectives: Sequence[Objective],
    *,
    measured: bool,
    worst_seen: Mapping[str, float],
) -> tuple[float, ...]:
    """The values to tell Optuna. Failed or unmeasured metrics get pessimistic values."""
    out = []
    for obj in objectives:
        value = metrics.get(obj.metric) if measured else None
        if value is None or math.isnan(value):
            value = pessimistic(obj, worst_seen)
        out.append(float(value))
    return tuple(out)


def pessimistic(obj: Objective, worst_seen: Mapping[str, float]) -> float:
    """A value no feasible trial would beat: 0 for maximised metrics, 2 x the worst seen latency."""
    if obj.direction == Direction.MAXIMIZE:
        return 0.0
    seen = worst_seen.get(obj.metric)
    return 2.0 * seen if seen else PESSIMISTIC_LATENCY_MS


def constraint_values(
    metrics: Mapping[str, float | None], slos: Sequence[Slo], *, failed: bool
) -> dict[str, float]:
    """The same keys on every trial (GP/BoTorch require it); <= 0 is feasible."""
    out = {FAILURE_CONSTRAINT: 1.0 if failed else 0.0}
    for slo in slos:
        out[f"slo:{slo.name}"] = 1.0 if failed else slo.violation(metrics.get(slo.metric))
    return out


def is_feasible(constraints: Mapping[str, float]) -> bool:
    """Every constraint satisfied (<= 0)."""
    return all(v <= 0 for v in constraints.values())
