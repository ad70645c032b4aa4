"""The chance a candidate runs, failure mechanism by failure mechanism, and of meeting each SLO.

A launch passes stages in order -- load and KV pool (memory), kernels that run on this GPU
(support), correct numbers at the gate (numerics) -- and fails at most one. Each failure is evidence
about the knobs its mechanism involves, and only about those (the log names the mechanism):

| mechanism   | failures                                   | knobs it involves                        |
|-------------|--------------------------------------------|------------------------------------------|
| memory      | OOM (load, capture, under load), not enough | fraction, CUDA graphs, chunked prefill,  |
|             | memory for the KV cache, capture failed    | max running requests, KV dtype           |
| numerics    | NaN, garbage, wrong answer                 | backends, CUDA graphs, KV dtype, running |
| support     | unsupported                                | backends                                 |
| other       | crash, hang, timeout, benchmark failures   | every knob                               |

So a garbage answer of one decode pair with one KV dtype says nothing about that pair's memory or
speed, and an OOM at one fraction says nothing about a backend. Knobs of no known role (any other
flag) take part in every mechanism. Per mechanism a Gaussian process over the knobs it involves
regresses +1 (a launch that got past that stage) / -1 (one that failed there) and
P(pass) = Phi(mean / sqrt(c + var)); P(feasible) is the product over the mechanisms. Launches that
never reached a stage say nothing about it.

The memory mechanism has a prior from the physics: the fraction range's ends are where the KV
pool is too small or the graphs and activations no longer fit, and larger graphs, prefill chunks
and running batches need more memory, so the prior mean falls toward both ends of the fraction
range and with those sizes. Where nothing is known yet the first launches therefore go to the
middle of the range, not to its corners (where a GP's variance, and so uncertainty sampling, peaks).

SLO constraints are modelled as values, not pass/fail: each constraint's margin (the distance past
its bound; <= 0 met) is regressed over the measured launches and P(met) = Phi(-mean / sd), so the
search can aim at the boundary, where the best usually sits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

import numpy as np

from tuner.search.acquire import log_norm_cdf
from tuner.search.candidates import Block, by_role
from tuner.search.surrogate import Array, Features, fit_predict


class Mechanism(str, Enum):
    """How a launch failed, as the failure's log names it."""

    MEMORY = "memory"
    NUMERICS = "numerics"
    SUPPORT = "support"
    OTHER = "other"


ROLES_OF = {
    Mechanism.MEMORY: frozenset({"fraction", "graphs", "chunk", "running", "kv_dtype", "other"}),
    Mechanism.NUMERICS: frozenset({"backends", "graphs", "kv_dtype", "running", "other"}),
    Mechanism.SUPPORT: frozenset({"backends", "other"}),
}
_MEMORY = frozenset({"oom", "not_enough_memory", "capture_failed"})
_NUMERICS = frozenset({"nan", "garbage", "wrong_answer"})
_MEASURED = frozenset({"ok", "slo_violation"})
PASS_PRIOR = 0.3  # prior mean of the +1/-1 label where a mechanism's model knows nothing
MEMORY_PRIOR = 0.6  # the memory label's prior mean at the middle of the fraction range
EDGE_DROP = 1.2  # how far the memory prior falls at either end of the fraction range
EDGE_POWER = 4  # ... and how sharply (flat in the middle)
SIZE_DROP = 0.25  # how far it falls at the largest graph / chunk / running cap
LABEL_NOISE = 0.25  # c in Phi(mean / sqrt(c + var))
SPLIT_ROLES = True  # numerics and support: the prefill and decode backends as knobs of their own


def mechanism_of(outcome: str) -> Mechanism | None:
    """The mechanism of a failure outcome (None: the launch measured)."""
    if outcome in _MEASURED:
        return None
    if outcome in _MEMORY:
        return Mechanism.MEMORY
    if outcome in _NUMERICS:
        return Mechanism.NUMERICS
    if outcome == "unsupported":
        return Mechanism.SUPPORT
    return Mechanism.OTHER


def passed(mechanism: Mechanism, failed: Mechanism | None) -> bool | None:
    """Whether a launch that ended by `failed` (None: measured) got past `mechanism`'s stage
    (None: it never reached it)."""
    if failed is None:
        return True
    if failed is mechanism:
        return False
    if mechanism is Mechanism.MEMORY:
        return True if failed is Mechanism.NUMERICS else None  # the gate runs after load and capture
    if mechanism is Mechanism.SUPPORT:
        return True if failed is Mechanism.NUMERICS else None
    return None


@dataclass(frozen=True, kw_only=True, slots=True)
class Outcome:
    """One launch as the feasibility model sees it."""

    index: int  # candidate row
    failed: Mechanism | None  # None: measured
    margins: tuple[float, ...] | None = None  # per SLO: the distance past its bound (<= 0 met)
    explained: bool = False  # a failure a standing rule proves


def memory_prior(features: Features, blocks: Sequence[Block], strength: float = 1.0) -> Array:
    """The memory label's prior mean per row: lower toward the fraction range's ends and larger sizes
    (`strength` scales the fall)."""
    rows = features.cat.shape[0]
    prior = np.full(rows, MEMORY_PRIOR)
    for block in blocks:
        if not block.num:
            continue
        x = features.num[:, block.num[0]]
        on = x >= 0
        if block.role == "fraction":
            prior -= np.where(on, strength * EDGE_DROP * np.abs(2 * x - 1) ** EDGE_POWER, 0.0)
        elif block.role in ("graphs", "chunk", "running"):
            prior -= np.where(on, strength * SIZE_DROP * np.clip(x, 0.0, 1.0), 0.0)
    return prior


def log_p_feasible(
    features: Features,
    blocks: Sequence[Block],
    seen: Sequence[Outcome],
    test: Features,
    *,
    explained_label: float = -1.0,
    prior_strength: float = 1.0,
) -> Array:
    """log P(feasible) of the test rows: the sum over mechanisms of log P(past that stage), plus the
    SLO margins' log P(met). `prior_strength` scales the memory prior's fall toward the ends."""
    out = np.zeros(test.cat.shape[0])
    for mechanism in Mechanism:
        out += _log_pass(features, blocks, seen, test, mechanism, explained_label, prior_strength)
    out += _log_slo(features, blocks, seen, test)
    return out


def _log_pass(
    features: Features,
    blocks: Sequence[Block],
    seen: Sequence[Outcome],
    test: Features,
    mechanism: Mechanism,
    explained_label: float,
    strength: float,
) -> Array:
    roles = ROLES_OF.get(mechanism)
    mine = list(blocks) if roles is None else [b for b in blocks if b.role in roles]
    if not mine:
        mine = list(blocks)
    if SPLIT_ROLES and mechanism in (Mechanism.NUMERICS, Mechanism.SUPPORT):
        mine = by_role(mine)
    rows, labels = [], []
    for s in seen:
        got = passed(mechanism, s.failed)
        if got is not None:
            rows.append(s.index)
            labels.append(1.0 if got else (explained_label if s.explained else -1.0))
    prior_test = (
        memory_prior(test, mine, strength)
        if mechanism is Mechanism.MEMORY
        else np.full(len(test.cat), PASS_PRIOR)
    )
    if not rows or min(labels) > 0:
        # nothing failed here yet: only the prior (and, for memory, its shape) speaks
        base = prior_test if mechanism is Mechanism.MEMORY else np.full(len(test.cat), 1.5)
        return log_norm_cdf(base / math.sqrt(LABEL_NOISE))
    train = features.take(rows)
    y = np.asarray(labels)
    prior_train = (
        memory_prior(train, mine, strength)
        if mechanism is Mechanism.MEMORY
        else np.full(len(rows), PASS_PRIOR)
    )
    post = fit_predict(train, y - prior_train, test, mine, prior_mean=0.0, scale=1.0, ard=False)
    return log_norm_cdf((prior_test + post.mean) / np.sqrt(LABEL_NOISE + post.sd**2))


def _log_slo(features: Features, blocks: Sequence[Block], seen: Sequence[Outcome], test: Features) -> Array:
    """Sum over SLOs of log P(margin <= 0), each margin regressed over the measured launches."""
    measured = [s for s in seen if s.failed is None and s.margins]
    out = np.zeros(test.cat.shape[0])
    if not measured:
        return out
    count = min(len(s.margins or ()) for s in measured)
    rows = [s.index for s in measured]
    train = features.take(rows)
    for j in range(count):
        m = np.asarray([(s.margins or ())[j] for s in measured], dtype=np.float64)
        if np.all(m <= 0) and len(m) < 3:
            continue  # met everywhere so far: too little to say where it stops holding
        spread = max(float(np.std(m)), float(np.median(np.abs(m))), 1e-6)
        post = fit_predict(train, m, test, blocks, prior_mean=float(np.mean(m)), scale=spread)
        out += log_norm_cdf(-post.mean / np.maximum(post.sd, 1e-9 + 0.05 * spread))
    return out
