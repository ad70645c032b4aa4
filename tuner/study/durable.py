"""The study's record is durable and consistent, or the run stops.

A finished trial is written in this order:

1. its verdict, as a pending tell, in the Optuna trial's user attributes (and its constraints);
2. the tuner's row (`tuner_trials`, one transaction);
3. Optuna's tell.

A crash after (1) leaves a RUNNING trial without a row: the next start fails and retries it, as
for any trial of a dead worker. A crash after (2) leaves a RUNNING trial with a row and a
pending tell: the next start finishes the tell (`finish_recorded`), so the row and Optuna agree.
Any database error on the way, or the file vanishing or being replaced (`StoreWatch`), stops the
run with one line naming the database (`store_guard`): nothing reports success without a durable
record.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from collections.abc import Iterator
from typing import Any

import optuna
import sqlalchemy as sa
from optuna.trial import FrozenTrial, TrialState

from tuner.errors import StoreError, StoreLostError
from tuner.search.told import PENDING
from tuner.store.connect import mask_url
from tuner.store.health import StoreWatch
from tuner.store.protocol import ResultStore

log = logging.getLogger(__name__)

__all__ = ["PENDING", "finish_recorded", "mark_pending", "store_guard"]


def mark_pending(
    trial: optuna.Trial, *, state: TrialState, values: tuple[float, ...] = (), verdict: bool = False
) -> None:
    """Step 1: record the coming tell in the trial itself, before the row is written. `verdict`: the
    tell carries the trial's verdict (a FAIL or PRUNED that is a result, not a retry: tuner.search.told)."""
    trial.set_user_attr(PENDING, {"state": state.name, "values": list(values), "verdict": verdict})


def finish_recorded(study: optuna.Study, store: ResultStore, study_name: str, trial: FrozenTrial) -> bool:
    """Finish the tell of a dead worker's trial whose row was written; True when done.

    Only a tell with the trial's verdict is finished here (COMPLETE with its values, or a verdict's
    FAIL / PRUNED): a pending retry's FAIL is failed and retried by the caller as any lost trial is,
    which is what its tell would have done.
    """
    pending = trial.user_attrs.get(PENDING)
    if not isinstance(pending, dict):
        return False
    state = pending.get("state")
    final = state == TrialState.COMPLETE.name or (
        pending.get("verdict") and state in (TrialState.FAIL.name, TrialState.PRUNED.name)
    )
    if not final or not any(row.trial_number == trial.number for row in store.trials(study_name)):
        return False
    if state == TrialState.COMPLETE.name:
        study.tell(trial.number, [float(v) for v in pending.get("values", [])], skip_if_finished=True)
    else:
        study.tell(trial.number, state=TrialState[str(state)], skip_if_finished=True)
    log.warning("trial %d was recorded but its worker died before telling Optuna: told now", trial.number)
    return True


@contextlib.contextmanager
def store_guard(store: ResultStore, watch: StoreWatch) -> Iterator[None]:
    """Turn a database failure anywhere in the block into one StoreLostError line naming the database."""
    try:
        yield
    except StoreLostError:
        raise
    except StoreError as exc:
        raise StoreLostError(
            f"{exc}; the run stopped (the study resumes when the same command runs again)"
        ) from exc
    except (sa.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError, sqlite3.Error) as exc:
        watch.check()  # the file itself gone or replaced says more than the driver's error
        where = watch.path if watch.path is not None else mask_url(store.url)
        raise StoreLostError(
            f"experiments database {where}: cannot write: {_cause(exc)}; the run stopped (the study "
            f"resumes when the same command runs again)"
        ) from exc


def _cause(exc: BaseException) -> Any:
    inner = getattr(exc, "orig", None) or exc.__cause__ or exc
    text = str(inner).strip().splitlines()
    return text[0] if text else type(inner).__name__
