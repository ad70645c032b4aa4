"""`capacity` says what bound it and keeps the curve: served throughput, TTFT/TPOT against the load."""

from __future__ import annotations

from dataclasses import asdict

from tuner.capacity.search import Knob, Measurement, Search, SearchPlan, judge_point
from tuner.report.capacity_plot import capacity_plot, curve_of
from tuner.report.detail import capacity_frame
from tuner.space.goals import Slo
from tuner.store.capacity import CapacityRecord

TTFT = Slo.model_validate("ttft_p99_ms<=2000")


def _measure(load: float, *, served: float, ttft: float) -> Measurement:
    """`served` req/s over 10 s (no drain), TTFT p99 `ttft`."""
    values = {
        "duration_s": 10.0,
        "e2e_p50_ms": 0.0,
        "ttft_p99_ms": ttft,
        "ttft_p50_ms": ttft / 2,
        "output_throughput": served * 100,
        "tpot_p99_ms": 20.0,
    }
    return Measurement(load=load, values=values, completed=int(served * 10), failed=0)


def _record(search: Search) -> CapacityRecord:
    points = tuple(
        {
            "load": v.load,
            "passed": v.passed,
            "runs": v.runs,
            "medians": dict(v.medians),
            "why": v.why,
            "limits": list(v.limits),
            "curve": dict(v.curve),
        }
        for v in search.verdicts().values()
    )
    return CapacityRecord(
        study="s",
        trial_number=3,
        row_id=4,
        config_hash="h",
        knob="request_rate",
        slos=("ttft_p99_ms<=2000",),
        capacity=search.capacity(),
        points=points,
        outcome="ok",
    )


def _server_limited_by_rate(cap: float):  # type: ignore[no-untyped-def]
    """TTFT stays at 500 ms (the SLO never binds); the server serves at most `cap` req/s."""
    return lambda load: _measure(load, served=min(load, cap), ttft=500.0)


def test_a_rate_limited_server_is_bound_by_the_served_rate_rule_not_the_slo() -> None:
    search = Search(plan=SearchPlan(knob=Knob.REQUEST_RATE, start=2.0, slos=(TTFT,), max_points=20))
    measure = _server_limited_by_rate(5.0)
    while (load := search.next_load()) is not None:
        search.record(measure(load))
    record = _record(search)
    bound = record.bound()
    assert bound.startswith("the served-rate rule") and "SLO" not in bound
    assert "bound by the served-rate rule" in record.line()
    assert all(p["curve"]["ttft_p99_ms"] == 500.0 for p in record.points)
    frame = capacity_frame((record,))
    assert {"curve_output_throughput", "curve_served_rate", "limits", "bound_by"} <= set(frame.columns)


def test_an_slo_bound_server_names_the_slo_with_its_value() -> None:
    verdict = judge_point(8.0, [_measure(8.0, served=8.0, ttft=2600.0)], (TTFT,), Knob.REQUEST_RATE)
    assert verdict.limits == ("slo:ttft_p99_ms<=2000",) and verdict.curve["output_throughput"] == 800.0
    point = {**asdict(verdict), "limits": list(verdict.limits)}
    record = CapacityRecord(
        study="s",
        trial_number=1,
        row_id=1,
        config_hash="h",
        knob="request_rate",
        slos=("ttft_p99_ms<=2000",),
        capacity=4.0,
        points=({"load": 4.0, "passed": True, "why": ""}, point),
        outcome="ok",
    )
    assert record.bound().startswith("SLO ttft_p99_ms<=2000 at 8 req/s (ttft_p99_ms=2,600.0")


def test_a_record_written_before_limits_were_stored_is_read_from_its_text() -> None:
    old = CapacityRecord(
        study="s",
        trial_number=1,
        row_id=1,
        config_hash="h",
        knob="concurrency",
        slos=("ttft_p99_ms<=2000",),
        capacity=16.0,
        outcome="ok",
        points=(
            {"load": 16, "passed": True, "runs": 3, "medians": {"ttft_p99_ms": 1500.0}},
            {
                "load": 24,
                "passed": False,
                "runs": 3,
                "medians": {"ttft_p99_ms": 1800.0},
                "why": "3 failed requests",
            },
        ),
    )
    assert old.bound().startswith("failed requests at 24 concurrent requests")
    assert curve_of(old.points[0]) == {"ttft_p99_ms": 1500.0}
    fig = capacity_plot(old)  # the SLO metric alone, from the medians
    assert fig.axes[1].lines and "not recorded" in fig.axes[0].texts[0].get_text()


def test_the_curve_plot_draws_every_load_with_its_verdict() -> None:
    search = Search(plan=SearchPlan(knob=Knob.REQUEST_RATE, start=2.0, slos=(TTFT,), max_points=12))
    measure = _server_limited_by_rate(5.0)
    while (load := search.next_load()) is not None:
        search.record(measure(load))
    record = _record(search)
    fig = capacity_plot(record)
    served, ttft, _ = fig.axes
    assert len(served.lines[0].get_xdata()) == len(record.points)
    assert any("capacity" in str(t.get_text()) for t in served.get_legend().get_texts())
    assert any("SLO ttft_p99_ms<=2000" in str(t.get_text()) for t in ttft.get_legend().get_texts())
