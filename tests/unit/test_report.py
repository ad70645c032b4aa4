"""tuner.report.frame: the Pareto front and its cross-check with Optuna, frames, failures, importances."""

from __future__ import annotations

import logging
import random
from dataclasses import replace

import optuna
import pandas as pd
import pytest
from support.reports import frozen, make_row, study_data

from tuner.config import Outcome
from tuner.errors import ReportError
from tuner.report.detail import failures_by_class, failures_frame, param_importances, with_latencies
from tuner.report.frame import compact_params, measurements, param_legend, trials_frame
from tuner.report.pareto import front_frame, non_dominated, pareto_front


def test_non_dominated_honours_directions_and_keeps_equal_points() -> None:
    points = {0: (10.0, 5.0), 1: (8.0, 9.0), 2: (7.0, 4.0), 3: (8.0, 9.0)}
    assert non_dominated(points, ["maximize", "maximize"]) == (0, 1, 3)
    # minimising the second: (10, 5) dominates (8, 9); (7, 4) has the lowest second value, so it stays
    assert non_dominated(points, ["maximize", "minimize"]) == (0, 2)


def test_front_excludes_infeasible_and_failed_trials_and_agrees_with_optuna() -> None:
    rows = [
        make_row(0, tput=500.0, kv=1_000_000),
        make_row(1, tput=900.0, kv=2_000_000, feasible=False),  # dominates all, but missed an SLO
        make_row(2, tput=700.0, kv=800_000),
        make_row(3, outcome=Outcome.OOM, mem=0.95),
        make_row(4, tput=400.0, kv=900_000),
    ]
    data = study_data(rows)
    assert data.best_numbers == (0, 2)  # what Optuna itself says
    assert pareto_front(data) == (0, 2)
    frame = trials_frame(data, (0, 2))
    assert frame.set_index("trial")["status"].to_dict() == {
        0: "feasible",
        1: "infeasible",
        2: "feasible",
        3: "failed",
        4: "feasible",
    }
    assert frame.set_index("trial")["failure"].to_dict()[1] == "slo_violation"
    assert frame["pareto"].tolist() == [True, False, True, False, False]


def test_front_disagreeing_with_optuna_raises_or_logs(caplog: pytest.LogCaptureFixture) -> None:
    rows = [make_row(0, tput=500.0, kv=1_000_000), make_row(1, tput=900.0, kv=2_000_000)]
    trials = [frozen(rows[0]), frozen(rows[1])]
    # the store says trial 1 missed an SLO; Optuna was told it was feasible
    data = study_data([rows[0], replace(rows[1], feasible=False)], trials)
    assert data.best_numbers == (1,)
    with pytest.raises(ReportError, match=r"tuner's records is trials \[0\].*best_trials is \[1\]"):
        pareto_front(data)
    with caplog.at_level(logging.ERROR, logger="tuner.report.frame"):
        assert pareto_front(data, strict=False) == (0,)
    assert "contradicts itself" in caplog.text


def test_reused_result_counts_with_its_originals_measurement() -> None:
    original = make_row(0, tput=800.0, kv=1_500_000)
    other = make_row(1, tput=500.0, kv=900_000)
    trials = [frozen(original), frozen(other), frozen(original, number=2, dedup_of=0)]
    confirm = make_row(None, id=50, tput=790.0, confirm_of=original.id)
    data = study_data([original, other, confirm], trials)
    assert pareto_front(data) == (0, 2) == data.best_numbers
    frame = trials_frame(data).set_index("trial")
    assert list(frame.index) == [0, 1, 2]  # the re-validation row is not a trial
    assert frame.loc[2, "reused_from"] == 0
    assert frame.loc[2, "output_throughput"] == 795.0  # the median of the run and its re-measurement
    assert frame.loc[2, "runs"] == 2 and frame.loc[2, "output_throughput_min"] == 790.0
    assert frame.loc[0, "n_confirm"] == 1
    assert frame.loc[0, "mem-fraction-static"] == 0.8  # one column per knob
    table = front_frame(data)
    assert list(table.columns[:4]) == ["trial", "knobs", "output_throughput", "kv_tokens"]


def test_measurements_read_every_registered_metric_of_a_row() -> None:
    row = make_row(0)
    row = replace(row, metrics={**row.metrics, "ttft_p99_ms": 31.5, "tpot_p99_ms": 4.25})
    values = measurements(row)
    assert values["ttft_p99_ms"] == 31.5 and values["tpot_p99_ms"] == 4.25
    assert values["kv_tokens"] == 1_000_000 and values["min_free_vram_mib"] == 10_000
    assert values["e2e_p50_ms"] is None  # not measured stays missing
    assert measurements(make_row(0, outcome=Outcome.NAN))["output_throughput"] is None


def test_failures_by_class_with_log_excerpts() -> None:
    long_log = "\n".join(f"line {i}" for i in range(40))
    rows = [
        make_row(0),
        make_row(1, outcome=Outcome.OOM, log_excerpt=long_log),
        make_row(2, outcome=Outcome.OOM),
        make_row(3, outcome=Outcome.NAN),
        make_row(4, feasible=False),
        make_row(
            None, id=9, outcome=Outcome.CRASHED, confirm_of=1
        ),  # a repeat: listed, not counted as a trial
    ]
    assert failures_by_class(rows) == {"oom": 2, "nan": 1, "slo_violation": 1}
    frame = failures_frame(rows, lines=5)
    assert frame["failure"].tolist() == ["oom", "oom", "nan", "slo_violation", "crashed"]
    assert frame.iloc[0]["log_excerpt"].splitlines() == [f"line {i}" for i in range(35, 40)]
    assert frame.iloc[3]["message"].startswith("missed a constraint")  # no SLOs known: it says so


def test_importances_need_enough_trials_and_negate_maximised_objectives() -> None:
    few = param_importances(
        [frozen(make_row(0))], ["maximize", "maximize"], ["output_throughput", "kv_tokens"]
    )
    assert few.table.empty and "at least" in (few.note or "")

    rng = random.Random(3)
    study = optuna.create_study(
        directions=["maximize", "minimize"], sampler=optuna.samplers.RandomSampler(seed=3)
    )
    for _ in range(30):
        t = study.ask()
        mem = t.suggest_float("mem", 0.5, 0.95)
        noise = t.suggest_float("noise", 0.0, 1.0)
        study.tell(t, [1000 * mem + rng.random(), 5.0 + noise])
    result = param_importances(study.trials, ["maximize", "minimize"], ["tput", "ttft"])
    assert result.note is None
    assert result.table.loc["mem", "tput"] > result.table.loc["noise", "tput"]
    assert result.table.loc["noise", "ttft"] > result.table.loc["mem", "ttft"]


def test_request_latencies_follow_the_record_formulas() -> None:
    frame = pd.DataFrame(
        {"t_sent_s": [1.0, 2.0], "t_first_s": [1.1, 2.5], "t_end_s": [1.5, 2.5], "output_tokens": [5, 1]}
    )
    out = with_latencies(frame)
    assert out["ttft_ms"].round(6).tolist() == [100.0, 500.0]
    assert out["e2e_ms"].round(6).tolist() == [500.0, 500.0]
    assert out["tpot_ms"].round(6).tolist()[0] == 100.0  # (500 - 100) / (5 - 1)
    assert pd.isna(out["tpot_ms"].iloc[1])  # one output token: no TPOT


def test_compact_params_shortens_names_and_batch_lists() -> None:
    params = {"mem-fraction-static": 0.9, "cuda_graph": "bs:1,2,4,8,16,32", "chunked-prefill-size": None}
    assert compact_params(params) == "mem=0.9 cuda=bs:1..32(6) chunked=-"
    assert compact_params({"dsa-prefill": "a", "dsa-decode": "b"}) == "dsa-prefill=a dsa-decode=b"
    pair = {"sparse_backends.prefill": "trtllm", "sparse_backends.decode": "fa3", "chunked-prefill-size": 1}
    assert compact_params(pair) == "sparse=trtllm/fa3 chunked=1"  # a pair sampled per role: one value
    per_role = {"attention-backend.prefill": "triton", "attention-backend.decode.triton": "triton",
                "attention-backend.decode.fa3": None, "cuda_graph": "off"}  # fmt: skip
    assert compact_params(per_role) == "attention=triton cuda=off"  # one backend in both roles
    mixed = {"attention_backends.prefill": "fa3", "attention_backends.decode.fa3": "flashinfer"}
    assert compact_params(mixed) == "attention=fa3/flashinfer"
    names = ["mem-fraction-static", "attention-backend.prefill", "attention-backend.decode.triton"]
    assert param_legend(names) == "mem = mem-fraction-static, attention = attention-backend"
