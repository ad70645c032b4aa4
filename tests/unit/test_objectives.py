"""What the sampler sees: metric values, pessimistic values for failures, constraint keys."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from tuner.bench.types import LatencyStats
from tuner.config import Failure, Outcome, Phase, ServerFacts, TrialConfig, TrialResult
from tuner.objectives import (
    FAILURE_CONSTRAINT,
    constraint_values,
    is_feasible,
    metric_values,
    objective_values,
)
from tuner.space_sections import Objective, Slo

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class _Metrics:
    output_throughput: float
    total_throughput: float
    request_throughput: float
    ttft: LatencyStats
    tpot: LatencyStats
    itl: LatencyStats
    e2e: LatencyStats
    concurrency: float


@dataclass(frozen=True)
class _Bench:
    objective_metrics: _Metrics


def _result(outcome: Outcome = Outcome.OK, *, ttft_count: int = 10) -> TrialResult:
    stats = LatencyStats(median_ms=40.0, p99_ms=90.0, count=10)
    metrics = _Metrics(
        output_throughput=225.0,
        total_throughput=516.0,
        request_throughput=0.9,
        ttft=LatencyStats(median_ms=40.0, p99_ms=90.0, count=ttft_count),
        tpot=stats,
        itl=stats,
        e2e=stats,
        concurrency=63.5,
    )
    failure = None if outcome is Outcome.OK else Failure(outcome=outcome, phase=Phase.GATE, message="x")
    return TrialResult(
        config=TrialConfig(),
        launch=None,
        outcome=outcome,
        failure=failure,
        sglang_version="0.5.9",
        server=ServerFacts(base_url="http://x", startup_s=1.0, kv_tokens=370_000),
        bench=_Bench(metrics),  # type: ignore[arg-type]
        min_free_mib=(16_000, 15_500),
        started_at=NOW,
        finished_at=NOW,
    )


OBJECTIVES = (
    Objective(metric="output_throughput", direction="maximize"),
    Objective(metric="ttft_p99_ms", direction="minimize"),
)


def test_metric_values_read_the_objective_point() -> None:
    values = metric_values(_result())
    assert values["output_throughput"] == 225.0 and values["kv_tokens"] == 370_000.0
    assert values["ttft_p99_ms"] == 90.0 and values["min_free_vram_mib"] == 15_500.0


def test_an_unmeasured_latency_is_missing_not_zero() -> None:
    assert metric_values(_result(ttft_count=0))["ttft_p99_ms"] is None


def test_a_failed_trial_gets_values_no_feasible_trial_would_lose_to() -> None:
    values = objective_values(_result(Outcome.NAN), OBJECTIVES, worst_seen={"ttft_p99_ms": 300.0})
    assert values == (0.0, 600.0)
    assert objective_values(_result(), OBJECTIVES) == (225.0, 90.0)


def test_every_trial_carries_the_same_constraint_keys() -> None:
    slo = Slo(metric="min_free_vram_mib", op=">=", bound=2048)
    ok = constraint_values(_result(), [slo])
    failed = constraint_values(_result(Outcome.OOM), [slo])
    assert ok.keys() == failed.keys()
    assert is_feasible(ok) and not is_feasible(failed) and failed[FAILURE_CONSTRAINT] == 1.0
    tight = constraint_values(_result(), [Slo(metric="min_free_vram_mib", op=">=", bound=20_000)])
    assert not is_feasible(tight)
