"""Free GPU memory as a plane over the memory knobs, across every group of launches.

    fit_trend(sizes[launched], free[launched], total_mib) -> Trend;  trend.p_fits(sizes) -> P(free > 0)

What a server leaves free at its peak is the GPU's memory less the static pool (the fraction of
it), the CUDA graphs (growing with the largest captured batch), the activations (growing with the
prefill chunk and the running batch) and the runtime: close to linear in those sizes. The memory
model of tuner.search.memory fits one line per group of launches that differ only in the fraction;
this plane shares what the groups have in common, so a group no launch has tried yet (a larger
graph, another chunk) already has a predicted boundary, and the search does not learn each group's
out-of-memory point by running out of memory there.

Bayesian linear regression on the launches that measured their lowest free memory: a normal prior
on each coefficient scaled by the GPU's memory (every knob may move the peak by up to about a third
of it across its range) except those the physics gives (`known`: the fraction's, the static pool's
growth), a noise of 2% of it; P(fits) = Phi(mean / sd) of the predicted free memory.
A launch that ran out of memory says only that its peak missed: by default it enters as a launch
that missed by OOM_SHORT of the GPU; with CENSORED (measured, docs/design.md) as a censored one (Tobit
by expectation-maximisation: its value is the plane's expectation given that it missed by at least
that much, refitted until it settles), so an out-of-memory launch far past the boundary no longer pulls the
plane up toward itself. Pure numpy over the candidates' size features (plane.memory_sizes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

Array = NDArray[np.float64]
COEF_SD = 0.3  # prior sd of a size's coefficient, as a share of the GPU's memory (sizes on [0, 1])
NOISE = 0.02  # the plane's residual sd, as a share of the GPU's memory
MIN_LAUNCHES = 2
OOM_SHORT = 0.02  # a launch that ran out of memory: its peak missed by at least this share of the GPU
CENSORED = False  # out-of-memory launches as censored values (EM), not as values at -OOM_SHORT
EM_STEPS = 20
KNOWN_SD = 0.03  # a coefficient the physics gives (the static pool's growth with the fraction): its prior sd


@dataclass(frozen=True, kw_only=True, slots=True)
class Trend:
    """The fitted plane: posterior mean and covariance of its coefficients (intercept first), MiB."""

    mean: Array
    cov: Array
    noise_mib: float

    def predict(self, sizes: Array) -> tuple[Array, Array]:
        """Predicted lowest free MiB (mean, sd) at each row of `sizes`."""
        a = _design(sizes)
        mu: Array = a @ self.mean
        var = np.einsum("ij,jk,ik->i", a, self.cov, a) + self.noise_mib**2
        return mu, np.sqrt(var)

    def p_fits(self, sizes: Array) -> Array:
        """P(the peak fits: predicted lowest free memory > 0) at each row."""
        mu, sd = self.predict(sizes)
        z = mu / sd
        out: Array = 0.5 * (1.0 + np.vectorize(math.erf)(z / math.sqrt(2.0)))
        return out


def _design(sizes: Array) -> Array:
    s = np.asarray(sizes, dtype=np.float64)
    return np.column_stack([np.ones(len(s)), s])


def fit_trend(
    sizes: Array,
    free_mib: Array,
    total_mib: float,
    failed: Array | None = None,
    known: dict[int, float] | None = None,
) -> Trend | None:
    """The plane through these launches and the out-of-memory launches at `failed` (None: fewer than
    MIN_LAUNCHES in all, or no GPU size known). `known`: size columns whose coefficient the physics
    gives (MiB across the column's [0, 1]), held to it within KNOWN_SD of the GPU's memory."""
    measured = np.asarray(sizes, dtype=np.float64)
    failed = np.zeros((0, measured.shape[1])) if failed is None else np.asarray(failed, dtype=np.float64)
    if len(free_mib) + len(failed) < MIN_LAUNCHES or not total_mib or total_mib <= 0:
        return None
    bound = -OOM_SHORT * total_mib
    a = _design(np.vstack([measured, failed.reshape(-1, measured.shape[1])]))
    y = np.concatenate([np.asarray(free_mib, dtype=np.float64), np.full(len(failed), bound)])
    noise = NOISE * total_mib
    prior = np.full(a.shape[1], 1.0 / (COEF_SD * total_mib) ** 2)
    prior[0] = 1.0 / (10.0 * total_mib) ** 2  # the intercept: where the plane sits is the data's
    centre = np.zeros(a.shape[1])
    for column, slope in (known or {}).items():
        centre[1 + column] = slope
        prior[1 + column] = 1.0 / (KNOWN_SD * total_mib) ** 2
    cov = np.linalg.inv(a.T @ a / noise**2 + np.diag(prior))
    mean = cov @ (a.T @ y / noise**2 + prior * centre)
    if CENSORED and len(failed):
        short_rows = np.arange(len(free_mib), len(y))
        for _ in range(EM_STEPS):
            mu = a[short_rows] @ mean
            alpha = (bound - mu) / noise
            y[short_rows] = mu - noise * _mills(alpha)  # E[free | free < bound]
            updated = cov @ (a.T @ y / noise**2 + prior * centre)
            settled = np.max(np.abs(updated - mean)) < 1e-3 * total_mib
            mean = updated
            if settled:
                break
    return Trend(mean=mean, cov=cov, noise_mib=noise)


def _mills(alpha: Array) -> Array:
    """phi(alpha) / Phi(alpha), stable in the lower tail (there about -alpha)."""
    out = np.empty_like(alpha)
    for i, x in enumerate(alpha):
        if x > -8.0:
            cdf = 0.5 * math.erfc(-x / math.sqrt(2.0))
            out[i] = math.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi) / cdf
        else:
            out[i] = -x / (1.0 - 1.0 / (x * x) + 3.0 / x**4)
    return out
