"""Finalists: the last launches of the budget re-measure the best front candidates.

One noisy measurement must not decide the best configuration. When only `count × repeats`
launches of the budget are left, the `count` best feasible trials (the Pareto front first, each
ranked by its distance to the utopia point) are launched `repeats` more times; the repeats are
store rows linked to the original (`confirm_of`), and the front, `status` and `export --best`
use the median over all measurements of a configuration.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from optuna.trial import FrozenTrial, TrialState

from tuner.front import ranked
from tuner.study.learn import launched

STATE_ATTR = "finalists"  # study user attr: {trial number: repeats claimed}


@dataclass(frozen=True, kw_only=True, slots=True)
class FinalistJob:
    """One repeat launch of a finalist."""

    trial: FrozenTrial
    repeat: int  # 1-based


def pick_finalists(trials: Sequence[FrozenTrial], directions: Sequence[str], count: int) -> list[int]:
    """The `count` best feasible launched trials: Pareto-front members first, then by utopia distance."""
    feasible = {
        t.number: t.values
        for t in trials
        if t.state is TrialState.COMPLETE
        and t.user_attrs.get("feasible")
        and launched(t.user_attrs)
        and t.values is not None
    }
    return ranked(feasible, directions)[:count]


def next_job(
    trials: Sequence[FrozenTrial], state: Mapping[str, int], repeats: int
) -> tuple[FinalistJob, dict[str, int]] | None:
    """The next repeat to launch and the state after claiming it, or None when all are claimed."""
    by_number = {t.number: t for t in trials}
    for key, claimed in sorted(state.items(), key=lambda kv: int(kv[0])):
        if claimed < repeats and int(key) in by_number:
            return FinalistJob(trial=by_number[int(key)], repeat=claimed + 1), {**state, key: claimed + 1}
    return None


def affordable(count: int, repeats: int, budget: int) -> int:
    """Finalists the budget affords: their repeats take at most a quarter of it."""
    if repeats <= 0:
        return 0
    return max(0, min(count, budget // (4 * repeats)))


def claimed(state: Mapping[str, int]) -> int:
    """Finalist launches claimed so far."""
    return sum(state.values())


def launch_counts(trials: Sequence[FrozenTrial], state: Mapping[str, int]) -> tuple[int, int]:
    """Launches finished and running as the budget counts them: trials that launched a server (not
    pruned, forbidden or reused, whichever trial they reuse) plus the finalists' repeats claimed."""
    live = (TrialState.COMPLETE, TrialState.RUNNING)
    ran = [t for t in trials if t.state in live and launched(t.user_attrs)]
    done = sum(1 for t in ran if t.state is TrialState.COMPLETE)
    return done + claimed(state), len(ran) - done
