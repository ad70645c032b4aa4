"""A re-measured trial's Optuna side shows the figures every view shows: the median of its measurements.

A finalist's repeats and `confirm`'s runs come after the trial was told, and Optuna refuses to
change a finished trial through its API. The trial's figures (tuner.store.figures: the median per
metric over its measurements, with n and range) are written into its stored objective values and
its user attributes directly, through Optuna's own table models, in one transaction: the dashboard
then plots and lists the same value as `status`, the report and the export. Attributes written:
`output_throughput`, `kv_tokens` and each objective's metric (the medians), `measurements` (n) and
`measured_range` (`median of 3 runs; out tok/s 164.5–167.2`). Only a measured (COMPLETE) trial of
an RDB storage is amended, with the asks that reused its result; a failure here never loses the
measurement (it is logged).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

import optuna
from optuna.storages import RDBStorage
from optuna.storages._rdb import models
from optuna.storages._rdb.storage import _create_scoped_session
from optuna.trial import TrialState

from tuner.store.figures import TrialFigures, figures_over
from tuner.store.protocol import ResultStore

__all__ = ["amend_attrs", "amend_from_store", "amend_trial"]

log = logging.getLogger(__name__)


def amend_attrs(figures: TrialFigures, metric_names: Sequence[str]) -> dict[str, Any]:
    """The user attributes of a re-measured trial (pure)."""
    out: dict[str, Any] = {"measurements": figures.runs, "measured_range": figures.spread() or None}
    for name in ("output_throughput", "kv_tokens", *metric_names):
        value = figures.values.get(name)
        if value is not None:
            out[name] = int(value) if name == "kv_tokens" and float(value).is_integer() else value
    return out


def amend_trial(study: optuna.Study, number: int, figures: TrialFigures) -> bool:
    """Write `figures` into trial `number`'s values and user attributes; True when written."""
    backend = getattr(study._storage, "_backend", study._storage)  # under Optuna's cache
    trial = study.get_trials(deepcopy=False)[number]
    if not isinstance(backend, RDBStorage) or trial.state is not TrialState.COMPLETE or figures.runs < 2:
        return False
    names = list(study.metric_names or [])
    values = [figures.values.get(n) for n in names] if len(names) == len(trial.values or ()) else []
    attrs = amend_attrs(figures, names)
    with _create_scoped_session(backend.scoped_session, True) as session:
        model = models.TrialModel.find_or_raise_by_id(trial._trial_id, session)
        for objective, value in enumerate(values):
            if value is not None:
                _set_value(session, model, objective, float(value))
        for key, value in attrs.items():
            _set_attr(session, model, key, value)
    return True


def amend_from_store(study: optuna.Study, store: ResultStore, number: int) -> bool:
    """Amend trial `number`, and the asks that reused its result (`dedup_of`), with its figures over the
    study's recorded rows (False: nothing to amend)."""
    try:
        rows = store.trials(study.study_name)
        row = next((r for r in rows if r.trial_number == number and r.confirm_of is None), None)
        if row is None:
            return False
        figures = figures_over(rows, row)
        trials = study.get_trials(deepcopy=False)
        reusing = [t.number for t in trials if t.user_attrs.get("dedup_of") == number]
        done = [amend_trial(study, n, figures) for n in (number, *reusing)]
        return done[0]
    except Exception as exc:  # noqa: BLE001 - the rows hold the measurement; the dashboard lags
        log.warning("trial %d: the dashboard's values still show its first measurement: %s", number, exc)
        return False


def _set_value(session: Any, trial: models.TrialModel, objective: int, value: float) -> None:
    stored, kind = models.TrialValueModel.value_to_stored_repr(value)
    found = models.TrialValueModel.find_by_trial_and_objective(trial, objective, session)
    if found is None:
        session.add(models.TrialValueModel(trial_id=trial.trial_id, objective=objective, value=stored,
                                           value_type=kind))  # fmt: skip
    else:
        found.value, found.value_type = stored, kind


def _set_attr(session: Any, trial: models.TrialModel, key: str, value: object) -> None:
    text = json.dumps(value)
    found = models.TrialUserAttributeModel.find_by_trial_and_key(trial, key, session)
    if found is None:
        session.add(models.TrialUserAttributeModel(trial_id=trial.trial_id, key=key, value_json=text))
    else:
        found.value_json = text
