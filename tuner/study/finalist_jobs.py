"""The finalists' repeats as jobs of the study loop: reserved in the study once, claimed one at a time
under the workers' lock, given back when a repeat must run again (tuner/study/finalists: the picks)."""

from __future__ import annotations

import logging

import optuna

from tuner.knobs.registry import knob_role
from tuner.search.sampler import OUTLOOK_ATTR
from tuner.space.loader import SearchSpace
from tuner.study import finalists
from tuner.study.storage import WorkerLock, ask_lock

log = logging.getLogger(__name__)


def next_finalist_job(
    study: optuna.Study, space: SearchSpace, *, budget: int, done: int, running: int
) -> finalists.FinalistJob | None:
    """With only the finalists' launches left in the budget, the next repeat to run (claimed; the caller
    holds the workers' lock)."""
    spec = space.search.finalists
    state: dict[str, int] | None = study.user_attrs.get(finalists.STATE_ATTR)
    if state is None:
        state = finalists.reserve_state(
            study.get_trials(deepcopy=False), space.directions,
            count=finalists.affordable(spec.count, spec.repeats, budget), repeats=spec.repeats,
            left=budget - done - running, margin=spec.margin,
            twin_params=[p.name for p in space.params if knob_role(p.knob) == "fraction"],
            outlook=latest_outlook(study),
        )  # fmt: skip
        if state is None:
            return None
        study.set_user_attr(finalists.STATE_ATTR, state)
        log.info("finalists (re-measured %d times each): trials %s", spec.repeats, list(state))
    found = finalists.next_job(study.get_trials(deepcopy=False), state, spec.repeats)
    if found is None:
        return None
    job, state = found
    study.set_user_attr(finalists.STATE_ATTR, state)
    return job


def latest_outlook(study: optuna.Study) -> finalists.Outlook | None:
    """What the structured sampler expected of exploring at its latest ask (None: another sampler)."""
    for t in reversed(study.get_trials(deepcopy=False)):
        got = t.system_attrs.get(OUTLOOK_ATTR)
        if isinstance(got, dict) and got.get("noise") is not None:
            return finalists.Outlook(gain=float(got["gain"]), noise=float(got["noise"]))
    return None


def unclaim(study: optuna.Study, lock: WorkerLock, number: int) -> None:
    """Give a finalist's claimed repeat back (its launch is to run again)."""
    with ask_lock(lock):
        state = dict(study.user_attrs.get(finalists.STATE_ATTR) or {})
        key = str(number)
        if state.get(key, 0) > 0:
            state[key] -= 1
            study.set_user_attr(finalists.STATE_ATTR, state)
