"""Goodput and SLO attainment as SGLang's bench_serving 0.5.23 defines them, from request records."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest
from support.reports import make_row, study_data

from tuner.report.export import build_profile, select
from tuner.report.frame import trials_frame
from tuner.report.goodput import Goodput, goodput_bounds, goodput_of, objective_duration
from tuner.space.sections import Slo


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
