"""The chance a candidate runs, failure mechanism by failure mechanism, and of meeting each SLO.

A launch passes stages in order -- load and KV pool (memory), kernels that run on this GPU
(support), correct numbers at the gate (numerics) -- and fails at most one. Each failure is evidence
about the knobs its mechanism involves, and only about those (the log names the mechanism):

| mechanism   | failures                                   | knobs it involves                        |
|-------------|--------------------------------------------|------------------------------------------|
| memory      | OOM (load, capture, under load), capture   | fraction, CUDA graphs, chunked prefill,  |
|             | failed                                     | max running requests, KV dtype           |
| KV pool     | not enough memory for the KV cache         | fraction, max running requests, KV dtype |
| numerics    | NaN, garbage, wrong answer                 | backends, CUDA graphs, KV dtype, running |
| support     | unsupported                                | backends                                 |
| other       | crash, hang, timeout, benchmark failures   | every knob                               |

So a garbage answer of one decode pair with one KV dtype says nothing about that pair's memory or
speed, and an OOM at one fraction says nothing about a backend. Knobs of no known role (any other
flag) take part in every mechanism. Per mechanism a Gaussian process over the knobs it involves
regresses +1 (a launch that got past that stage) / -1 (one that failed there) and
P(pass) = Phi(mean / sqrt(c + var)); P(feasible) is the product over the mechanisms. Launches that
never reached a stage say nothing about it.

The two memory mechanisms have a prior from the physics: the fraction range's bottom is where the
KV pool is too small, its top where the graphs and activations no longer fit, and larger graphs,
prefill chunks and running batches need more memory, so the OOM prior mean falls toward the top and
with those sizes, the KV pool's toward the bottom. Where nothing is known yet the first launches
therefore go to the middle of the range, not to its corners (where a GP's variance, and so
uncertainty sampling, peaks).

With MONOTONE both memory mechanisms are projected onto the functions monotone in memory demand
(tuner.search.monotone: a failure proves failure wherever more memory is needed, a pass a pass
wherever less is); with NUMERICS_BY_KV the numerics model sees each backend feature as an
interaction with the KV dtype (numerics_blocks); with KERNEL_FAULTS wrong numbers are a kernel's
fault alone (kernel_fault_blocks). All three are off by default: on the training landscapes none beat
the plain models (docs/design.md gives the figures). What is on (NUMERICS_AVERAGE) is the average
of the plain numerics model and the by-KV-dtype one, each weighed by its marginal likelihood: one
NaN of a backend with one dtype fits "that backend" and "that backend with that dtype" alike, and
neither guess alone should steer the search.

SLO constraints are modelled as values, not pass/fail: each constraint's margin (the distance past
its bound; <= 0 met) is regressed over the measured launches and P(met) = Phi(-mean / sd), so the
search can aim at the boundary, where the best usually sits.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from statistics import NormalDist

import numpy as np
from numpy.typing import NDArray

from tuner.search.acquire import log_norm_cdf, norm_cdf
from tuner.search.candidates import Block, by_role
from tuner.search.monotone import OOM_ORDER, POOL_ORDER, monotone_latent
from tuner.search.surrogate import Array, Features, fit_predict


class Mechanism(str, Enum):
    """How a launch failed, as the failure's log names it."""

    MEMORY = "memory"  # out of memory: at load, at capture, under load
    KV_POOL = "kv_pool"  # not enough memory left for the KV cache
    NUMERICS = "numerics"
    SUPPORT = "support"
    OTHER = "other"


ROLES_OF = {
    Mechanism.MEMORY: frozenset({"fraction", "graphs", "chunk", "running", "kv_dtype", "other"}),
    Mechanism.KV_POOL: frozenset({"fraction", "running", "kv_dtype", "other"}),
    Mechanism.NUMERICS: frozenset({"backends", "graphs", "kv_dtype", "running", "other"}),
    Mechanism.SUPPORT: frozenset({"backends", "other"}),
}
_MEMORY = frozenset({"oom"})
# the kernel path under graphs: wrong numbers, and a capture that failed other than by running out of
# memory (the log classifier names that one oom): a kernel that refuses to be captured (an operation not
# permitted while a stream captures) -- the backends with the graph setting, not the memory sizes
_NUMERICS = frozenset({"nan", "garbage", "wrong_answer", "capture_failed"})
_MEASURED = frozenset({"ok", "slo_violation"})
PASS_PRIOR = 0.3  # prior mean of the +1/-1 label where a mechanism's model knows nothing
MEMORY_PRIOR = 0.6  # the memory label's prior mean at the middle of the fraction range
EDGE_DROP = 1.2  # how far the memory prior falls at either end of the fraction range
EDGE_POWER = 4  # ... and how sharply (flat in the middle)
SIZE_DROP = 0.25  # how far it falls at the largest graph / chunk / running cap
LABEL_NOISE = 0.25  # c in Phi(mean / sqrt(c + var))
MONOTONE = False  # memory feasibility projected onto the functions monotone in memory demand (monotone.py)
SPLIT_ROLES = True  # numerics and support: the prefill and decode backends as knobs of their own
KV_MAIN = True  # numerics: the KV dtype also as a main effect beside its interactions with the backends
SLO_AVERAGE = False  # the SLO margins' models averaged over the knobs' relevance (surrogate.fit_predict)
NUMERICS_BY_KV = False  # numerics: each backend feature as an interaction with the KV dtype (numerics_blocks)
KERNEL_FAULTS = False  # numerics: only kernels fail -- each backend feature alone and with each condition
# numerics: P(pass) averaged over the plain model and the by-KV-dtype one (numerics_blocks), each
# weighed by its marginal likelihood: a NaN of one backend with one dtype fits "the backend" and
# "the backend with that dtype" alike until a launch tells them apart
NUMERICS_AVERAGE = True
MEMORY_PLANE = True  # memory: a prior from the plane of free memory over the knobs' sizes (memory_trend)
SUPPORT_PRIOR = True  # support: a prior from the kernels SGLang ships for the GPU (support_prior)
# the mechanisms whose posterior spread `widen` scales (the budget's exploration): the kernels' support and
# numbers are sparse facts about backends that one launch settles, while memory follows the sizes smoothly
WIDENED = frozenset({"support", "numerics"})
BUILT_P = 0.97  # P(a backend runs) where SGLang ships its kernels for this GPU
NOT_BUILT_P = 0.2  # ... where it does not (a build may still add it)


def mechanism_of(outcome: str) -> Mechanism | None:
    """The mechanism of a failure outcome (None: the launch measured)."""
    if outcome in _MEASURED:
        return None
    if outcome in _MEMORY:
        return Mechanism.MEMORY
    if outcome == "not_enough_memory":
        return Mechanism.KV_POOL
    if outcome in _NUMERICS:
        return Mechanism.NUMERICS
    if outcome == "unsupported":
        return Mechanism.SUPPORT
    return Mechanism.OTHER


def passed(mechanism: Mechanism, failed: Mechanism | None, *, captured: bool = True) -> bool | None:
    """Whether a launch that ended by `failed` (None: measured) got past `mechanism`'s stage
    (None: it never reached it). `captured` False: a capture that failed other than by memory -- the
    weights loaded and the pool was sized, but what the graphs would have needed is unknown."""
    if failed is None:
        return True
    if failed is mechanism:
        return False
    if mechanism is Mechanism.KV_POOL:  # the pool is sized before the kernels start and graphs capture
        return True if failed in (Mechanism.MEMORY, Mechanism.SUPPORT, Mechanism.NUMERICS) else None
    if mechanism is Mechanism.MEMORY:
        # the gate runs after load and capture
        return True if failed is Mechanism.NUMERICS and captured else None
    if mechanism is Mechanism.SUPPORT:  # a kernel that got as far as a capture was built and imported
        return True if failed is Mechanism.NUMERICS else None
    return None


@dataclass(frozen=True, kw_only=True, slots=True)
class Outcome:
    """One launch as the feasibility model sees it."""

    index: int  # candidate row
    failed: Mechanism | None  # None: measured
    margins: tuple[float, ...] | None = None  # per SLO: the distance past its bound (<= 0 met)
    explained: bool = False  # a failure a standing rule proves
    captured: bool = True  # False: its CUDA-graph capture never finished (what the graphs need unknown)


def memory_prior(
    features: Features,
    blocks: Sequence[Block],
    strength: float = 1.0,
    mechanism: Mechanism = Mechanism.MEMORY,
) -> Array:
    """A memory mechanism's label prior mean per row (`strength` scales the fall): an OOM grows likelier
    toward the fraction range's top and with larger graphs, chunks and running caps; too small a KV
    pool toward its bottom."""
    rows = features.cat.shape[0]
    prior = np.full(rows, MEMORY_PRIOR)
    for block in blocks:
        if not block.num:
            continue
        x = features.num[:, block.num[0]]
        on = x >= 0
        if block.role == "fraction":
            edge = 2 * x - 1 if mechanism is Mechanism.MEMORY else 1 - 2 * x
            prior -= np.where(on, strength * EDGE_DROP * np.clip(edge, 0.0, 1.0) ** EDGE_POWER, 0.0)
        elif block.role in ("graphs", "chunk", "running") and mechanism is Mechanism.MEMORY:
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
    priors: Mapping[Mechanism, Array] | None = None,
    test_rows: Sequence[int] | NDArray[np.int64] | None = None,
    memory_fits: Array | None = None,
    slo_met: Mapping[int, Array] | None = None,
    widen: float = 1.0,
) -> Array:
    """log P(feasible) of the test rows: the sum over mechanisms of log P(past that stage), plus the
    SLO margins' log P(met). `prior_strength` scales the memory prior's fall toward the ends; `priors`
    (per mechanism, per row of `features`) are label prior means known from elsewhere (the kernels
    SGLang ships for the GPU, the memory plane; NaN: the plain prior), and `test_rows` the rows of
    `features` that `test` holds (needed with `priors`, `memory_fits` and `slo_met`). `memory_fits`
    (per row of `features`; NaN: not known) is P(the peak fits) from the plane of free memory
    (tuner.search.memory_trend), which stands for the out-of-memory model where it is known;
    `slo_met` (per SLO index, per row; NaN: not known) P(that SLO is met) from the same plane, for a
    free-VRAM floor, which stands for that margin's own model. `widen` scales the posterior sd of the
    WIDENED mechanisms (the budget policy's exploration: what is uncertain early is worth a launch for
    what it teaches)."""
    out = np.zeros(test.cat.shape[0])
    at = None if test_rows is None else np.asarray(test_rows, dtype=np.int64)
    for mechanism in Mechanism:
        known = (priors or {}).get(mechanism)
        given = (known, at) if known is not None and at is not None else None
        scale = widen if mechanism.value in WIDENED else 1.0
        got = _log_pass(
            features, blocks, seen, test, mechanism, explained_label, prior_strength, given, scale
        )
        if mechanism is Mechanism.MEMORY and memory_fits is not None and at is not None:
            fits = memory_fits[at]
            with np.errstate(divide="ignore"):
                got = np.where(np.isnan(fits), got, np.log(np.clip(np.nan_to_num(fits), 1e-6, 1.0)))
        out += got
    out += _log_slo(features, blocks, seen, test, slo_met, at)
    return out


def label_mean(p: Array) -> Array:
    """The label prior mean m with Phi(m / sqrt(LABEL_NOISE)) = p, within the labels' own range [-1, 1]
    (a launch's label is +1 or -1: a prior beyond it would read every launch as a surprise); NaN stays
    NaN."""
    q = np.clip(np.asarray(p, dtype=np.float64), 1e-6, 1 - 1e-6)
    inv = np.vectorize(NormalDist().inv_cdf, otypes=[float])
    m = np.clip(math.sqrt(LABEL_NOISE) * inv(np.nan_to_num(q, nan=0.5)), -1.0, 1.0)
    out: Array = np.where(np.isnan(q), np.nan, m)
    return out


def support_prior(built: Sequence[tuple[bool | None, ...]]) -> Array:
    """The support mechanism's prior label mean per candidate, from whether SGLang ships each of its
    backends' kernels for the GPU (True, False, None: not known): P(runs) is the product over its
    backends of BUILT_P or NOT_BUILT_P (unknown: the plain prior), as a label mean m with
    Phi(m / sqrt(LABEL_NOISE)) = P."""
    plain = float(norm_cdf(np.asarray([1.5 / math.sqrt(LABEL_NOISE)]))[0])
    p = np.ones(len(built))
    for i, flags in enumerate(built):
        for f in flags:
            p[i] *= plain if f is None else (BUILT_P if f else NOT_BUILT_P)
    return label_mean(p)


def numerics_blocks(blocks: Sequence[Block]) -> list[Block]:
    """The numerics model's knobs: wrong numbers come from a kernel -- a backend in its role, or the
    pair -- with the KV dtype it reads and writes, and from the pair's captured graphs. So each backend
    feature (prefill, decode, the pair) is one interaction with the KV dtype (the pair's also with
    graphs on or off): a NaN of one pair with one dtype says little about another pair with the same
    decode backend and another dtype, while NaNs of two pairs sharing a role still carry to that role.
    The graph setting, the KV dtype and the running cap stay main effects too (a NaN that needs a large
    batch, or a dtype that breaks every backend)."""
    kv = tuple(c for b in blocks if b.role == "kv_dtype" for c in b.cat)
    graphs = [b for b in blocks if b.role == "graphs" and b.cat]
    graphs_on = tuple(b.cat[1] if len(b.cat) > 1 else b.cat[0] for b in graphs)
    out: list[Block] = []
    for b in blocks:
        if b.role != "backends":
            if b.role != "kv_dtype" or KV_MAIN or not any(x.role == "backends" for x in blocks):
                out.append(b)
            continue
        # a pair: (prefill, decode, the pair's level), each with the KV dtype; the pair also with graphs
        roles = [(c,) for c in b.cat[:-1]] if SPLIT_ROLES and len(b.cat) > 1 else []
        for i, cat in enumerate([*roles, b.cat[-1:] if roles else b.cat]):
            whole = cat + kv + (graphs_on if i == len(roles) else ())
            out.append(Block(name=f"{b.name}[{i}]", cat=whole, num=(), role=b.role, product=len(whole) > 1))
    return out


CONDITIONS = frozenset({"graphs", "kv_dtype", "running"})  # what a kernel's wrong numbers can depend on


def kernel_fault_blocks(blocks: Sequence[Block]) -> list[Block]:
    """The numerics model's knobs when wrong numbers are a kernel's fault: each backend feature (the
    prefill backend, the decode backend, the pair) alone, and with each condition it ran under as one
    interaction -- the KV dtype and the running cap for every feature, the captured graphs only for the
    decode backend and the pair (CUDA graphs replay decode steps; prefill runs eager). The conditions
    have no effect of their own. A NaN of one decode backend in graphs of 128 then says nothing about
    another decode backend in the same graphs -- the search is not steered off a graph size every other
    kernel may run -- while two failures of one backend carry to that backend. Knobs of no known role
    stay main effects."""
    conditions = [b for b in blocks if b.role in CONDITIONS]
    out: list[Block] = [b for b in blocks if b.role not in CONDITIONS and b.role != "backends"]
    for pair in (b for b in blocks if b.role == "backends"):
        split = len(pair.cat) > 1
        for i, col in enumerate(pair.cat):
            feature = Block(name=f"{pair.name}[{i}]", cat=(col,), num=(), role=pair.role)
            out.append(feature)
            prefill = split and i == 0
            for c in conditions:
                if c.role == "graphs" and prefill:
                    continue
                name = f"{feature.name}x{c.name}"
                out.append(Block(name=name, cat=(col, *c.cat), num=c.num, role=pair.role, product=True))
    return out


_ORDERS = {Mechanism.MEMORY: OOM_ORDER, Mechanism.KV_POOL: POOL_ORDER}


def _log_pass(
    features: Features,
    blocks: Sequence[Block],
    seen: Sequence[Outcome],
    test: Features,
    mechanism: Mechanism,
    explained_label: float,
    strength: float,
    given: tuple[Array, NDArray[np.int64]] | None = None,
    widen: float = 1.0,
) -> Array:
    roles = ROLES_OF.get(mechanism)
    mine = list(blocks) if roles is None else [b for b in blocks if b.role in roles]
    if not mine:
        mine = list(blocks)
    alternatives: list[list[Block]] = []
    if mechanism is Mechanism.NUMERICS and KERNEL_FAULTS and any(b.role == "backends" for b in mine):
        mine = kernel_fault_blocks(mine)
    elif mechanism is Mechanism.NUMERICS and NUMERICS_BY_KV:
        mine = numerics_blocks(mine)
    elif SPLIT_ROLES and mechanism in (Mechanism.NUMERICS, Mechanism.SUPPORT):
        if mechanism is Mechanism.NUMERICS and NUMERICS_AVERAGE and any(b.role == "kv_dtype" for b in mine):
            alternatives = [numerics_blocks(mine)]
        mine = by_role(mine)
    rows, labels = [], []
    for s in seen:
        got = passed(mechanism, s.failed, captured=s.captured)
        if got is not None:
            rows.append(s.index)
            labels.append(1.0 if got else (explained_label if s.explained else -1.0))
    order = _ORDERS.get(mechanism)
    known = given[0] if given is not None else None

    def plain(f: Features, quiet: bool = False) -> Array:
        if order is None:  # nothing failed at this stage yet (quiet): it is very likely passed
            return np.full(len(f.cat), 1.5 if quiet else PASS_PRIOR)
        return memory_prior(f, mine, strength, mechanism)

    def prior(f: Features, at: Sequence[int] | NDArray[np.int64] | None, quiet: bool = False) -> Array:
        if known is None or at is None:
            return plain(f, quiet)
        row_prior = known[np.asarray(at, dtype=np.int64)]
        out: Array = np.where(np.isnan(row_prior), plain(f, quiet), row_prior)
        return out

    test_at = given[1] if given is not None else None
    if not rows or min(labels) > 0:
        # nothing failed here yet: only the prior speaks (for memory, its shape or the memory plane; for
        # support, the kernels SGLang ships for the GPU)
        z = prior(test, test_at, quiet=True) / math.sqrt(LABEL_NOISE)
    else:
        train = features.take(rows)
        target = np.asarray(labels) - prior(train, rows)
        base = prior(test, test_at)
        fits = [fit_predict(train, target, test, b, prior_mean=0.0, scale=1.0, ard=False)
                for b in (mine, *alternatives)]  # fmt: skip
        zs = [(base + f.mean) / np.sqrt(LABEL_NOISE + (widen * f.sd) ** 2) for f in fits]
        if len(fits) > 1:
            return _mixture([log_norm_cdf(z) for z in zs], [f.log_evidence for f in fits])
        z = zs[0]
    if order is not None and MONOTONE and rows:
        seen_rows, ok = features.take(rows), [v > 0 for v in labels]
        z = monotone_latent(z, test, mine, order, observed=seen_rows, passed=ok)
    return log_norm_cdf(z)


def _mixture(logs: Sequence[Array], evidences: Sequence[float]) -> Array:
    """log of the models' probabilities averaged, each model weighed by its marginal likelihood."""
    w = np.exp(np.asarray(evidences) - max(evidences))
    stacked = np.stack(logs) + np.log(np.maximum(w / w.sum(), 1e-300))[:, None]
    top = stacked.max(axis=0)
    out: Array = top + np.log(np.exp(stacked - top).sum(axis=0))
    return out


def _log_slo(
    features: Features,
    blocks: Sequence[Block],
    seen: Sequence[Outcome],
    test: Features,
    slo_met: Mapping[int, Array] | None = None,
    test_rows: NDArray[np.int64] | None = None,
) -> Array:
    """Sum over SLOs of log P(margin <= 0), each margin regressed over the measured launches, or taken
    from `slo_met` (per SLO, per row of `features`) where that knows the row."""
    measured = [s for s in seen if s.failed is None and s.margins]
    out = np.zeros(test.cat.shape[0])
    if not measured:
        return out
    count = min(len(s.margins or ()) for s in measured)
    rows = [s.index for s in measured]
    train = features.take(rows)
    for j in range(count):
        known = None
        if slo_met is not None and j in slo_met and test_rows is not None:
            known = np.asarray(slo_met[j], dtype=np.float64)[test_rows]
            if np.isfinite(known).all():
                out += np.log(np.clip(known, 1e-6, 1.0))
                continue
        m = np.asarray([(s.margins or ())[j] for s in measured], dtype=np.float64)
        if np.all(m <= 0) and len(m) < 3:
            continue  # met everywhere so far: too little to say where it stops holding
        spread = max(float(np.std(m)), float(np.median(np.abs(m))), 1e-6)
        post = fit_predict(
            train, m, test, blocks, prior_mean=float(np.mean(m)), scale=spread, average=SLO_AVERAGE
        )
        got = log_norm_cdf(-post.mean / np.maximum(post.sd, 1e-9 + 0.05 * spread))
        if known is not None:
            got = np.where(np.isfinite(known), np.log(np.clip(np.nan_to_num(known), 1e-6, 1.0)), got)
        out += got
    return out
