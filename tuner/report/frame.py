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

import logging
import statistics
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import optuna
import pandas as pd
from optuna.trial import FrozenTrial, TrialState

from tuner.config import Outcome
from tuner.errors import ConfigError, StoreError
from tuner.metrics import METRICS
from tuner.report.figures import TrialFigures, figures_over, launch_gpu_count, measurements
from tuner.report.goodput import Goodput, goodput_bounds, goodput_of, objective_duration
from tuner.report.knobs import _short_names, compact_params, param_legend
from tuner.report.why import reason, slos_of
from tuner.secrets import readable_space_text
from tuner.store.capacity import CapacityRecord, bind_rows, latest_by_row
from tuner.store.connect import mask_url, optuna_storage_kwargs
from tuner.store.factory import open_store
from tuner.store.protocol import ResultStore, StoreOpener
from tuner.store.rows import StoredTrial
from tuner.study.asks import classify, classify_trial

__all__ = [
    "StudyData",
    "compact_params",
    "param_legend",
    "load_study_data",
    "TrialFigures",
    "launch_gpu_count",
    "measurements",
    "trial_figures",
    "trials_frame",
]

log = logging.getLogger(__name__)

MEASURED = tuple(METRICS)
EXCERPT_LINES = 12


@dataclass(frozen=True, kw_only=True, slots=True)
class StudyData:
    """Everything the reports read about one study: the tuner's rows and Optuna's trials."""

    name: str
    url: str
    rows: tuple[StoredTrial, ...]
    trials: tuple[FrozenTrial, ...] = ()
    metric_names: tuple[str, ...] = ("output_throughput", "kv_tokens")
    directions: tuple[str, ...] = ("maximize", "maximize")
    best_numbers: tuple[int, ...] | None = None  # Optuna's best_trials; None without an Optuna study
    space_text: str | None = None  # the space file stored with the study (workload, constraints)
    capacity: tuple[CapacityRecord, ...] = ()  # `tuner capacity` runs of its trials, oldest first
    goodput: Mapping[int, Goodput] = field(default_factory=dict)  # row id -> goodput (load_study_data)

    def capacity_of(self, row_id: int) -> CapacityRecord | None:
        """The latest capacity run of the trial row `row_id`."""
        return latest_by_row(self.capacity).get(row_id)

    def row_of(self, number: int) -> StoredTrial | None:
        """The recorded measurement of Optuna trial `number` (a reused result maps to its original)."""
        by_number = {
            r.trial_number: r for r in self.rows if r.confirm_of is None and r.trial_number is not None
        }
        if number in by_number:
            return by_number[number]
        for t in self.trials:
            if t.number == number and isinstance(t.user_attrs.get("dedup_of"), int):
                return by_number.get(t.user_attrs["dedup_of"])
        return None

    def confirmations(self, row_id: int) -> tuple[StoredTrial, ...]:
        """The re-validation measurements recorded for the row `row_id`."""
        return tuple(r for r in self.rows if r.confirm_of == row_id)


# ------------------------------------------------------------------------------------- loading


def load_study_data(
    url: str,
    study: str | None = None,
    *,
    preferred: str | None = None,
    goodput: bool = False,
    stores: StoreOpener = open_store,
) -> StudyData:
    """Read one study's rows and Optuna trials (the I/O edge of the reports); see ResultStore.resolve_study.
    With `goodput`, also each measured trial's goodput from its request records (tuner.report.goodput).

    A SQLite file that does not exist is an error (opening it would create an empty database).
    """
    data = _load(url, study, preferred, stores)
    return with_goodput(data, stores=stores) if goodput else data


def with_goodput(data: StudyData, *, stores: StoreOpener = open_store) -> StudyData:
    """`data` with the goodput of every measured trial and re-measurement under the study's latency
    constraints (none where the study has no latency constraint)."""
    bounds = goodput_bounds(slos_of(data.space_text))
    if not bounds:
        return data
    found: dict[int, Goodput] = {}
    with stores(data.url, create=False) as store:
        for row in data.rows:
            if not row.outcome.measured:
                continue
            duration = objective_duration(row.bench, row.objective_point)
            result = goodput_of(store.requests(row.id), bounds, duration, row.objective_point)
            if result is not None:
                found[row.id] = result
    return replace(data, goodput=found)


def _load(url: str, study: str | None, preferred: str | None, stores: StoreOpener) -> StudyData:
    missing = _missing_sqlite_file(url)
    if missing is not None:
        raise ConfigError(
            f"no experiments database: {missing} does not exist; expected the file "
            "`python -m tuner run` wrote (give it with --db, or "
            "TUNER_DB=sqlite:////abs/path/experiments.db for the notebook)"
        )
    with stores(url, create=False) as store:
        return study_data_from(store, study, preferred=preferred, url=url)


def study_data_from(
    store: ResultStore, study: str | None, *, preferred: str | None = None, url: str | None = None
) -> StudyData:
    """One study's rows and capacity runs from an open store, and its Optuna trials from `url` (default
    the store's: the database both live in)."""
    url = url if url is not None else store.url
    name = store.resolve_study(study, preferred=preferred)
    rows = store.trials(name)
    capacity = bind_rows(store.capacity(name), rows)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            storage = optuna.storages.RDBStorage(url, engine_kwargs=optuna_storage_kwargs(url))
            loaded = optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        log.warning("study %r has tuner rows but no Optuna study in %s", name, mask_url(url))
        return StudyData(name=name, url=url, rows=rows, capacity=capacity)
    except Exception as exc:  # Optuna wraps database errors in many types
        raise StoreError(
            f"experiments database {mask_url(url)}: cannot read Optuna study {name!r}: {exc}"
        ) from exc
    trials = tuple(loaded.get_trials(deepcopy=False))
    directions = tuple(d.name.lower() for d in loaded.directions)
    names = tuple(loaded.metric_names or [f"objective_{i}" for i in range(len(directions))])
    best = (
        tuple(sorted(t.number for t in loaded.best_trials)) if len(directions) > 1 else _single_best(loaded)
    )
    storage.remove_session()
    return StudyData(
        name=name,
        url=url,
        rows=rows,
        trials=trials,
        metric_names=names,
        directions=directions,
        best_numbers=best,
        space_text=readable_space_text(text)
        if isinstance(text := loaded.user_attrs.get("space_text"), str)
        else None,
        capacity=capacity,
    )


def _missing_sqlite_file(url: str) -> str | None:
    """The path of a SQLite file URL whose file is missing; None for anything else."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return None
    from pathlib import Path

    return None if Path(parsed.database).exists() else parsed.database


def _single_best(study: optuna.Study) -> tuple[int, ...]:
    try:
        return (study.best_trial.number,)
    except ValueError:  # no feasible complete trial yet
        return ()


# ---------------------------------------------------------------------------------- measurements


def trial_figures(data: StudyData, row: StoredTrial) -> TrialFigures:
    """The displayed figures of the trial recorded in `row`: the one function every view reads
    (tuner.report.figures.TrialFigures)."""
    return figures_over(data.rows, row)


def median_measurements(data: StudyData, row: StoredTrial) -> dict[str, float | None]:
    """Every metric of a trial as the median over its measurements (`trial_figures(...).values`)."""
    return dict(trial_figures(data, row).values)


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
    "request_goodput",
    "slo_attainment",
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
    short = _short_names(param_names)
    items: list[tuple[int | None, StoredTrial | None, FrozenTrial | None]]
    if data.trials:
        items = [(t.number, data.row_of(t.number), t) for t in data.trials]
    else:
        items = [(r.trial_number, r, None) for r in data.rows if r.confirm_of is None]
    fates = {a.number: a for a in classify(data.trials, data.rows)}
    slos = slos_of(data.space_text)
    retried = {
        int(t.user_attrs["retry_of"]): t.number
        for t in data.trials
        if isinstance(t.user_attrs.get("retry_of"), int)
    }
    records = []
    for number, row, trial in items:
        params = dict(trial.params) if trial is not None else dict(row.params if row else {})
        if row is not None and not params:
            params = dict(row.params)
        reused = trial.user_attrs.get("dedup_of") if trial is not None else None
        ask = fates.get(number) if number is not None else classify_trial(trial, row)
        rec: dict[str, Any] = {
            "trial": number,
            "row_id": row.id if row else None,
            "state": trial.state.name if trial is not None else "RECORDED",
            "status": status_of(row, trial),
            "outcome": row.outcome.value if row else (trial.user_attrs.get("outcome") if trial else None),
            "failure": failure_class(row),
            "phase": row.failure_phase.value if row and row.failure_phase else None,
            "feasible": bool(row.feasible) if row else False,
            "pareto": number in front_set,
            "reused_from": reused if isinstance(reused, int) else None,
            "knobs": compact_params({k: params.get(k) for k in param_names if k in params}, short),
            "fate": ask.fate.value if ask is not None else None,
            "noisy": ask.noisy if ask is not None else None,
        }
        for name in param_names:
            column = name if name not in _BASE_COLUMNS and name not in MEASURED else f"param:{name}"
            rec[column] = params.get(name)
        figures = trial_figures(data, row) if row else None
        rec.update(figures.values if figures else dict.fromkeys(MEASURED))
        for name in dict.fromkeys([*data.metric_names, *RANGE_METRICS]):
            rec[f"{name}_min"] = figures.low.get(name) if figures and figures.runs > 1 else None
            rec[f"{name}_max"] = figures.high.get(name) if figures and figures.runs > 1 else None
        own = measurements(row) if row else {}
        why = reason(row, trial, own, slos, retried_as=retried.get(number) if number is not None else None)
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
                **_goodput_columns(data, row),
                "log_path": row.log_path if row else None,
                "capacity": _capacity(data, row),
            }
        )
        records.append(rec)
    if not records:
        return pd.DataFrame(columns=[*_BASE_COLUMNS, *param_names, *MEASURED, *_TAIL_COLUMNS])
    frame = pd.DataFrame.from_records(records)
    frame.attrs["params"] = list(param_names)
    frame.attrs["metric_names"] = list(data.metric_names)
    frame.attrs["directions"] = list(data.directions)
    return frame


def _goodput_columns(data: StudyData, row: StoredTrial | None) -> dict[str, float | None]:
    """bench_serving's `request_goodput` and the SLO attainment: the median over the trial's runs."""
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
