"""Which candidate to launch next: expected improvement of the front, weighted by the chance it runs.

    log score = log P(feasible) + log(EI(first) / best + w EHVI(first, second) / HV)

The first objective (higher is better: a throughput, or 1 / a latency) is modelled in log space
(log-normal predictions), so both expectations have closed forms:
E[max(0, e^f - T)] = e^(mu + s^2/2) Phi(z + s) - T Phi(z), z = (mu - ln T) / s. Everything is
computed in logs: with r(x) = log Phi(x) + x^2/2 (smooth, computed without cancellation in both
tails), log E = ln T + log Phi(z) + log(expm1(r(z + s) - r(z))), so a candidate far below the
incumbent gets a very negative but finite score, never exactly 0 (which would leave the choice to
tie-breaking). The second objective is known per candidate (predicted): the hypervolume
improvement is a sum of such expectations over the strips of the current front below it, summed
in logs. Pure functions over numpy arrays.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

SD_WEIGHT_UNFOUND = 0.0  # nothing feasible yet: the weight of the model's log sd beside log P(feasible)
Array = NDArray[np.float64]
_ERFC = np.frompyfunc(math.erfc, 1, 1)
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
_TAIL = -8.0  # below this the asymptotic series of the Mills ratio (error < 1e-6)


def _r(x: Array) -> Array:
    """log Phi(x) + x^2 / 2, stable for every x (the Gaussian factor taken out)."""
    x = np.asarray(x, dtype=np.float64)
    out = np.empty_like(x)
    tail = x < _TAIL
    if np.any(~tail):
        body = x[~tail]
        phi = np.asarray(_ERFC(-body / math.sqrt(2.0)), dtype=np.float64) * 0.5
        out[~tail] = np.log(phi) + body * body / 2.0
    if np.any(tail):
        t = x[tail]
        inv = 1.0 / (t * t)
        series = 1.0 - inv * (1.0 - 3.0 * inv * (1.0 - 5.0 * inv * (1.0 - 7.0 * inv)))
        out[tail] = -np.log(-t) - _LOG_SQRT_2PI + np.log(series)
    return out


def log_norm_cdf(x: Array) -> Array:
    """log Phi(x), elementwise, finite for every finite x (about -x^2/2 deep in the lower tail)."""
    x = np.asarray(x, dtype=np.float64)
    out: Array = _r(x) - x * x / 2.0
    return out


def norm_cdf(x: Array) -> Array:
    """The standard normal CDF, elementwise."""
    out: Array = np.exp(log_norm_cdf(x))
    return out


def _log_expm1(a: Array) -> Array:
    """log(e^a - 1) for a > 0, without overflow for large a or loss for tiny a."""
    a = np.maximum(a, 1e-300)
    big = a > 30.0
    out: Array = np.where(big, a, np.log(np.expm1(np.minimum(a, 30.0))))
    return out


def log_expected_excess(mu: Array, sd: Array, threshold: float | Array) -> Array:
    """log E[max(0, e^f - T)] for f ~ N(mu, sd^2), elementwise (T = 0: the log of the mean of e^f)."""
    mu = np.asarray(mu, dtype=np.float64)
    sd = np.maximum(np.asarray(sd, dtype=np.float64), 1e-9)
    t = np.broadcast_to(np.asarray(threshold, dtype=np.float64), mu.shape)
    log_t = np.log(np.where(t > 0, t, 1.0))
    z = (mu - log_t) / sd
    gap = _r(z + sd) - _r(z)  # = s z + s^2/2 + log Phi(z + s) - log Phi(z) > 0
    above = log_t + log_norm_cdf(z) + _log_expm1(gap)
    out: Array = np.where(t > 0, above, mu + sd * sd / 2.0)
    return out


def expected_excess(mu: Array, sd: Array, threshold: float | Array) -> Array:
    """E[max(0, e^f - T)] for f ~ N(mu, sd^2), elementwise (T = 0: the mean of e^f)."""
    out: Array = np.exp(log_expected_excess(mu, sd, threshold))
    return out


def hypervolume(front: Sequence[tuple[float, float]]) -> float:
    """Area dominated by `front` (both maximised) above the reference point (0, 0)."""
    area, covered = 0.0, 0.0
    for x, y in sorted(front, key=lambda p: (-p[0], -p[1])):
        if y > covered:
            area += x * (y - covered)
            covered = y
    return area


def log_ehvi(mu: Array, sd: Array, second: Array, front: Sequence[tuple[float, float]]) -> Array:
    """log of the expected hypervolume improvement of (e^f, second) over `front` (-inf: none can be
    had, the candidate's second objective is 0); f ~ N(mu, sd^2), `second` known."""
    levels = sorted({y for _, y in front if y > 0})
    edges = [0.0, *levels]
    terms: list[Array] = []
    for i, lo in enumerate(edges):
        hi = edges[i + 1] if i + 1 < len(edges) else math.inf
        # above the strip's top edge (strictly below every front point at or above it) the front's best x
        top = max((x for x, y in front if y >= hi), default=0.0) if hi < math.inf else 0.0
        width = np.clip(np.minimum(second, hi) - lo, 0.0, None)
        if np.any(width > 0):
            with np.errstate(divide="ignore"):
                terms.append(np.log(width) + log_expected_excess(mu, sd, top))
    if not terms:
        return np.full_like(np.asarray(mu, dtype=np.float64), -math.inf)
    out: Array = np.logaddexp.reduce(np.stack(terms), axis=0)
    return out


def ehvi(mu: Array, sd: Array, second: Array, front: Sequence[tuple[float, float]]) -> Array:
    """Expected hypervolume improvement of (e^f, second) over `front`; f ~ N(mu, sd^2), `second` known."""
    out: Array = np.exp(log_ehvi(mu, sd, second, front))
    return out


def log_scores(
    mu: Array,
    sd: Array,
    log_p_feasible: Array,
    *,
    best: float | None,
    second: Array | None,
    front: Sequence[tuple[float, float]],
    hv_weight: float = 1.0,
    improve_by: float = 0.0,
    sd_gain: Array | None = None,
) -> Array:
    """The log acquisition of every candidate (higher is better); `best` is the incumbent first objective,
    `improve_by` the share above it that counts as an improvement (expected excess over best x (1 + it)).
    `sd_gain`: the sd of each candidate's log difference to the incumbent (whose value the model is
    unsure of too, and tied to its neighbours'); the expected improvement then uses it instead of sd.

    Nothing feasible measured yet: log P(feasible) + SD_WEIGHT_UNFOUND x log sd (where a launch likely
    runs and the model knows least).
    """
    if best is None or best <= 0:
        out: Array = log_p_feasible + SD_WEIGHT_UNFOUND * np.log(np.maximum(sd, 1e-12))
        return out
    spread = sd if sd_gain is None else sd_gain
    gain = log_expected_excess(mu, spread, best * (1.0 + improve_by)) - math.log(best)
    if second is not None and front:
        hv = hypervolume(front)
        if hv > 0:
            gain = np.logaddexp(gain, math.log(hv_weight) + log_ehvi(mu, sd, second, front) - math.log(hv))
    out = log_p_feasible + gain
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
    """The acquisition itself (exp of log_scores; it underflows to 0 far from the front)."""
    with np.errstate(divide="ignore"):
        log_p = np.log(np.asarray(p_feasible, dtype=np.float64))
    out: Array = np.exp(log_scores(mu, sd, log_p, best=best, second=second, front=front, hv_weight=hv_weight))
    return out
