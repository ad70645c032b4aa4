"""Trials that end without a result of their own: retried when it was not the configuration's doing,
failed with the reason when the result cannot be recorded, never left RUNNING to be relaunched forever.

- The tuner died (SIGKILL), the user stopped it, the machine failed (a full disk, a lost port): the
  configuration is enqueued again until it is measured. `infra_retries` counts these apart from the
  configuration's own failures, which are results and never retried; a run of infrastructure faults
  stops the run through the backoff, and the next start goes on.
- The store refused the result (a value it cannot hold): the trial is told FAIL with the reason and
  not launched again; a fault of the database itself (connection, disk) is retried.
"""

from __future__ import annotations

import logging
from typing import NoReturn

import optuna
import sqlalchemy as sa
from optuna.trial import FrozenTrial, TrialState

from tuner.errors import StoreError
from tuner.interrupts import INTERRUPTS
from tuner.names import one_line
from tuner.search.told import PENDING

log = logging.getLogger(__name__)

__all__ = ["fail_unrecorded", "retry", "unrecordable"]


def retry(study: optuna.Study, trial: FrozenTrial, *, reason: str) -> None:
    """Enqueue the trial's configuration again (not its fault); `infra_retries` counts these."""
    count = int(trial.user_attrs.get("infra_retries", 0)) + 1
    log.info("trial %d (%s): retried (retry %d, not the configuration's fault)", trial.number, reason, count)
    study.enqueue_trial(
        dict(trial.params),
        user_attrs={"retry_of": trial.number, "infra_retries": count, "retry_reason": reason},
    )


def fail_unrecorded(study: optuna.Study, trial: optuna.Trial, reason: str, *, again: bool) -> None:
    """Tell the trial FAIL with `reason` (and enqueue it `again`). When the database cannot take even
    that, the next start finds it RUNNING with a dead worker and retries it."""
    try:
        with INTERRUPTS.deferred():
            trial.set_user_attr("state", "failed")
            trial.set_user_attr("failure_message", f"not recorded: {reason}"[:500])
            trial.set_user_attr(PENDING, None)  # a FAIL without a verdict, whatever tell was pending
            study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
            if again:
                retry(study, study.get_trials(deepcopy=False)[trial.number], reason="not recorded")
    except Exception:  # noqa: BLE001 - the database is the problem; the next start reaps the trial
        log.error("trial %d: could not mark it failed either (%s)", trial.number, reason)


def unrecordable(study: optuna.Study, trial: optuna.Trial, exc: Exception) -> NoReturn:
    """A result the store could not take. Refused (a value it cannot hold): the trial failed with the
    reason, then one StoreError line. A fault of the database itself (connection, disk): the trial is
    marked failed and retried where the database still takes that, and the fault goes on up, so the
    run stops with one line naming the database and its cause (the store guard's)."""
    cause = exc.__cause__ or exc
    transient = isinstance(cause, (sa.exc.OperationalError, sa.exc.InterfaceError, OSError))
    reason = one_line(str(exc))[:300]
    fail_unrecorded(study, trial, reason, again=transient)
    if transient:
        raise exc
    raise StoreError(
        f"trial {trial.number}: its result could not be recorded ({reason}); it is marked failed, "
        "not launched again"
    ) from exc
