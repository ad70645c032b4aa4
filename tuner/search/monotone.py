"""Memory feasibility made monotone in memory demand: a projection of the model's latent score.

Memory fails by physics in one direction of every memory knob. An OOM (at load, at capture, under
load) needs more memory than the GPU has: a larger fraction (a larger KV pool beside the weights), a
larger captured batch (graph memory and capture workspace), a larger prefill chunk (its
activations) or a larger running-request cap (the eager batch, the captured sizes) only needs more.
"Not enough memory for the KV cache" is the pool left after the weights: a smaller fraction or a
larger running-request cap (the request-to-token table) leaves less. So, with every other knob of the
mechanism equal (the KV dtype, CUDA graphs on or off, knobs of no known role):

    x needs at least the memory of y  (x >= y)  =>  P(pass at x) <= P(pass at y)

An observed failure at y proves failure at every x >= y, an observed pass at y a pass at every
x <= y. A Gaussian process on pass/fail labels knows neither: away from a launch it falls back to
its prior, so an OOM at (f, g) leaves (f + 0.1, g) as likely to run as an untried corner. Here the
latent score z (P = Phi(z)) of every candidate is first clamped by the observations (at most a failure's
score above a failure, at least a pass's score below a pass), then projected onto the monotone
functions by the mean of the two envelopes,

    U(x) = max over y >= x of z(y)   (the least monotone function above z)
    L(x) = min over y <= x of z(y)   (the greatest monotone function below z)

each of which is monotone, as is their mean; where z already is, U = L = z. Graphs off and on
are not ordered (eager decode keeps activations that captured graphs keep in their own pool), nor
is the default graph list against an explicit largest batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from tuner.search.candidates import Block
from tuner.search.surrogate import Array, Features

# per mechanism of memory: the sign of each ordered role's demand (+1: more of it needs more memory)
OOM_ORDER = {"fraction": 1.0, "graphs": 1.0, "chunk": 1.0, "running": 1.0}
POOL_ORDER = {"fraction": -1.0, "running": 1.0}
GRAPHS_ORDERED = False  # the largest captured batch as a demand axis (False: graph settings only equal)
FAIL_Z = -2.0  # the clamp of a proven failure's region (P = Phi(-2) ~ 0.02)
PASS_Z = 2.0  # ... and of a proven pass's region


@dataclass(frozen=True, kw_only=True, slots=True)
class _Coords:
    """Per row: the columns that must be equal to compare, and the demand along each ordered one."""

    equal: NDArray[np.int64]
    demand: Array


def _coords(features: Features, blocks: Sequence[Block], order: dict[str, float]) -> _Coords:
    rows = features.cat.shape[0]
    equal: list[NDArray[np.int64]] = []
    demand: list[Array] = []
    for block in blocks:
        sign = order.get(block.role)
        if block.role == "graphs" and not GRAPHS_ORDERED:
            sign = None
        nums = [features.num[:, c] for c in block.num]
        if sign is None or not nums:
            equal += [features.cat[:, c] for c in block.cat]
            equal += [np.round(v * 1e6).astype(np.int64) for v in nums]
            continue
        x = nums[0]
        if block.role == "graphs":
            # graphs on with a known largest batch compare by it; off, and on with the default list
            # (feature 0), only with themselves
            on = block.cat[1] if len(block.cat) > 1 else block.cat[0]
            known = x > 0
            equal.append(features.cat[:, on])
            equal.append(np.where(known, -2, features.cat[:, block.cat[0]]).astype(np.int64))
            demand.append(np.where(known, sign * x, 0.0))
            continue
        active = x >= 0
        equal.append(active.astype(np.int64))
        demand.append(np.where(active, sign * x, 0.0))
    return _Coords(
        equal=np.stack(equal, axis=1) if equal else np.zeros((rows, 0), dtype=np.int64),
        demand=np.stack(demand, axis=1) if demand else np.zeros((rows, 0)),
    )


def _at_least(a: _Coords, b: _Coords) -> NDArray[np.bool_]:
    """[i, j]: row j of `b` needs at least the memory of row i of `a` (comparable and >= on every axis)."""
    out = np.ones((a.equal.shape[0], b.equal.shape[0]), dtype=bool)
    for c in range(a.equal.shape[1]):
        out &= a.equal[:, c][:, None] == b.equal[:, c][None, :]
    for c in range(a.demand.shape[1]):
        out &= a.demand[:, c][:, None] <= b.demand[:, c][None, :] + 1e-9
    return out


def _take(c: _Coords, rows: NDArray[np.int64]) -> _Coords:
    return _Coords(equal=c.equal[rows], demand=c.demand[rows])


def monotone_latent(
    z: Array,
    test: Features,
    blocks: Sequence[Block],
    order: dict[str, float],
    *,
    observed: Features | None = None,
    passed: Sequence[bool] = (),
) -> Array:
    """The latent scores `z` of the test rows, clamped by the observed passes and failures and
    projected onto the functions monotone (non-increasing) in memory demand along `order`."""
    if not any(b.role in order for b in blocks) or len(z) == 0:
        return z
    coords = _coords(test, blocks, order)
    keys = np.concatenate([coords.equal.astype(np.float64), coords.demand], axis=1)
    _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    unique = _take(coords, first)
    v = np.asarray(z, dtype=np.float64)[first].copy()
    seen = _coords(observed, blocks, order) if observed is not None and len(passed) else None
    ok = np.asarray(passed, dtype=bool)
    out = np.empty_like(v)
    # only rows with equal unordered knobs compare: project group by group
    _, group = np.unique(unique.equal, axis=0, return_inverse=True)
    group = group.reshape(-1)
    for g in range(int(group.max()) + 1):
        rows = np.flatnonzero(group == g)
        mine, w = _take(unique, rows), v[rows]
        if seen is not None:
            if ok.any():  # below a pass: at least the pass's score
                proven = _at_least(mine, _take(seen, np.flatnonzero(ok))).any(axis=1)
                w = np.where(proven, np.maximum(w, PASS_Z), w)
            if (~ok).any():  # above a failure: at most the failure's score
                doomed = _at_least(_take(seen, np.flatnonzero(~ok)), mine).any(axis=0)
                w = np.where(doomed, np.minimum(w, FAIL_Z), w)
        geq = _at_least(mine, mine)  # [i, j]: j needs at least i's memory
        upper = np.max(np.where(geq, w[None, :], -np.inf), axis=1)
        lower = np.min(np.where(geq.T, w[None, :], np.inf), axis=1)
        out[rows] = (upper + lower) / 2.0
    result: Array = out[inverse]
    return result
