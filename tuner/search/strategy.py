"""The structured search's decision, as a pure function: what has been seen -> the next candidate.

    choose(features, blocks, seen, allowed, second, seed) -> candidate index or None

`seen` holds every launched configuration: its measured objective values (first: the objective
modelled in log space, e.g. output throughput; second: KV tokens), and whether it was feasible.
Candidates already launched, running elsewhere, or proven bad by a failure rule or the memory
model are not `allowed`. Two surrogates are fitted on the same knob kernel: log throughput over
the measured launches, and feasibility (+1 / -1) over every launch, so failures lower the chance of
their neighbours (a failure a rule explains counts as much as any other: it measured best on
the training landscapes). The acquisition (tuner.search.acquire) then weighs expected
improvement of the best (the model's best mean at a measured launch, so one lucky measurement
does not end the search) and of the front by that chance. EXPLORE sets a seeded share of picks
for the most uncertain likely-feasible candidate; it is 0: the variants with 0.1 (tried together
with a larger EHVI weight) did not measure better on the training landscapes.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tuner.search.acquire import norm_cdf, scores
from tuner.search.candidates import Block
from tuner.search.surrogate import Array, Features, fit_predict

EXPLORE = 0.0  # share of picks that go to the most uncertain likely-feasible candidate (0: EI alone explores)
FEASIBLE_PRIOR = 0.3  # the feasibility surrogate's prior mean (labels +1 / -1): untried leans feasible
EXPLAINED_LABEL = -1.0  # the label of a failure a rule explains (as strong as any other: measured best)
HV_WEIGHT = 0.1  # EHVI relative to EI: KV is predicted, throughput is what a launch must find
MIN_SPREAD = (
    0.15  # log-throughput spread assumed before the launches show one (configurations differ by ~15%)
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Seen:
    """One launched configuration: its candidate index, objective values (None: nothing measured)."""

    index: int
    log_first: float | None  # log of the first objective (sign chosen so higher is better)
    second: float | None  # the second objective as measured (higher is better), if any
    feasible: bool
    trial: int | None = None  # the Optuna trial number, when there is one
    explained: bool = False  # a failure a standing rule proves: the rule's scope says where it holds


def choose(
    features: Features,
    blocks: Sequence[Block],
    seen: Sequence[Seen],
    allowed: Sequence[bool],
    *,
    second: Array | None,
    seed: int,
    rank: int = 0,
) -> int | None:
    """The index of the next candidate to launch, or None when none is allowed.

    `rank` k > 0 takes the k-th best instead: k trials asked before this one are still choosing
    (their params not yet written), and they will take the better ones.
    """
    mask = np.asarray(allowed, dtype=bool)
    if not mask.any():
        return None
    rng = random.Random(seed)
    jitter = np.asarray([rng.random() for _ in range(len(mask))]) * 1e-12
    open_rows = np.flatnonzero(mask)
    test = features.take([int(i) for i in open_rows])
    p_feasible = _feasibility(features, blocks, seen, test)
    measured = [s for s in seen if s.log_first is not None]
    if len(measured) == 0:
        mu = np.zeros(len(open_rows))
        sd = np.ones(len(open_rows))
        best: float | None = None
    else:
        y = np.asarray([s.log_first for s in measured], dtype=np.float64)
        spread = max(float(np.std(y)), MIN_SPREAD)
        rows = [s.index for s in measured]
        good = [s.index for s in measured if s.feasible]
        both = Features(
            cat=np.concatenate([test.cat, features.take(good).cat]),
            num=np.concatenate([test.num, features.take(good).num]),
        )
        post = fit_predict(features.take(rows), y, both, blocks, scale=spread)
        mu, sd = post.mean[: len(open_rows)], post.sd[: len(open_rows)]
        # the incumbent by the model's mean, not the luckiest noisy measurement
        best = math.exp(float(np.max(post.mean[len(open_rows) :]))) if good else None
    if best is not None and rng.random() < EXPLORE:
        acq = p_feasible * sd
    else:
        front = [(math.exp(s.log_first), s.second) for s in measured
                 if s.feasible and s.log_first is not None and s.second is not None]  # fmt: skip
        acq = scores(
            mu, sd, p_feasible, best=best, second=None if second is None else second[open_rows],
            front=front, hv_weight=HV_WEIGHT,
        )  # fmt: skip
    order = np.argsort(-(acq + jitter[open_rows]), kind="stable")
    return int(open_rows[int(order[min(rank, len(order) - 1)])])


def _feasibility(features: Features, blocks: Sequence[Block], seen: Sequence[Seen], test: Features) -> Array:
    """P(feasible) of the test rows from the launches' outcomes (0.5-ish where nothing is known)."""
    if not seen:
        return np.full(test.cat.shape[0], 0.6)
    labels = np.asarray([1.0 if s.feasible else (EXPLAINED_LABEL if s.explained else -1.0) for s in seen])
    if labels.min() > 0:
        return np.full(test.cat.shape[0], 0.9)
    post = fit_predict(
        features.take([s.index for s in seen]), labels, test, blocks, prior_mean=FEASIBLE_PRIOR, scale=1.0
    )
    return norm_cdf(post.mean / np.sqrt(0.25 + post.sd**2))
