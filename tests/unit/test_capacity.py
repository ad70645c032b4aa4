"""The capacity search over load points (pure): bracket, bisection, repeats near the boundary."""

from __future__ import annotations

import random

import pytest

from tuner.capacity.search import Knob, Measurement, Search, SearchPlan, judge_point
from tuner.space.goals import Slo

TTFT = Slo.model_validate("ttft_p99_ms<=2000")


def _server(true_capacity: float, noise: float = 0.0, seed: int = 0):  # type: ignore[no-untyped-def]
    """A server whose TTFT p99 crosses 2000 ms at `true_capacity`, with multiplicative noise."""
    rng = random.Random(seed)

    def measure(load: float) -> Measurement:
        ttft = 2000.0 * (load / true_capacity) ** 2 * (1 + rng.uniform(-noise, noise))
        return Measurement(load=load, values={"ttft_p99_ms": ttft}, completed=100, failed=0)

    return measure


def _run(search: Search, measure) -> list[float]:  # type: ignore[no-untyped-def]
    loads = []
    while (load := search.next_load()) is not None:
        loads.append(load)
        search.record(measure(load))
    return loads


@pytest.mark.parametrize("start", [0.5, 3.0, 40.0])
def test_the_rate_found_is_within_tolerance_below_the_true_capacity(start: float) -> None:
    plan = SearchPlan(knob=Knob.REQUEST_RATE, start=start, slos=(TTFT,), tolerance=0.1, max_points=30)
    search = Search(plan=plan)
    loads = _run(search, _server(7.3))
    found = search.capacity()
    assert found is not None and 7.3 / 1.1 <= found <= 7.3, (found, loads)
    assert len(search.runs[found]) == plan.repeats  # the answer was measured `repeats` times


def test_concurrency_is_searched_in_whole_steps_to_the_last_passing_one() -> None:
    plan = SearchPlan(knob=Knob.CONCURRENCY, start=8, slos=(TTFT,), max_points=40)
    search = Search(plan=plan)
    loads = _run(search, _server(45.5))
    assert all(load == int(load) for load in loads)
    assert search.capacity() == 45


def test_near_the_boundary_the_median_of_repeats_decides_not_one_lucky_run() -> None:
    plan = SearchPlan(knob=Knob.REQUEST_RATE, start=2.0, slos=(TTFT,), repeats=3, max_points=40)
    found = []
    for seed in range(20):
        search = Search(plan=plan)
        _run(search, _server(7.3, noise=0.15, seed=seed))
        found.append(search.capacity())
    assert all(f is not None and 5.0 <= f <= 8.0 for f in found), found


def test_failed_requests_a_death_or_a_missing_metric_fail_a_point() -> None:
    ok = Measurement(load=1.0, values={"ttft_p99_ms": 10.0}, completed=10, failed=0)
    assert judge_point(1.0, [ok], [TTFT]).passed
    lossy = Measurement(load=1.0, values={"ttft_p99_ms": 10.0}, completed=8, failed=2)
    assert "2 failed requests" in judge_point(1.0, [ok, lossy], [TTFT]).why
    died = Measurement(load=9.0, values={}, completed=0, failed=0, died="oom")
    verdict = judge_point(9.0, [died], [TTFT])
    assert not verdict.passed and "died under this load (oom)" in verdict.why
    search = Search(plan=SearchPlan(knob=Knob.REQUEST_RATE, start=8.0, slos=(TTFT,)))
    search.record(Measurement(load=8.0, values={"ttft_p99_ms": 1900.0}, completed=10, failed=0))
    search.record(Measurement(load=8.5, values={}, completed=0, failed=0, died="oom"))
    assert search.bracket() == (8.0, 8.5)
    assert search.next_load() == 8.0  # near: the passing side is repeated; the death is not


def test_an_offered_rate_the_server_does_not_keep_up_with_is_not_sustained() -> None:
    fast = {"ttft_p99_ms": 50.0, "e2e_p50_ms": 5000.0}  # the client's queue hides the overload from TTFT
    # 120 requests over 12 s of arrivals, then 5 s of drain: kept up (120 / (17 - 5) = 10 req/s)
    kept_up = Measurement(load=10.0, values={**fast, "duration_s": 17.0}, completed=120, failed=0)
    # 240 requests offered over 12 s, served over 25 s: behind (240 / 20 = 12 req/s)
    behind = Measurement(load=20.0, values={**fast, "duration_s": 25.0}, completed=240, failed=0)
    assert judge_point(10.0, [kept_up], [TTFT], Knob.REQUEST_RATE).passed
    verdict = judge_point(20.0, [behind], [TTFT], Knob.REQUEST_RATE)
    assert not verdict.passed and "served 12.00 req/s of 20 offered" in verdict.why
    assert judge_point(20.0, [behind], [TTFT], Knob.CONCURRENCY).passed  # a concurrency has no rate to keep


def test_the_latest_capacity_that_measured_is_the_one_shown() -> None:
    from tuner.store.capacity import CapacityRecord, latest_by_row

    def rec(outcome: str, cap: float | None) -> CapacityRecord:
        slos = ("ttft_p99_ms<=2000",)
        return CapacityRecord(study="s", trial_number=3, row_id=4, config_hash="h", knob="request_rate",
                              slos=slos, capacity=cap, points=(), outcome=outcome)  # fmt: skip

    assert latest_by_row((rec("ok", 5.0), rec("interrupted", None)))[4].capacity == 5.0
    assert latest_by_row((rec("ok", 5.0), rec("ok", 6.0)))[4].capacity == 6.0
    assert latest_by_row((rec("oom", None),))[4].outcome == "oom"
