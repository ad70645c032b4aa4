"""From a TrialResult to what the sampler sees: objective values and constraint values.

Pure functions. A configuration that crashed, ran out of memory or failed the
gate is reported as COMPLETE-but-infeasible (constraint `failure` > 0) with
pessimistic but plausible values, never as FAIL (samplers ignore FAIL trials
and walk back into the crash region) and never as a score that could rank
best (0.0 throughput is the floor of a maximised objective; for a minimised
latency the value is the worst one seen, doubled).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from tuner.config import TrialResult
from tuner.space_sections import METRICS, Objective, Slo
from tuner.store_rows import METRIC_COLUMNS, metric_value

MAXIMIZE = "maximize"
MINIMIZE = "minimize"

FAILURE_CONSTRAINT = "failure"
PESSIMISTIC_LATENCY_MS = 600_000.0


def metric_values(result: TrialResult, objective_point: int = -1) -> dict[str, float | None]:
    """Every known metric of a result (None where it was not measured)."""
    out: dict[str, float | None] = dict.fromkeys(METRICS)
    if result.server is not None and result.server.kv_tokens is not None:
        out["kv_tokens"] = float(result.server.kv_tokens)
    if result.min_free_mib:
        out["min_free_vram_mib"] = float(min(result.min_free_mib))
    metrics = result.bench.objective_metrics if result.bench is not None else None
    if metrics is not None:
        for name in METRIC_COLUMNS:
            if name in out:
                out[name] = metric_value(metrics, name)
    return out


def objective_values(
    result: TrialResult,
    objectives: Sequence[Objective],
    *,
    objective_point: int = -1,
    worst_seen: Mapping[str, float] | None = None,
) -> tuple[float, ...]:
    """The values to tell Optuna. Failed or unmeasured metrics get pessimistic values."""
    values = metric_values(result, objective_point)
    out = []
    for obj in objectives:
        value = values.get(obj.metric) if result.ok else None
        if value is None or math.isnan(value):
            value = pessimistic(obj, worst_seen or {})
        out.append(float(value))
    return tuple(out)


def pessimistic(obj: Objective, worst_seen: Mapping[str, float]) -> float:
    """A value no feasible trial would beat: 0 for maximised metrics, 2 x the worst seen latency."""
    if obj.direction == MAXIMIZE:
        return 0.0
    seen = worst_seen.get(obj.metric)
    return 2.0 * seen if seen else PESSIMISTIC_LATENCY_MS


def constraint_values(
    result: TrialResult, slos: Sequence[Slo], *, objective_point: int = -1
) -> dict[str, float]:
    """The same keys on every trial (GP/BoTorch require it); <= 0 is feasible."""
    values = metric_values(result, objective_point)
    failed = not result.ok
    out = {FAILURE_CONSTRAINT: 1.0 if failed else 0.0}
    for slo in slos:
        out[f"slo:{slo.name}"] = 1.0 if failed else slo.violation(values.get(slo.metric))
    return out


def is_feasible(constraints: Mapping[str, float]) -> bool:
    return all(v <= 0 for v in constraints.values())
