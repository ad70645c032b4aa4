"""The front, defined once: dominance, the non-dominated set, distance to the utopia point, ranking.

Pure functions over objective vectors keyed by anything (trial numbers, row ids). The study
ranks its finalists with them (tuner.study.finalists), the report draws and exports the front
with them (tuner.report.pareto, tuner.report.export): both import this module, neither the other.
Directions are Optuna's words, "maximize" or "minimize".
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


def signs(directions: Sequence[str]) -> tuple[float, ...]:
    """+1 for each objective to maximise, -1 for each to minimise."""
    return tuple(1.0 if d == "maximize" else -1.0 for d in directions)


def dominates(a: Sequence[float], b: Sequence[float], directions: Sequence[str]) -> bool:
    """a is at least as good as b in every objective and better in one (vectors as long as directions)."""
    better = False
    for x, y, s in zip(a, b, signs(directions), strict=True):
        if s * x < s * y:
            return False
        if s * x > s * y:
            better = True
    return better


def non_dominated(points: Mapping[K, Sequence[float]], directions: Sequence[str]) -> tuple[K, ...]:
    """Keys of the points no other point dominates, sorted (equal points are all kept, as Optuna does)."""
    kept = [k for k, p in points.items() if not any(dominates(q, p, directions) for q in points.values())]
    return tuple(sorted(kept))  # type: ignore[type-var]  # keys are comparable in practice (ints)


def utopia_distances(points: Mapping[K, Sequence[float]], directions: Sequence[str]) -> dict[K, float]:
    """Distance of each point to the utopia point (the best value of every objective), each
    objective divided by the size of its best value so that tok/s and tokens weigh alike."""
    if not points:
        return {}
    sign = signs(directions)
    best = [max(s * p[i] for p in points.values()) for i, s in enumerate(sign)]
    scale = [abs(b) or 1.0 for b in best]
    return {
        k: math.sqrt(sum(((best[i] - s * p[i]) / scale[i]) ** 2 for i, s in enumerate(sign)))
        for k, p in points.items()
    }


def ranked(points: Mapping[K, Sequence[float]], directions: Sequence[str]) -> list[K]:
    """Every key, best first: the front before the rest, then by utopia distance, then by key."""
    front = set(non_dominated(points, directions))
    distance = utopia_distances(points, directions)
    return sorted(points, key=lambda k: (k not in front, distance[k], k))
