"""The structured search's decision, as a pure function: what has been seen -> the next candidate.

    decide(features, blocks, seen, allowed, second, seed, left, budget, pending, twins) -> Choice

`seen` holds every launched configuration: its measured objective values (first: modelled in log
space, higher is better -- a throughput, or 1 / a latency; second: the same for the second
objective), how it failed (the mechanism its log names), and its SLO margins. Candidates already
launched, running elsewhere, or proven bad by a failure rule or the memory model are not
`allowed`. Three models share one knob kernel (tuner.search.surrogate, with a relevance per knob):
log first objective over the measured launches; the chance of passing each failure mechanism,
fitted on the knobs that mechanism involves (tuner.search.feasible); and each SLO's margin. The
acquisition (tuner.search.acquire, in logs) weighs expected improvement of the incumbent (the
model's best mean at a feasible measured launch) and of the front by that chance.

Twins of a measured launch (`twins`: the same configuration but for a running cap, fraction or graph
size that could not have mattered, as its scheduler's load shows; tuner.search.twins) take its
posterior mean with no spread: launching one would be a repeat.

Launches still running (`pending`) are conditioned on as if they had measured what the model
predicts (kriging believer): the uncertainty near them shrinks, so a second worker goes elsewhere.

Budget: EI is the optimal last step; earlier, a launch is also worth what it teaches the launches
left, so the posterior spread is inflated by sqrt(1 + EXPLORE * left / budget): exploration early,
pure expected improvement when the budget runs out (and the finalists then re-measure).

Diversity: the choice is a seeded draw among near-equal scores (Gumbel-max on the log score at
temperature TEMPERATURE: a candidate scoring 10-20% below the best is still drawn now and then), so
restarts and workers with their own seeds do not walk one path; one seed always gives one choice.
With PATH_DRAW (measured, off) the noise is drawn per kernel path (kernel_paths), not per
candidate: a draw among paths by their best score, so a path's many fraction twins do not multiply
its chance. Trials asked together share one draw and take its ranks in turn.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from tuner.search.acquire import log_scores
from tuner.search.candidates import Block
from tuner.search.feasible import Mechanism, Outcome, log_p_feasible
from tuner.search.surrogate import Array, Features, fit_predict

EXPLAINED_LABEL = -0.5  # the label of a failure a rule explains, in its own mechanism's model (the rule
# already prunes its region: what is left is the doubt about its neighbours)
HV_WEIGHT = 0.1  # EHVI relative to EI: the second objective is often predicted, the first must be found
MIN_SPREAD = 0.15  # log-objective spread assumed before the launches show one (configurations differ ~15%)
EXPLORE = 3.0  # posterior variance inflation at the start of the budget, falling linearly to 0
# the same inflation of the failure mechanisms' posterior spread: a path whose chance to run is uncertain
# (an untried backend beside failed ones) is worth a launch early for what it teaches
EXPLORE_FEASIBLE = False
# the posterior sd x this at every ask: replayed, the model's z-scores have an rms of about 1.4, not 1
CALIBRATION = 1.0
# the last share of the budget chooses among the incumbent's one-knob neighbours (a trust region; 0: off)
LOCAL_LATE = 0.0
TEMPERATURE = 0.15  # Gumbel-max temperature on the log score (0: always the argmax)
# The draw's noise shared by the candidates of one kernel path (backends, KV dtype, graph list, any knob
# of no size), so a path with many fraction, chunk or cap twins near the top is drawn as often as one
# with a single candidate there, not as many times more often; within a path the best score wins.
# Measured and off (docs/design.md): the twins' count is itself a useful vote of the model's confidence.
PATH_DRAW = False
SIZES = frozenset({"fraction", "chunk", "running"})  # knob roles that are sizes along one kernel path
PATH_BACKENDS_ONLY = False  # a path is the backend pair alone (the KV dtype and graphs chosen within it)
# expected improvement of at least this share over the incumbent: a gain within the benchmark's noise
# (a fraction twin of the incumbent on a flat stretch) is no gain
IMPROVE_BY = 0.0
# Expected improvement of the difference to the incumbent, whose value is uncertain too: a candidate
# the model ties to the incumbent (a fraction twin on a flat stretch) shares its uncertainty, so
# the difference's sd is small and so is its expected gain, while a configuration the launches say
# little about differs by the sum of both variances (noisy EI's correlation, Letham et al. 2019).
CORRELATED = False  # measured: neutral (docs/design.md)
# Twins of a measured launch (tuner.search.twins: the same configuration but for knobs that could not
# have mattered to its benchmark) take its throughput as known: the launch's posterior mean, with
# no spread of their own -- launching one is a repeat, not exploration.
TWINS = True
PRIOR_LATER = 0.0  # the memory prior's strength once a feasible launch is known (1 before)
# Measured options, off (docs/design.md gives the figures):
AVERAGE = False  # average the objective's model over the knobs' relevance and noise (fit_predict)
# A benchmark's run-to-run spread, in log units: candidate noise sds for the objective's model
# (around 2.5%: serving benchmarks repeat within 1-5%), used with NOISE_PRIOR. Chosen by likelihood
# alone, a few launches' noise can be read as knob effects (the incumbent's neighbours look better).
NOISE_SD = (0.008, 0.015, 0.025, 0.04, 0.07)
NOISE_PRIOR = False  # the objective's noise from NOISE_SD under its prior (else the relative NOISES grid)
# The KV pool's share of the running batch's tokens (the memory model's prediction) as one more knob of
# the objective's model: below 1 the batch queues, so throughput falls off a cliff the fraction alone
# puts at a different place per KV dtype and graph setting.
KV_COVER = False


@dataclass(frozen=True, kw_only=True, slots=True)
class Seen:
    """One launched configuration: its candidate index, objective values (None: nothing measured)."""

    index: int
    log_first: float | None  # log of the first objective (transformed so higher is better)
    second: float | None  # the second objective, transformed so higher is better and > 0, if any
    feasible: bool
    trial: int | None = None  # the Optuna trial number, when there is one
    explained: bool = False  # a failure a standing rule proves: the rule's scope says where it holds
    failed: Mechanism | None = None  # how it failed (None: measured); OTHER when unknown
    margins: tuple[float, ...] | None = None  # per SLO, the distance past its bound (<= 0 met)
    captured: bool = True  # False: its CUDA-graph capture failed other than by memory

    @property
    def mechanism(self) -> Mechanism | None:
        if self.log_first is not None or self.failed is not None:
            return self.failed
        return None if self.feasible else Mechanism.OTHER


@dataclass(frozen=True, kw_only=True, slots=True)
class Choice:
    """The candidate chosen and what the model expects of exploring now."""

    index: int
    # the best open candidate's expected gain over the incumbent, as a share of it (EI x P(feasible), the
    # acquisition's own value); None until a feasible launch was measured
    gain: float | None = None
    noise: float | None = None  # the objective model's measurement noise sd, log units (a relative sd)


def choose(features: Features, blocks: Sequence[Block], seen: Sequence[Seen], allowed: Sequence[bool],
           **kw: object) -> int | None:  # fmt: skip
    """The index of the next candidate to launch (decide's), or None when none is allowed."""
    got = decide(features, blocks, seen, allowed, **kw)  # type: ignore[arg-type]
    return None if got is None else got.index


def decide(
    features: Features,
    blocks: Sequence[Block],
    seen: Sequence[Seen],
    allowed: Sequence[bool],
    *,
    second: Array | None,
    seed: int,
    rank: int = 0,
    left: int | None = None,
    budget: int | None = None,
    pending: Sequence[int] = (),
    capacity: Array | None = None,
    priors: Mapping[Mechanism, Array] | None = None,
    memory_fits: Array | None = None,
    offset: Array | None = None,
    slo_met: Mapping[int, Array] | None = None,
    twins: NDArray[np.int64] | None = None,
) -> Choice | None:
    """The next candidate to launch (its index), or None when none is allowed.

    `second`: the second objective predicted per candidate (None: modelled from `seen` when the
    launches measured one). `rank` k > 0 takes the k-th best draw: k trials asked before this one
    are still choosing (their params not yet written). `left` / `budget`: launches left and in all.
    `capacity`: per candidate, a feature of the objective's model only (KV_COVER; -1 unknown).
    `priors`: per failure mechanism, a label prior mean per candidate known from elsewhere (the
    kernels SGLang ships for the GPU; tuner.search.feasible.log_p_feasible). `memory_fits`: per
    candidate, P(its peak memory fits) from the plane of free memory (NaN: not known); `slo_met`: per
    SLO index, P(met) per candidate from the same plane (a free-VRAM floor). `offset`: per
    candidate, a prior mean of the log first objective that the model learns around (physics).
    """
    mask = np.asarray(allowed, dtype=bool)
    if not mask.any():
        return None
    open_rows = np.flatnonzero(mask)
    test = features.take([int(i) for i in open_rows])
    outcomes = [
        Outcome(
            index=s.index, failed=s.mechanism, margins=s.margins, explained=s.explained, captured=s.captured
        )
        for s in seen
    ]
    known = any(s.feasible for s in seen)
    widen = CALIBRATION
    if left is not None and budget:
        widen *= math.sqrt(1.0 + EXPLORE * max(0, left - 1) / budget)
    log_p = log_p_feasible(
        features, blocks, outcomes, test, explained_label=EXPLAINED_LABEL,
        prior_strength=PRIOR_LATER if known else 1.0, priors=priors, test_rows=open_rows,
        memory_fits=memory_fits, slo_met=slo_met, widen=widen if EXPLORE_FEASIBLE else 1.0,
    )  # fmt: skip
    measured = [s for s in seen if s.log_first is not None]
    waiting = features.take(list(pending)) if pending else None
    if capacity is not None:
        features, blocks, test, waiting = _with_column(features, blocks, capacity, open_rows, pending)
    shift = None if offset is None else np.asarray(offset, dtype=np.float64)
    around = measured
    if shift is not None:  # the model learns the rest around the prior mean
        around = [replace(s, log_first=(s.log_first or 0.0) - float(shift[s.index])) for s in measured]
    mu, sd, best, incumbent, sd_gain, noise, at_good = _posterior(
        features, blocks, around, test, waiting, shift
    )
    if shift is not None:
        mu = mu + shift[open_rows]
    if twins is not None and at_good:
        mu, sd = _as_twins(mu, sd, twins[open_rows], at_good, 0.0 if shift is None else shift)
    sd = sd * widen
    sd_gain = None if sd_gain is None else sd_gain * widen
    front = [(math.exp(s.log_first), s.second) for s in measured
             if s.feasible and s.log_first is not None and s.second is not None]  # fmt: skip
    predicted = None if second is None else second[open_rows]
    if predicted is None and front:
        predicted = _second_of(features, blocks, measured, test)
    acq = log_scores(
        mu, sd, log_p, best=best, second=predicted, front=front, hv_weight=HV_WEIGHT, improve_by=IMPROVE_BY,
        sd_gain=sd_gain,
    )  # fmt: skip
    gain = float(np.exp(np.max(acq))) if best is not None and len(acq) else None
    late = left is not None and budget and left <= LOCAL_LATE * budget
    if late and incumbent is not None:
        near = _neighbours(features, blocks, open_rows, incumbent)
        if near.any():
            acq = np.where(near, acq, -np.inf)
    paths = kernel_paths(features, blocks, open_rows) if PATH_DRAW else np.arange(len(acq))
    index = int(open_rows[seeded_draw(acq, paths, seed=seed, rank=rank)])
    return Choice(index=index, gain=gain, noise=noise)


def seeded_draw(acq: Array, paths: NDArray[np.intp], *, seed: int, rank: int = 0) -> int:
    """The position in `acq` of the seeded choice: Gumbel-max at TEMPERATURE with one noise draw per
    path (`paths`: each position's path number), the best score within the drawn path. `rank` k takes
    the k-th path of the same draw (a trial still choosing beside k earlier ones), then the paths'
    other candidates once every path has one."""
    rng = np.random.default_rng(seed & 0xFFFFFFFF)
    noise = rng.gumbel(size=int(paths.max()) + 1)[paths] if TEMPERATURE > 0 else 0.0
    order = np.argsort(-(acq + TEMPERATURE * noise), kind="stable")
    at = np.sort(np.unique(paths[order], return_index=True)[1])
    firsts = order[at]
    if rank < len(firsts):
        return int(firsts[rank])
    rest = np.delete(order, at)  # then the paths' other candidates, in the draw's order
    return int(rest[min(rank - len(firsts), len(rest) - 1)]) if len(rest) else int(order[-1])


def kernel_paths(features: Features, blocks: Sequence[Block], rows: NDArray[np.intp]) -> NDArray[np.intp]:
    """Per row of `rows`, the number of its kernel path: rows alike in every categorical knob but the
    sizes (fraction, prefill chunk, running cap) share one."""
    cols: list[int] = []
    for b in blocks:
        if b.role in SIZES or not b.cat or (PATH_BACKENDS_ONLY and b.role != "backends"):
            continue
        cols += list(b.cat)
    if not cols:
        return np.zeros(len(rows), dtype=np.intp)
    _, inverse = np.unique(features.cat[rows][:, cols], axis=0, return_inverse=True)
    out: NDArray[np.intp] = np.asarray(inverse, dtype=np.intp).reshape(-1)
    return out


def _with_column(
    features: Features,
    blocks: Sequence[Block],
    column: Array,
    open_rows: Sequence[int] | np.ndarray,
    pending: Sequence[int],
) -> tuple[Features, list[Block], Features, Features | None]:
    """The features, blocks, open rows and pending rows with one more numeric knob column."""
    num = np.column_stack([features.num, np.asarray(column, dtype=np.float64)])
    wider = Features(cat=features.cat, num=num)
    block = Block(name="kv_cover", cat=(), num=(num.shape[1] - 1,))
    waiting = wider.take(list(pending)) if pending else None
    return wider, [*blocks, block], wider.take([int(i) for i in open_rows]), waiting


def _as_twins(
    mu: Array, sd: Array, twin_rows: NDArray[np.int64], at_good: Mapping[int, float], shift: Array | float
) -> tuple[Array, Array]:
    """The open candidates' mean and sd with each twin of a measured launch given the launch's
    posterior mean (`at_good`: per measured feasible row, without the prior `shift`) and no spread."""
    mu, sd = mu.copy(), sd.copy()
    for k, source in enumerate(twin_rows):
        if int(source) in at_good:
            own = shift if isinstance(shift, float) else float(shift[int(source)])
            mu[k] = at_good[int(source)] + own
            sd[k] = 1e-6
    return mu, sd


def _posterior(
    features: Features,
    blocks: Sequence[Block],
    measured: Sequence[Seen],
    test: Features,
    waiting: Features | None,
    shift: Array | None = None,
) -> tuple[Array, Array, float | None, int | None, Array | None, float | None, dict[int, float]]:
    """The first objective's log posterior (mean, sd) over the open candidates, the incumbent by the
    model's mean (None until a feasible launch was measured) with its row, (CORRELATED) the sd of
    each candidate's difference to the incumbent, the fitted measurement noise sd, and the posterior
    mean at each measured feasible launch's row. With nothing measured: a flat prior, kept away from
    what is already running."""
    n = len(test.cat)
    if not measured:
        sd = _spread_near(features, blocks, test, waiting) if waiting is not None else np.ones(n)
        return np.zeros(n), sd, None, None, None, None, {}
    y = np.asarray([s.log_first for s in measured], dtype=np.float64)
    spread = max(float(np.std(y)), MIN_SPREAD)
    good = [s.index for s in measured if s.feasible]
    both = Features(
        cat=np.concatenate([test.cat, features.take(good).cat]),
        num=np.concatenate([test.num, features.take(good).num]),
    )
    train = features.take([s.index for s in measured])
    post = fit_predict(
        train,
        y,
        both,
        blocks,
        scale=spread,
        pending=waiting,
        noise_sd=NOISE_SD if NOISE_PRIOR else None,
        average=AVERAGE,
        anchors=features.take(good) if CORRELATED and good else None,
    )
    noise = spread * math.sqrt(post.noise)
    # the incumbent by the model's mean, not the luckiest noisy measurement
    if not good:
        return post.mean[:n], post.sd[:n], None, None, None, noise, {}
    means = {g: float(m) for g, m in zip(good, post.mean[n:], strict=True)}
    at_good = post.mean[n:] + (shift[good] if shift is not None else 0.0)
    top = int(np.argmax(at_good))
    sd_gain = None
    if post.anchor_cov is not None:
        var = post.sd[:n] ** 2 + post.sd[n + top] ** 2 - 2.0 * post.anchor_cov[:n, top]
        sd_gain = np.sqrt(np.maximum(var, 1e-12))
    return post.mean[:n], post.sd[:n], math.exp(float(at_good[top])), good[top], sd_gain, noise, means


def _neighbours(
    features: Features, blocks: Sequence[Block], rows: NDArray[np.intp], centre: int
) -> NDArray[np.bool_]:
    """Which of `rows` differ from the `centre` row in one knob at most (interactions not counted)."""
    differ = np.zeros(len(rows), dtype=np.int64)
    for b in blocks:
        if b.product:
            continue
        moved = np.zeros(len(rows), dtype=bool)
        if b.cat:
            cols = list(b.cat)
            moved |= np.any(features.cat[rows][:, cols] != features.cat[centre, cols], axis=1)
        if b.num:
            cols = list(b.num)
            moved |= np.any(np.abs(features.num[rows][:, cols] - features.num[centre, cols]) > 1e-9, axis=1)
        differ += moved
    out: NDArray[np.bool_] = differ <= 1
    return out


def _second_of(
    features: Features, blocks: Sequence[Block], measured: Sequence[Seen], test: Features
) -> Array | None:
    """The second objective of the test rows, from a log-space model of the measured launches."""
    rows = [(s.index, s.second) for s in measured if s.second is not None and s.second > 0]
    if len(rows) < 2:
        return None
    y = np.log(np.asarray([v for _, v in rows], dtype=np.float64))
    post = fit_predict(
        features.take([i for i, _ in rows]), y, test, blocks, scale=max(float(np.std(y)), MIN_SPREAD)
    )
    out: Array = np.exp(post.mean)
    return out


def _spread_near(features: Features, blocks: Sequence[Block], test: Features, waiting: Features) -> Array:
    """Before any measurement: the prior sd after conditioning on the running launches."""
    post = fit_predict(
        waiting, np.zeros(waiting.cat.shape[0]), test, blocks, prior_mean=0.0, scale=1.0, ard=False
    )
    out: Array = post.sd
    return out
