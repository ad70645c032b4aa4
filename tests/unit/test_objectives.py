"""The judge: one verdict per trial (outcome, values, constraints), pessimistic values for failures."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from support.results import make_bench

from tuner.config import Failure, Outcome, Phase, ServerFacts, TrialConfig
from tuner.metrics import trial_values
from tuner.objectives import FAILURE_CONSTRAINT, judge
from tuner.result import TrialResult
from tuner.space.goals import Objective, Slo

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _result(outcome: Outcome = Outcome.OK, *, measured: bool = True) -> TrialResult:
    failure = None if outcome is Outcome.OK else Failure(outcome=outcome, phase=Phase.GATE, message="x")
    bench = make_bench(n_records=4) if measured else make_bench(n_records=3, fail_every=1)
    return TrialResult(
        config=TrialConfig(),
        launch=None,
        outcome=outcome,
        failure=failure,
        sglang_version="0.5.9",
        server=ServerFacts(base_url="http://x", startup_s=1.0, kv_tokens=370_000),
        bench=bench,
        min_free_mib=(16_000, 15_500),
        started_at=NOW,
        finished_at=NOW,
    )


OBJECTIVES = (
    Objective(metric="output_throughput", direction="maximize"),
    Objective(metric="ttft_p99_ms", direction="minimize"),
)


def test_metric_values_read_the_objective_point() -> None:
    values = trial_values(_result())
    assert values["output_throughput"] == 102.4 and values["kv_tokens"] == 370_000.0
    assert values["ttft_p99_ms"] == pytest.approx(50.0) and values["min_free_vram_mib"] == 15_500.0


def test_an_unmeasured_latency_is_missing_not_zero() -> None:
    assert trial_values(_result(measured=False))["ttft_p99_ms"] is None


def test_a_failed_trial_gets_values_no_feasible_trial_would_lose_to() -> None:
    failed = judge(_result(Outcome.NAN), OBJECTIVES, (), worst_seen={"ttft_p99_ms": 300.0})
    assert failed.values == (0.0, 600.0) and failed.outcome is Outcome.NAN and not failed.feasible
    ok = judge(_result(), OBJECTIVES, ())
    assert ok.values == pytest.approx((102.4, 50.0)) and ok.outcome is Outcome.OK and ok.feasible


def test_every_trial_carries_the_same_constraint_keys() -> None:
    slo = Slo(metric="min_free_vram_mib", op=">=", bound=2048)
    ok = judge(_result(), OBJECTIVES, [slo])
    failed = judge(_result(Outcome.OOM), OBJECTIVES, [slo])
    assert ok.constraints.keys() == failed.constraints.keys()
    assert ok.feasible and not failed.feasible and failed.constraints[FAILURE_CONSTRAINT] == 1.0


def test_a_missed_slo_is_an_outcome_of_its_own() -> None:
    tight = judge(_result(), OBJECTIVES, [Slo(metric="min_free_vram_mib", op=">=", bound=20_000)])
    assert tight.outcome is Outcome.SLO_VIOLATION and not tight.feasible and not tight.retryable
    # the measured values are still told: the SLO constraint marks the trial
    assert tight.values == pytest.approx((102.4, 50.0))


def test_interruptions_and_infrastructure_are_retryable() -> None:
    assert judge(_result(Outcome.INFRA_ERROR), OBJECTIVES, ()).retryable
    assert judge(_result(Outcome.INTERRUPTED), OBJECTIVES, ()).retryable
    assert not judge(_result(Outcome.OOM), OBJECTIVES, ()).retryable
