"""Goodput and SLO attainment as SGLang's bench_serving 0.5.23 defines them, from request records."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest
from support.reports import make_row, study_data
from support.results import make_bench
from support.stored import make_result

from tuner.bench.goodput import goodput_flag, parse_goodput, point_goodput
from tuner.bench.types import OutputSource, RequestRecord
from tuner.errors import ConfigError
from tuner.metrics import Direction
from tuner.objectives import judge, latency_bounds
from tuner.report.export import build_profile, select
from tuner.report.frame import trials_frame
from tuner.report.goodput import Goodput, goodput_bounds, goodput_of, objective_duration
from tuner.space.goals import Objective, Slo


def _records() -> pd.DataFrame:
    """Four requests sent at 0 s: TTFT 100/300/100/- ms, 11 tokens over 1.1 s, the last one failed."""
    rows = [
        {"success": True, "t_sent_s": 0.0, "t_first_s": 0.1, "t_end_s": 1.1, "output_tokens": 11},
        {"success": True, "t_sent_s": 0.0, "t_first_s": 0.3, "t_end_s": 1.3, "output_tokens": 11},
        {"success": True, "t_sent_s": 0.0, "t_first_s": 0.1, "t_end_s": 0.1, "output_tokens": 1},  # TPOT 0
        {"success": False, "t_sent_s": 0.0, "t_first_s": None, "t_end_s": 0.5, "output_tokens": 0},
    ]
    return pd.DataFrame(rows).assign(point_label="c4")


def test_a_request_is_good_when_it_succeeded_within_every_bound() -> None:
    bounds = goodput_bounds(
        [
            Slo.model_validate(s)
            for s in ("ttft_p99_ms<=200", "tpot_p50_ms<=150", "ttft_p50_ms<=250", "min_free_vram_mib>=1")
        ]
    )
    assert bounds == {"ttft": 200.0, "tpot": 150.0}  # the tightest bound per family; VRAM is no latency
    found = goodput_of(_records(), bounds, duration_s=2.0, label="c4")
    assert found == Goodput(request_goodput=1.0, slo_attainment=0.5, good=2, sent=4, bounds=bounds)
    assert found.flag() == "ttft:200 tpot:150"
    assert found.line().startswith("goodput 1.00 req/s, SLO attainment 50.0% (2 of 4 requests")
    assert goodput_of(_records(), {}, 2.0) is None  # no latency SLO: no goodput, never 0
    assert goodput_of(_records(), bounds, None) is None


def test_goodput_reaches_the_trials_table_and_the_export() -> None:
    row = make_row(0, bench={"points": [{"point": {"label": "c4"}, "metrics": {"duration_s": 2.0}}]})
    assert objective_duration(row.bench, "c4") == 2.0
    measured = Goodput(request_goodput=1.0, slo_attainment=0.5, good=2, sent=4, bounds={"ttft": 200.0})
    data = replace(study_data([row]), goodput={row.id: measured})
    frame = trials_frame(data).set_index("trial")
    assert (frame.loc[0, "request_goodput"], frame.loc[0, "slo_attainment"]) == (1.0, 0.5)
    context = build_profile(data, select(data, trial=0)).context
    assert any(line.startswith("goodput 1.00 req/s, SLO attainment 50.0%") for line in context)


@pytest.mark.parametrize("name", ["ttft_p90_ms", "p95_tpot_ms", "e2e_p95_ms"])
def test_p90_and_p95_are_metrics_a_constraint_can_name(name: str) -> None:
    slo = Slo.model_validate(f"{name} <= 100")
    assert slo.metric.endswith(("_p90_ms", "_p95_ms"))


def _request(i: int, first: float | None, end: float | None, tokens: int, *, ok: bool = True,
             sent: float | None = 0.0) -> RequestRecord:  # fmt: skip
    return RequestRecord(
        load_point="c4", index=i, input_tokens_declared=16, input_tokens_server=16,
        output_tokens_requested=11,
        output_tokens=tokens, output_source=OutputSource.USAGE, success=ok, t_queued_s=0.0, t_sent_s=sent,
        t_first_s=first, t_end_s=end,
    )  # fmt: skip


# the requests of `_records()`, as the client holds them, and one that was never sent
REQUESTS = (
    _request(0, 0.1, 1.1, 11),
    _request(1, 0.3, 1.3, 11),
    _request(2, 0.1, 0.1, 1),
    _request(3, None, 0.5, 0, ok=False),
    _request(4, None, None, 0, ok=False, sent=None),
)


def test_the_clients_goodput_is_the_stores_under_bench_servings_keys() -> None:
    found = point_goodput(REQUESTS, {"ttft": 200.0, "tpot": 150.0}, duration_s=2.0)
    stored = goodput_of(_records(), {"ttft": 200.0, "tpot": 150.0}, duration_s=2.0, label="c4")
    assert found is not None and stored is not None
    assert (found.good, found.sent, found.request_goodput, found.slo_attainment) == (2, 4, 1.0, 0.5)
    assert (stored.good, stored.sent) == (found.good, found.sent)  # one definition, two readers
    assert point_goodput(REQUESTS, {"e2el": 1200.0}, 2.0).good == 2  # type: ignore[union-attr]
    assert point_goodput(REQUESTS, {"ttft": 100.0}, 2.0).good == 2  # type: ignore[union-attr]  # bound is met
    assert point_goodput(REQUESTS, {}, 2.0) is None and point_goodput(REQUESTS, {"ttft": 1.0}, 0.0) is None
    assert point_goodput(REQUESTS[4:], {"ttft": 1.0}, 2.0) is None  # nothing sent: not measured


def test_goodput_bounds_are_given_in_bench_servings_words() -> None:
    assert parse_goodput(["ttft:300", "TPOT:40", "e2el:2e3"]) == {"ttft": 300.0, "tpot": 40.0, "e2el": 2000.0}
    assert goodput_flag({"e2el": 2000.0, "ttft": 300.0}) == "ttft:300 e2el:2000"
    for bad in ("ttft300", "itl:5", "ttft:-1", "ttft:x", "ttft:inf"):
        with pytest.raises(ConfigError, match=f"--goodput '{bad}': expected KEY:MS"):
            parse_goodput([bad])


def test_a_trials_goodput_is_stored_under_the_spaces_latency_constraints_and_can_be_one() -> None:
    bench = make_bench()
    points = (*bench.points[:-1], replace(bench.points[-1], records=REQUESTS))
    result = make_result(bench=replace(bench, points=points))
    duration = points[-1].metrics.duration_s
    slos = [Slo.model_validate(s) for s in ("ttft_p99_ms <= 200", "tpot_p99_ms <= 150")]
    assert latency_bounds(slos) == {"ttft": 200.0, "tpot": 150.0}
    judged = judge(result, [Objective(metric="request_goodput", direction=Direction.MAXIMIZE)], slos)
    assert judged.metrics["request_goodput"] == pytest.approx(2 / duration)
    assert judged.metrics["slo_attainment"] == 0.5 and judged.values == (pytest.approx(2 / duration),)
    attained = [*slos, Slo.model_validate("slo_attainment >= 0.9")]  # a constraint on the attainment
    throughput = [Objective(metric="output_throughput", direction=Direction.MAXIMIZE)]
    assert not judge(result, throughput, attained).feasible
    unbounded = judge(result, [], [Slo.model_validate("min_free_vram_mib >= 1")])
    assert unbounded.metrics["request_goodput"] is None and unbounded.metrics["slo_attainment"] is None
