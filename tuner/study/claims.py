"""One launch at a time per effective configuration, across the workers of a study.

Workers sharing a study can be asked for the same effective launch at once (one seed in every
worker's sampler, or a small space). Measuring it twice side by side wastes a launch and, on
shared GPUs, measures each copy against the other. Before launching, a trial claims its launch
key under the workers' lock: if another running trial of a live worker holds that key, it waits
until that trial is finished (then the study reuses its result, or launches it itself if that
trial failed for reasons of the machine). A stop request ends the wait at once; the trial then
stops at its first safe point.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import optuna
from optuna.trial import TrialState

from tuner.host import host_name, pid_alive
from tuner.study.storage import WorkerLock, ask_lock

POLL_S = 0.2
CLAIM = "cfg_hash"  # the user attribute naming a trial's launch key


def claim_launch(
    study: optuna.Study,
    trial: optuna.Trial,
    key: str,
    *,
    lock: WorkerLock,
    stop: Callable[[], bool],
    sleep: Callable[[float], object],
) -> int | None:
    """Claim `key` for `trial`, waiting while another live trial holds it; the last twin waited for."""
    waited_for = None
    while True:
        with ask_lock(lock):
            twin = _holder(study, trial.number, key)
            if twin is None or stop():
                trial.set_user_attr(CLAIM, key)
                return waited_for
        waited_for = twin
        sleep(POLL_S)


def _holder(study: optuna.Study, number: int, key: str) -> int | None:
    """Another RUNNING trial holding `key` whose worker is alive (or on another host), if any."""
    host = host_name()  # as the trials record it ($TUNER_HOSTNAME when set)
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if t.number == number or t.user_attrs.get(CLAIM) != key:
            continue
        pid = t.user_attrs.get("pid")
        ours = t.user_attrs.get("host") == host and isinstance(pid, int) and pid != os.getpid()
        if ours and isinstance(pid, int) and not pid_alive(pid):
            continue  # its worker is dead: the next ask fails and retries it
        return t.number
    return None
