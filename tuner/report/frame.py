"""Reports over a study: trials as a DataFrame, the Pareto front and its cross-check, the status table.

The core is pure functions over `StudyData` (the store's rows plus Optuna's
FrozenTrials of one study); `load_study_data` and `requests_frame` are the
only functions that read the database. Plots live in tuner.report.plots, the
status table in tuner.report.status, failures, importances and request
latencies in tuner.report.detail.

Two sources, cross-checked: the Pareto front is computed from the tuner's own
rows (feasibility and measured metrics as recorded) and compared with
Optuna's `study.best_trials` (constraints honoured, reference optuna.md §3).
If they disagree, the records contradict each other and `pareto_front`
raises `ReportError` rather than show a front that one of them denies.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
from optuna.trial import FrozenTrial, TrialState

from tuner.config import Outcome
from tuner.metrics import METRICS
from tuner.report.figures import TrialFigures, launch_gpu_count, measurements
from tuner.report.knobs import _short_names, compact_params, pair_names, param_legend
from tuner.report.study_data import (
    StudyData,
    load_study_data,
    median_measurements,
    study_data_from,
    trial_figures,
    with_goodput,
)
from tuner.report.why import reason, slos_of
from tuner.store.rows import StoredTrial
from tuner.study.asks import Ask, classify, classify_trial

__all__ = [
    "StudyData",
    "median_measurements",
    "study_data_from",
    "with_goodput",
    "compact_params",
    "param_legend",
    "load_study_data",
    "TrialFigures",
    "launch_gpu_count",
    "measurements",
    "trial_figures",
    "trials_frame",
]

MEASURED = tuple(METRICS)
EXCERPT_LINES = 12


def status_of(row: StoredTrial | None, trial: FrozenTrial | None = None) -> str:
    """feasible | infeasible (ran, missed an SLO) | failed (crash, OOM, gate, ...) | an Optuna state."""
    if row is None:
        if trial is not None and trial.state is not TrialState.COMPLETE:
            return trial.state.name.lower()
        return "unrecorded"
    if not row.outcome.kind.launched:
        return "pruned"
    if not row.outcome.measured:
        return "failed"
    return "feasible" if row.feasible else "infeasible"


# ------------------------------------------------------------------------------------ frames


_BASE_COLUMNS = (
    "trial",
    "row_id",
    "state",
    "status",
    "outcome",
    "failure",
    "phase",
    "feasible",
    "pareto",
    "reused_from",
    "knobs",
    "fate",
    "noisy",
)
_TAIL_COLUMNS = (
    "startup_s",
    "n_confirm",
    "sglang_version",
    "config_hash",
    "started_at",
    "duration_s",
    "failure_message",
    "why",
    "runs",
    "launch_gpus",
    "log_path",
    "capacity",
)
# The metrics whose lowest and highest measurement the trials table carries beside the median.
RANGE_METRICS = ("output_throughput", "total_throughput", "kv_tokens", "ttft_p99_ms", "tpot_p99_ms")


def trials_frame(data: StudyData, front: Iterable[int] | None = None) -> pd.DataFrame:
    """One row per trial: status, failure class, feasibility, Pareto flag, knobs (one column each), metrics.

    With Optuna trials, every Optuna trial is a row (a reused result shows the
    original's measurement and `reused_from`); without, every recorded trial.
    Re-validation rows (confirm_of) are not trials; `n_confirm` counts them.
    """
    front_set = set(front) if front is not None else set(data.best_numbers or ())
    param_names = _param_names(data)
    short = _short_names(pair_names(param_names))
    items: list[tuple[int | None, StoredTrial | None, FrozenTrial | None]]
    if data.trials:
        items = [(t.number, data.row_of(t.number), t) for t in data.trials]
    else:
        items = [(r.trial_number, r, None) for r in data.rows if r.confirm_of is None]
    slos = slos_of(data.space_text)
    retried = {
        int(t.user_attrs["retry_of"]): t.number
        for t in data.trials
        if isinstance(t.user_attrs.get("retry_of"), int)
    }
    shape = _Shape(
        front=front_set, param_names=param_names, short=short, slos=slos, retried=retried,
        fates={a.number: a for a in classify(data.trials, data.rows)},
    )  # fmt: skip
    records = [_trial_record(data, number, row, trial, shape) for number, row, trial in items]
    if not records:
        return pd.DataFrame(columns=[*_BASE_COLUMNS, *param_names, *MEASURED, *_TAIL_COLUMNS])
    frame = pd.DataFrame.from_records(records)
    frame.attrs["params"] = list(param_names)
    frame.attrs["metric_names"] = list(data.metric_names)
    frame.attrs["directions"] = list(data.directions)
    return frame


@dataclass(frozen=True, kw_only=True, slots=True)
class _Shape:
    """What every row of the trials frame is built against."""

    front: set[int]
    param_names: Sequence[str]
    short: Mapping[str, str]
    fates: Mapping[int, Ask]
    slos: Any
    retried: Mapping[int, int]


def _trial_record(
    data: StudyData, number: int | None, row: StoredTrial | None, trial: FrozenTrial | None, shape: _Shape
) -> dict[str, Any]:
    """One row of the trials frame: what became of the ask, its knobs, its figures and why."""
    params = dict(trial.params) if trial is not None else dict(row.params if row else {})
    if row is not None and not params:
        params = dict(row.params)
    reused = trial.user_attrs.get("dedup_of") if trial is not None else None
    ask = shape.fates.get(number) if number is not None else classify_trial(trial, row)
    rec: dict[str, Any] = {
        "trial": number,
        "row_id": row.id if row else None,
        "state": trial.state.name if trial is not None else "RECORDED",
        "status": status_of(row, trial),
        "outcome": row.outcome.value if row else (trial.user_attrs.get("outcome") if trial else None),
        "failure": failure_class(row),
        "phase": row.failure_phase.value if row and row.failure_phase else None,
        "feasible": bool(row.feasible) if row else False,
        "pareto": number in shape.front,
        "reused_from": reused if isinstance(reused, int) else None,
        "knobs": compact_params({k: params.get(k) for k in shape.param_names if k in params}, shape.short),
        "fate": ask.fate.value if ask is not None else None,
        "noisy": ask.noisy if ask is not None else None,
    }
    return _figure_columns(data, number, row, trial, shape, params, rec)


def _figure_columns(
    data: StudyData, number: int | None, row: StoredTrial | None, trial: FrozenTrial | None, shape: _Shape,
    params: Mapping[str, Any], rec: dict[str, Any],
) -> dict[str, Any]:  # fmt: skip
    """`rec` with the knob columns, the figures (median, range), the run's facts and why it is not ok."""
    for name in shape.param_names:
        column = name if name not in _BASE_COLUMNS and name not in MEASURED else f"param:{name}"
        rec[column] = params.get(name)
    figures = trial_figures(data, row) if row else None
    rec.update(figures.values if figures else dict.fromkeys(MEASURED))
    for name in dict.fromkeys([*data.metric_names, *RANGE_METRICS]):
        rec[f"{name}_min"] = figures.low.get(name) if figures and figures.runs > 1 else None
        rec[f"{name}_max"] = figures.high.get(name) if figures and figures.runs > 1 else None
    own = measurements(row) if row else {}
    retried_as = shape.retried.get(number) if number is not None else None
    why = reason(row, trial, own, shape.slos, retried_as=retried_as)
    rec.update(
        {
            "startup_s": row.startup_s if row else None,
            "n_confirm": len(data.confirmations(row.id)) if row else 0,
            "sglang_version": row.sglang_version if row else None,
            "config_hash": row.config_hash
            if row
            else trial.user_attrs.get("cfg_hash")
            if trial
            else None,
            "started_at": row.started_at if row else None,
            "duration_s": (row.finished_at - row.started_at).total_seconds() if row else None,
            "failure_message": row.failure_message if row else None,
            "why": why,
            "runs": figures.runs if figures else 0,
            "launch_gpus": launch_gpu_count(row) if row and row.argv else None,
            **_goodput_columns(data, row, figures),
            "log_path": row.log_path if row else None,
            "capacity": _capacity(data, row),
        }
    )
    return rec


def _goodput_columns(
    data: StudyData, row: StoredTrial | None, figures: TrialFigures | None
) -> dict[str, float | None]:
    """bench_serving's `request_goodput` and the SLO attainment: the median over the trial's runs, as
    stored with each run (`figures`), else computed from an earlier release's request records."""
    stored = {k: figures.values.get(k) for k in ("request_goodput", "slo_attainment")} if figures else {}
    if stored and all(v is not None for v in stored.values()):
        return stored
    if row is None:
        return {"request_goodput": None, "slo_attainment": None}
    runs = [g for r in (row, *data.confirmations(row.id)) if (g := data.goodput.get(r.id)) is not None]
    if not runs:
        return {"request_goodput": None, "slo_attainment": None}
    return {
        "request_goodput": statistics.median(g.request_goodput for g in runs),
        "slo_attainment": statistics.median(g.slo_attainment for g in runs),
    }


def _capacity(data: StudyData, row: StoredTrial | None) -> str | None:
    found = data.capacity_of(row.id) if row is not None else None
    if found is None or found.capacity is None:
        return None
    return f"{found.capacity:g} {found.unit} within {', '.join(found.slos)}"


def _param_names(data: StudyData) -> list[str]:
    names: dict[str, None] = {}
    for t in data.trials:
        names.update(dict.fromkeys(t.params))
    for r in data.rows:
        names.update(dict.fromkeys(r.params))
    return list(names)


def failure_class(row: StoredTrial | None) -> str | None:
    """The outcome of a failed trial, slo_violation for one that ran but missed a constraint, else None."""
    if row is None:
        return None
    if not row.outcome.measured:
        return str(row.outcome.value)
    return None if row.feasible else str(Outcome.SLO_VIOLATION.value)
