"""Arrival schedules for request-rate load points (pure)."""

from __future__ import annotations

import numpy as np


def arrival_offsets_s(count: int, rate_per_s: float, burstiness: float = 1.0, *, seed: int = 0) -> np.ndarray:
    """Send times relative to T0: the first at 0, then cumulative gamma gaps.

    gap ~ Gamma(shape=burstiness, scale=1/(rate·burstiness)): mean 1/rate whatever the
    burstiness; burstiness 1 is a Poisson process (exponential gaps), < 1 burstier,
    > 1 more regular. Precomputed, so sending cannot drift from the schedule.
    """
    if rate_per_s <= 0 or not np.isfinite(rate_per_s):
        raise ValueError(f"request rate must be a finite number > 0 (got {rate_per_s})")
    if burstiness <= 0:
        raise ValueError(f"burstiness must be > 0 (got {burstiness})")
    if count <= 0:
        return np.zeros(0)
    rng = np.random.default_rng(seed)
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate_per_s * burstiness), size=count - 1)
    return np.concatenate(([0.0], np.cumsum(gaps)))
