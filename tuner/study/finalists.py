"""Finalists: the last launches of the budget re-measure the best front candidates.

One noisy measurement must not decide the best configuration. When only `count × repeats`
launches of the budget are left, the `count` best feasible trials (the Pareto front first, each
ranked by its distance to the utopia point) are launched `repeats` more times; the repeats are
store rows linked to the original (`confirm_of`), and the front, `status` and `export --best`
use the median over all measurements of a configuration.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from optuna.trial import FrozenTrial, TrialState

from tuner.study.learn import told_without_launch

STATE_ATTR = "finalists"  # study user attr: {trial number: repeats claimed}


@dataclass(frozen=True, kw_only=True, slots=True)
class FinalistJob:
    """One repeat launch of a finalist."""

    trial: FrozenTrial
    repeat: int  # 1-based


def _dominates(a: Sequence[float], b: Sequence[float], signs: Sequence[float]) -> bool:
    at_least = all(s * x >= s * y for x, y, s in zip(a, b, signs, strict=True))
    better = any(s * x > s * y for x, y, s in zip(a, b, signs, strict=True))
    return at_least and better


def pick_finalists(trials: Sequence[FrozenTrial], directions: Sequence[str], count: int) -> list[int]:
    """The `count` best feasible launched trials: Pareto-front members first, then by utopia distance."""
    signs = [1.0 if d == "maximize" else -1.0 for d in directions]
    feasible = [
        t
        for t in trials
        if t.state is TrialState.COMPLETE
        and t.user_attrs.get("feasible")
        and not told_without_launch(t.user_attrs)
        and t.values is not None
    ]
    if not feasible:
        return []
    front = {t.number for t in feasible if not any(_dominates(o.values, t.values, signs) for o in feasible)}
    best = [max(s * t.values[i] for t in feasible) for i, s in enumerate(signs)]

    def distance(t: FrozenTrial) -> float:
        parts = []
        for i, s in enumerate(signs):
            scale = abs(best[i]) or 1.0
            parts.append(((s * t.values[i]) - best[i]) / scale)
        return math.sqrt(sum(p * p for p in parts))

    ranked = sorted(feasible, key=lambda t: (t.number not in front, distance(t), t.number))
    return [t.number for t in ranked[:count]]


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
