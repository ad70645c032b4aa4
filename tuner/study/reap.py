"""Trials of dead workers: failed and retried, or their lost tell finished (the next ask does it first)."""

from __future__ import annotations

import os
import warnings

import optuna
from optuna.storages import fail_stale_trials
from optuna.trial import TrialState

from tuner.host import pid_alive
from tuner.store.protocol import ResultStore
from tuner.study.durable import PENDING, finish_recorded
from tuner.study.retry import retry


def reap_dead_workers(study: optuna.Study, store: ResultStore, name: str, host: str) -> None:
    """Fail RUNNING trials whose worker on this host is gone, and enqueue a retry of each (the caller
    holds the workers' lock)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fail_stale_trials(study)  # other hosts, after the heartbeat grace period
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        attrs = trial.user_attrs
        if "host" not in attrs:
            # Asked but never claimed: ask and claim happen under the workers' lock, which this worker
            # holds now, so its worker died in between. Nothing ran; without this it would hold the
            # budget until the heartbeat grace period ends.
            study.tell(trial.number, state=TrialState.FAIL, skip_if_finished=True)
            continue
        if attrs.get("host") != host:
            continue
        pid = attrs.get("pid")
        if isinstance(pid, int) and (pid == os.getpid() or pid_alive(pid)):
            continue
        # reliability: its row was written but its tell was lost: finish the tell
        if finish_recorded(study, store, name, trial):
            continue
        # lost before its tell: a FAIL without a verdict (a pending verdict would read as a result)
        study._storage.set_trial_user_attr(trial._trial_id, PENDING, None)
        study.tell(trial.number, state=TrialState.FAIL, skip_if_finished=True)
        retry(study, trial, reason="worker died")
