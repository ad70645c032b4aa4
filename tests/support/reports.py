"""Builders of store rows, Optuna trials and StudyData for the report and export unit tests."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import FrozenTrial

from tuner.config import Outcome, Phase
from tuner.metrics import BENCH_METRICS
from tuner.report.frame import StudyData
from tuner.store.rows import StoredTrial

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=timezone.utc)
SIM_LAUNCHER = (
    "/venv/bin/python",
    "-m",
    "tuner.sim",
    "--sim-scenario",
    "tiny-fast",
    "--sim-sglang-version",
    "0.5.9",
)
DISTS = {
    "mem-fraction-static": FloatDistribution(0.5, 0.95),
    "cuda_graph": CategoricalDistribution(["off", "max:8", "max:16"]),
}


def make_row(
    number: int | None = 0,
    *,
    id: int | None = None,
    outcome: Outcome = Outcome.OK,
    feasible: bool | None = None,
    tput: float | None = 500.0,
    kv: int | None = 1_000_000,
    mem: float = 0.8,
    graph: str = "off",
    min_free: int | None = 10_000,
    confirm_of: int | None = None,
    argv: tuple[str, ...] | None = None,
    **changes: Any,
) -> StoredTrial:
    ok = outcome is Outcome.OK
    metrics: dict[str, float | None] = dict.fromkeys(BENCH_METRICS)
    if ok:
        metrics.update(output_throughput=tput, total_throughput=None if tput is None else tput * 5)
        metrics.update(ttft_p50_ms=10.0, ttft_p99_ms=20.0, tpot_p50_ms=1.5, tpot_p99_ms=3.0)
    flags = ("--model-path", "/models/tiny", "--tp-size", "1", "--mem-fraction-static", str(mem))
    if graph == "off":
        flags += ("--disable-cuda-graph",)
    else:
        flags += ("--cuda-graph-max-bs", graph.split(":")[1])
    default_argv = (*SIM_LAUNCHER, *flags, "--host", "127.0.0.1", "--port", "41000")
    row = StoredTrial(
        id=id if id is not None else (number if number is not None else 0) + 1,
        study="s-v1",
        trial_number=number,
        attempt=1,
        outcome=outcome,
        failure_phase=None if ok else Phase.LAUNCH,
        failure_message=None if ok else f"{outcome.value} at start",
        exit_code=None if ok else 1,
        feasible=ok if feasible is None else feasible,
        config_hash=f"h{mem}{graph}",
        config={"mem_fraction_static": mem},
        params={"mem-fraction-static": mem, "cuda_graph": graph},
        argv=default_argv if argv is None else argv,
        env={"TUNER_SIM_STATE_DIR": "/tmp/state"},
        launch={"host": "127.0.0.1", "port": 41000, "gpus": [], "sglang_version": "0.5.9"},
        sglang_version="0.5.9",
        gpus=({"index": 0, "name": "NVIDIA H100", "driver": "550.1", "total_mib": 81559},),
        server=None,
        startup_s=1.0 if ok else None,
        kv_tokens=kv if ok else None,
        kv_tokens_log=None,
        captured_bs=None,
        min_free_mib_per_gpu=None if min_free is None else (min_free,),
        min_free_mib=min_free,
        gate_verdict="passed" if ok else None,
        gate_reason=None,
        gate_answers=None,
        gate=None,
        objective_point="c4" if ok else None,
        metrics=metrics,
        bench={"objective_point": 0, "points": []} if ok else None,
        client_bound=False if ok else None,
        log_path=f"runs/logs/trial-{number}.log",
        log_excerpt="" if ok else "line 1\nline 2\nCUDA out of memory",
        timings={},
        started_at=T0 + timedelta(minutes=number or 0),
        finished_at=T0 + timedelta(minutes=number or 0, seconds=30),
        hostname="h",
        pid=1,
        confirm_of=confirm_of,
    )
    return replace(row, **changes) if changes else row


def frozen(row: StoredTrial, *, number: int | None = None, dedup_of: int | None = None) -> FrozenTrial:
    """The Optuna trial the study would have told for this row (pessimistic values for failures)."""
    ok = row.outcome is Outcome.OK
    values = [row.metrics["output_throughput"] or 0.0, float(row.kv_tokens or 0)] if ok else [0.0, 0.0]
    attrs: dict[str, Any] = {"feasible": row.feasible, "outcome": row.outcome.value}
    if dedup_of is not None:
        attrs["dedup_of"] = dedup_of
    trial = optuna.trial.create_trial(
        params=dict(row.params),
        distributions=DISTS,
        values=values,
        user_attrs=attrs,
        constraints={"failure": 0.0 if row.feasible else 1.0},
    )
    trial.number = row.trial_number if number is None else number
    return trial


def study_data(
    rows: list[StoredTrial],
    trials: list[FrozenTrial] | None = None,
    *,
    optuna_front: bool = True,
    best: tuple[int, ...] | None = None,
) -> StudyData:
    """StudyData whose best_numbers are what a real Optuna study makes of `trials` (or `best` as given)."""
    if trials is None:
        trials = [frozen(r) for r in rows if r.confirm_of is None]
    if best is None and optuna_front:
        study = optuna.create_study(directions=["maximize", "maximize"])
        study.add_trials(trials)
        best = tuple(sorted(t.number for t in study.best_trials))
    return StudyData(
        name="s-v1",
        url="sqlite://",
        rows=tuple(rows),
        trials=tuple(trials),
        metric_names=("output_throughput", "kv_tokens"),
        directions=("maximize", "maximize"),
        best_numbers=best,
    )
