"""One study as the reports read it (`StudyData`: the store's rows, Optuna's trials, capacity runs,
goodput) and the one place they are read from the database (`load_study_data`, `study_data_from`,
`with_goodput`); tuner/report/frame.py builds the tables from it and re-exports these names.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import optuna
from optuna.trial import FrozenTrial

from tuner.errors import ConfigError, StoreError
from tuner.report.figures import TrialFigures, figures_over
from tuner.report.goodput import Goodput, goodput_bounds, goodput_of, objective_duration
from tuner.report.why import slos_of
from tuner.secrets import readable_space_text
from tuner.store.capacity import CapacityRecord, bind_rows, latest_by_row
from tuner.store.connect import mask_url, optuna_storage_kwargs
from tuner.store.factory import open_store
from tuner.store.protocol import ResultStore, StoreOpener
from tuner.store.rows import StoredTrial

log = logging.getLogger("tuner.report.frame")


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
