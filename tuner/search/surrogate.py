"""A Gaussian-process surrogate over the knobs of a launch: main effects plus pairwise interactions.

Throughput of a launch is close to a product of knob effects (a backend's speed factor, the graph
effect, the KV-capacity effect of the fraction), with a few physical couplings (the decode backend
x the graph batch size, the fraction x the graph size). In log space that is additive plus
pairwise terms, which is what the kernel says:

    k(x, x') = c + a/W * sum_j w_j k_j + b/V * sum_{j<l} w_j w_l k_j k_l
    k_j      = mean over the knob's features of [x == x'] (categorical), exp(-d^2 / 2l^2) (numeric)

(W = sum_j w_j, V = sum_{j<l} w_j w_l: every point keeps prior variance 1.) The weights w_j are
the knobs' relevances (ARD): a knob that does not move the target gets a small weight, so its
levels stop making configurations look different. The pairwise sum is
((sum_j w_j k_j)^2 - sum_j w_j^2 k_j^2) / 2, so a prediction costs O(J m n) for m candidates and n
observations. Targets are standardised; the numeric length scale, the interaction share b and the
noise are chosen by marginal likelihood on a small grid, then the relevances by coordinate ascent
of the marginal likelihood times a log-normal prior on each weight (log w_j ~ N(0, 1): equal
relevance until the launches say otherwise). Pure numpy: no torch, no scipy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from tuner.search.candidates import Block

LENGTHS = (0.15, 0.45)  # candidate numeric length scales, on the [0, 1] feature scale
CONSTANT = 0.05  # the share of the variance every pair of configurations shares
SHARES = (0.15, 0.35, 0.6)  # candidate interaction shares b (a = 1 - c - b)
NOISES = (0.003, 0.02, 0.1)  # candidate noise variances, relative to the standardised target
ARD_MIN_N = 6  # fewer observations cannot tell a knob's relevance: equal weights
ARD_STEPS = (0.25, 4.0)  # multiplicative moves of one weight per coordinate-ascent step
ARD_SWEEPS = 2
ARD_PRIOR_SD = 1.0  # log w_j ~ N(0, ARD_PRIOR_SD^2)
RELEVANT = 4.0  # model averaging: a knob that matters RELEVANT times the others' weight (or 1 / RELEVANT)
AVERAGE_TOP = 4  # ... over at most this many settings
AVERAGE_MASS = 0.95  # ... holding this share of their posterior probability
NOISE_PRIOR_SD = 0.7  # log noise sd ~ N(log middle of the candidates, NOISE_PRIOR_SD^2), when given
Array = NDArray[np.float64]


@dataclass(frozen=True, kw_only=True, slots=True)
class Features:
    """Categorical levels (int, -1 inactive) and numeric values in [0, 1] (-1 inactive) per row."""

    cat: NDArray[np.int64]
    num: Array

    def take(self, rows: Sequence[int]) -> Features:
        idx = np.asarray(rows, dtype=np.int64)
        return Features(cat=self.cat[idx], num=self.num[idx])


def knob_kernels(
    a: Features, b: Features, blocks: Sequence[Block], length: float = LENGTHS[0]
) -> list[Array]:
    """Per knob, the similarity of every row of `a` to every row of `b` (values in [0, 1])."""
    out: list[Array] = []
    for block in blocks:
        parts: list[Array] = []
        for c in block.cat:
            x, y = a.cat[:, c][:, None], b.cat[:, c][None, :]
            parts.append(((x == y) & (x >= 0)).astype(np.float64) + ((x < 0) & (y < 0)))
        for c in block.num:
            x2, y2 = a.num[:, c][:, None], b.num[:, c][None, :]
            near = np.exp(-((x2 - y2) ** 2) / (2 * length**2))
            both_off = (x2 < 0) & (y2 < 0)
            one_off = (x2 < 0) ^ (y2 < 0)
            parts.append(np.where(both_off, 1.0, np.where(one_off, 0.0, near)))
        if parts:
            out.append(np.prod(parts, axis=0) if block.product else np.mean(parts, axis=0))
    return out


def combine(kernels: Sequence[Array], share: float, weights: Sequence[float] | Array | None = None) -> Array:
    """The full kernel from the knobs' kernels: constant + weighted main effects + pairwise products."""
    j = len(kernels)
    w = np.ones(j) if weights is None else np.asarray(weights, dtype=np.float64)
    total: Array = np.sum([wi * k for wi, k in zip(w, kernels, strict=True)], axis=0)
    if j < 2:
        out: Array = CONSTANT + (1.0 - CONSTANT) * total / max(float(np.sum(w)), 1e-12)
        return out
    main = (1.0 - CONSTANT - share) * total / float(np.sum(w))
    squares: Array = np.sum([(wi * k) ** 2 for wi, k in zip(w, kernels, strict=True)], axis=0)
    pairs = (total * total - squares) / 2.0
    norm = (float(np.sum(w)) ** 2 - float(np.sum(w * w))) / 2.0
    full: Array = CONSTANT + main + share * pairs / max(norm, 1e-12)
    return full


@dataclass(frozen=True, kw_only=True, slots=True)
class Posterior:
    """Predictions of a fitted surrogate on the candidates: mean and standard deviation (target units)."""

    mean: Array
    sd: Array
    share: float
    noise: float
    weights: tuple[float, ...] = ()  # the knobs' relevances (ARD), mean 1
    # the posterior covariance of each test row with each anchor row (target units squared), if asked
    anchor_cov: Array | None = None
    log_evidence: float = 0.0  # the log marginal likelihood (x hyperprior) of the chosen setting


def fit_predict(
    train: Features,
    y: Array,
    test: Features,
    blocks: Sequence[Block],
    *,
    prior_mean: float | None = None,
    scale: float | None = None,
    ard: bool = True,
    pending: Features | None = None,
    noise_sd: Sequence[float] | None = None,
    average: bool = False,
    anchors: Features | None = None,
) -> Posterior:
    """Fit on (train, y) and predict at `test`; hyperparameters by marginal likelihood on a grid.

    The prior mean and scale default to the targets' mean and spread (standardised targets).
    `pending`: configurations launched but not yet measured; they are conditioned on as if they had
    measured what the model predicts for them (the mean stays, the uncertainty near them shrinks).
    `noise_sd`: the measurement noise in target units when it is known a priori (a benchmark's
    run-to-run spread): candidate noise sds, weighed by a log-normal prior around their geometric
    middle (NOISE_PRIOR_SD), instead of the relative NOISES grid chosen by likelihood alone -- which,
    with a handful of launches, explains the noise away as knob effects.
    `average`: instead of the one most likely setting, average the predictions over the knobs'
    relevance (equal, or one knob RELEVANT times the others, or 1 / RELEVANT) and the noise, each
    weighed by its marginal likelihood times its prior (Bayesian model averaging): a few launches
    cannot tell which knob matters, and a single fitted guess makes the model sure of what it has
    not seen (a backend pair never measured looks like the average of those that were).
    `anchors`: rows whose posterior covariance with every test row is returned too (`anchor_cov`; the
    most probable setting's when averaging), e.g. the incumbent, whose improvement is a difference.
    """
    n = len(y)
    centre = float(np.mean(y)) if prior_mean is None else prior_mean
    if scale is None:
        scale = max(float(np.std(y)) if n > 1 else 1.0, 1e-3)
    z = (y - centre) / scale
    numeric = any(b.num for b in blocks)
    best: tuple[float, float, float, float] | None = None
    cached: dict[float, list[Array]] = {}
    noises = _noise_grid(noise_sd, scale)
    for length in LENGTHS if numeric else LENGTHS[:1]:
        cached[length] = knob_kernels(train, train, blocks, length)
        for share in SHARES if len(blocks) > 1 else (0.0,):
            k = combine(cached[length], share)
            for noise, log_prior in noises:
                lml = _log_marginal(k, z, noise) + log_prior
                if best is None or lml > best[0]:
                    best = (lml, length, share, noise)
    assert best is not None
    lml, length, share, noise = best
    k_train = cached[length]
    if average and len(k_train) > 1:
        settings = _averaged(k_train, z, share, noises)
    else:
        fitted = ard and n >= ARD_MIN_N
        weights = _relevances(k_train, z, share, noise, lml) if fitted else np.ones(len(k_train))
        settings = [(1.0, weights, noise)]
    k_test = knob_kernels(test, train, blocks, length)
    k_all = k_both = None
    given = train  # what the posterior is conditioned on
    if pending is not None and pending.cat.shape[0] > 0:
        both = given = Features(
            cat=np.concatenate([train.cat, pending.cat]), num=np.concatenate([train.num, pending.num])
        )
        k_all = knob_kernels(both, both, blocks, length)
        k_both = knob_kernels(test, both, blocks, length)
    k_anchors = None
    if anchors is not None and anchors.cat.shape[0] > 0:
        k_anchors = (
            knob_kernels(anchors, given, blocks, length),
            knob_kernels(test, anchors, blocks, length),
        )
    if len(settings) == 1:
        first, var, cov = _predict(
            k_train, k_test, z, share, settings[0][1], settings[0][2], k_all, k_both, k_anchors
        )
    else:  # the mixture's mean and variance; the most probable setting's covariance
        first = np.zeros(len(test.cat))
        second = np.zeros(len(test.cat))
        for i, (p, weights, noise_h) in enumerate(settings):
            mean, var, got = _predict(
                k_train, k_test, z, share, weights, noise_h, k_all, k_both, k_anchors if i == 0 else None
            )
            if i == 0:
                cov = got
            first += p * mean
            second += p * (var + mean * mean)
        var = np.maximum(second - first * first, 1e-9)
    top = settings[0]
    cov = None if cov is None else scale * scale * cov
    return Posterior(
        mean=centre + scale * first, sd=scale * np.sqrt(var), share=share, noise=top[2],
        weights=tuple(float(w) for w in top[1]), anchor_cov=cov, log_evidence=lml,
    )  # fmt: skip


def _predict(
    k_train: Sequence[Array],
    k_test: Sequence[Array],
    z: Array,
    share: float,
    weights: Array,
    noise: float,
    k_all: Sequence[Array] | None,
    k_both: Sequence[Array] | None,
    k_anchors: tuple[Sequence[Array], Sequence[Array]] | None = None,
) -> tuple[Array, Array, Array | None]:
    """Standardised posterior mean and variance at the test rows for one setting of the kernel, and
    with `k_anchors` (anchors x conditioned rows, test rows x anchors) the test rows' posterior
    covariance with the anchors."""
    n = len(z)
    k = combine(k_train, share, weights) + noise * np.eye(n)
    chol = np.linalg.cholesky(k + 1e-9 * np.eye(n))
    alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, z))
    cross = combine(k_test, share, weights)
    mean: Array = cross @ alpha
    if k_all is not None and k_both is not None:
        full = combine(k_all, share, weights)
        chol = np.linalg.cholesky(full + (noise + 1e-9) * np.eye(full.shape[0]))
        cross = combine(k_both, share, weights)
    v = np.linalg.solve(chol, cross.T)
    var: Array = np.maximum(1.0 - np.sum(v * v, axis=0), 1e-9)  # prior variance of every point is 1
    if k_anchors is None:
        return mean, var, None
    v_anchor = np.linalg.solve(chol, combine(k_anchors[0], share, weights).T)
    cov: Array = combine(k_anchors[1], share, weights) - v.T @ v_anchor
    return mean, var, cov


def _averaged(
    kernels: Sequence[Array], z: Array, share: float, noises: Sequence[tuple[float, float]]
) -> list[tuple[float, Array, float]]:
    """(posterior probability, relevances, noise) of the settings averaged over, most probable first:
    at most AVERAGE_TOP of them, holding AVERAGE_MASS of the probability."""
    j = len(kernels)
    options = [np.ones(j)]
    for i in range(j):
        for step in (RELEVANT, 1.0 / RELEVANT):
            w = np.ones(j)
            w[i] = step
            options.append(w / np.exp(np.mean(np.log(w))))
    scored: list[tuple[float, Array, float]] = []
    for w in options:
        k = combine(kernels, share, w)
        for noise, log_prior in noises:
            scored.append((_log_marginal(k, z, noise) + log_prior - _log_prior(w), w, noise))
    scored.sort(key=lambda t: -t[0])
    top = scored[0][0]
    probs = np.exp(np.asarray([s for s, _, _ in scored]) - top)
    probs /= probs.sum()
    kept: list[tuple[float, Array, float]] = []
    mass = 0.0
    for p, (_, w, noise) in zip(probs, scored, strict=True):
        kept.append((float(p), w, noise))
        mass += float(p)
        if mass >= AVERAGE_MASS or len(kept) >= AVERAGE_TOP:
            break
    return [(p / mass, w, noise) for p, w, noise in kept]


def _noise_grid(noise_sd: Sequence[float] | None, scale: float) -> list[tuple[float, float]]:
    """(noise variance in standardised units, log prior) per candidate noise."""
    if not noise_sd:
        return [(n, 0.0) for n in NOISES]
    middle = float(np.exp(np.mean(np.log(noise_sd))))
    return [((sd / scale) ** 2, -(math.log(sd / middle) ** 2) / (2 * NOISE_PRIOR_SD**2)) for sd in noise_sd]


def _relevances(kernels: Sequence[Array], z: Array, share: float, noise: float, start: float) -> Array:
    """Per-knob weights by coordinate ascent of log marginal likelihood + log-normal prior (mean 1)."""
    w = np.ones(len(kernels))
    if len(kernels) < 2:
        return w
    best = start
    for _ in range(ARD_SWEEPS):
        moved = False
        for j in range(len(kernels)):
            for step in ARD_STEPS:
                trial = w.copy()
                trial[j] *= step
                trial /= np.exp(np.mean(np.log(trial)))  # geometric mean 1: the prior's centre
                got = _log_marginal(combine(kernels, share, trial), z, noise) - _log_prior(trial)
                if got > best + 1e-6:
                    best, w, moved = got, trial, True
        if not moved:
            break
    return w


def _log_prior(w: Array) -> float:
    """Minus the log-normal prior's log density of the weights (up to a constant)."""
    return float(np.sum(np.log(w) ** 2)) / (2 * ARD_PRIOR_SD**2)


def _log_marginal(k: Array, z: Array, noise: float) -> float:
    n = len(z)
    try:
        chol = np.linalg.cholesky(k + (noise + 1e-9) * np.eye(n))
    except np.linalg.LinAlgError:
        return -math.inf
    alpha = np.linalg.solve(chol, z)
    return float(-0.5 * alpha @ alpha - np.sum(np.log(np.diag(chol))) - 0.5 * n * math.log(2 * math.pi))
