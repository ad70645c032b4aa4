"""Which candidate to launch next: expected improvement of the front, weighted by the chance it runs.

    score = P(feasible) x (EI(throughput) / best + EHVI(throughput, KV) / HV)

Throughput is modelled in log space (log-normal predictions), so both expectations have closed
forms: E[max(0, e^f - T)] = e^(mu + s^2/2) Phi((mu + s^2 - ln T) / s) - T Phi((mu - ln T) / s).
The second objective (KV tokens) is predicted, not sampled: the memory model knows it after two
launches, so the hypervolume improvement of a candidate is a sum of such expectations over the
strips of the current front below its predicted KV. Pure functions over numpy arrays.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

Array = NDArray[np.float64]
_ERF = np.frompyfunc(math.erf, 1, 1)


def norm_cdf(x: Array) -> Array:
    """The standard normal CDF, elementwise."""
    erf = np.asarray(_ERF(np.asarray(x, dtype=np.float64) / math.sqrt(2.0)), dtype=np.float64)
    out: Array = 0.5 * (1.0 + erf)
    return out


def expected_excess(mu: Array, sd: Array, threshold: float | Array) -> Array:
    """E[max(0, e^f - T)] for f ~ N(mu, sd^2), elementwise (T = 0: the mean of e^f)."""
    sd = np.maximum(sd, 1e-9)
    t = np.broadcast_to(np.asarray(threshold, dtype=np.float64), mu.shape)
    mean = np.exp(mu + sd * sd / 2.0)
    safe = np.where(t > 0, t, 1.0)
    log_t = np.log(safe)
    above = mean * norm_cdf((mu + sd * sd - log_t) / sd) - t * norm_cdf((mu - log_t) / sd)
    return np.where(t > 0, np.maximum(above, 0.0), mean)


def hypervolume(front: Sequence[tuple[float, float]]) -> float:
    """Area dominated by `front` (both maximised) above the reference point (0, 0)."""
    area, covered = 0.0, 0.0
    for x, y in sorted(front, key=lambda p: (-p[0], -p[1])):
        if y > covered:
            area += x * (y - covered)
            covered = y
    return area


def ehvi(mu: Array, sd: Array, second: Array, front: Sequence[tuple[float, float]]) -> Array:
    """Expected hypervolume improvement of (e^f, second) over `front`; f ~ N(mu, sd^2), `second` known."""
    levels = sorted({y for _, y in front if y > 0})
    edges = [0.0, *levels]
    out = np.zeros_like(mu)
    for i, lo in enumerate(edges):
        hi = edges[i + 1] if i + 1 < len(edges) else math.inf
        # above the strip's top edge (strictly below every front point at or above it) the front's best x
        top = max((x for x, y in front if y >= hi), default=0.0) if hi < math.inf else 0.0
        width = np.clip(np.minimum(second, hi) - lo, 0.0, None)
        if np.any(width > 0):
            out += width * expected_excess(mu, sd, top)
    return out


def scores(
    mu: Array,
    sd: Array,
    p_feasible: Array,
    *,
    best: float | None,
    second: Array | None,
    front: Sequence[tuple[float, float]],
    hv_weight: float = 1.0,
) -> Array:
    """The acquisition of every candidate (higher is better); `best` is the best feasible throughput."""
    if best is None or best <= 0:
        return p_feasible * sd  # nothing measured yet: where the model knows least and a launch likely runs
    gain = expected_excess(mu, sd, best) / best
    if second is not None and front:
        hv = hypervolume(front)
        if hv > 0:
            gain = gain + hv_weight * ehvi(mu, sd, second, front) / hv
    return p_feasible * gain
