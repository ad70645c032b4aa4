"""The structured search's models: stable log acquisition, failures by mechanism, the physics prior,
SLO margins, per-knob relevance, pending launches, budget and seed diversity."""

from __future__ import annotations

import math
import random

import numpy as np
import optuna
import pytest

from tuner.search import feasible, sampler, strategy
from tuner.search.acquire import log_ehvi, log_expected_excess, log_norm_cdf, log_scores
from tuner.search.candidates import Block
from tuner.search.feasible import Mechanism, Outcome, log_p_feasible, mechanism_of
from tuner.search.sampler import _seen, relative_margin
from tuner.search.strategy import Seen, _posterior, choose
from tuner.search.surrogate import Features, fit_predict

# a toy space: fraction (9 levels) x graphs (off + 3 sizes) x pair (4) x KV dtype (2)
BLOCKS = (
    Block(name="mem-fraction-static", cat=(), num=(0,), role="fraction"),
    Block(name="cuda_graph", cat=(0,), num=(1,), role="graphs"),
    Block(name="sparse_backends", cat=(1,), num=(), role="backends"),
    Block(name="kv-cache-dtype", cat=(2,), num=(), role="kv_dtype"),
)
GRID = [(f, g, p, k) for f in range(9) for g in range(4) for p in range(4) for k in range(2)]
FEATURES = Features(
    cat=np.asarray([(g, p, k) for _, g, p, k in GRID], dtype=np.int64),
    num=np.asarray([(f / 8, 0.0 if g == 0 else 0.25 + 0.25 * g) for f, g, _, _ in GRID], dtype=np.float64),
)


def truth(f: int, g: int, p: int, k: int) -> float:
    return [0.0, 0.25, -0.1, 0.1][p] + 0.1 * g - 0.3 * (f / 8 - 0.6) ** 2 + 0.05 * k


def row(f: int, g: int, p: int, k: int) -> int:
    return GRID.index((f, g, p, k))


def test_the_normal_log_cdf_holds_in_both_tails() -> None:
    x = np.asarray([-40.0, -20.0, -9.0, -8.0, -3.0, 0.0, 3.0, 9.0])
    got = log_norm_cdf(x)
    assert np.all(np.isfinite(got))
    assert got[2] == pytest.approx(-43.6281, abs=1e-3)  # log Phi(-9); Phi(-9) alone is 1.1e-19
    assert got[1] == pytest.approx(-203.9172, abs=1e-3)
    assert got[5] == pytest.approx(math.log(0.5))
    assert got[6] == pytest.approx(math.log(0.9986501), abs=1e-6)
    assert np.all(np.diff(log_norm_cdf(np.linspace(-30, 5, 400))) > 0)  # monotone across the switch


def test_log_expected_improvement_is_finite_far_below_the_incumbent_and_orders_candidates() -> None:
    mu = np.log(np.asarray([10.0, 50.0, 90.0, 99.0, 150.0]))
    sd = np.full(5, 0.01)
    got = log_expected_excess(mu, sd, 100.0)
    assert np.all(np.isfinite(got)) and np.all(np.diff(got) > 0)
    rng = np.random.default_rng(1)
    draws = np.exp(mu[3] + 0.2 * rng.standard_normal(400_000))
    mc = np.maximum(draws - 100.0, 0).mean()
    assert log_expected_excess(mu[3:4], np.asarray([0.2]), 100.0)[0] == pytest.approx(math.log(mc), abs=0.02)
    front = [(100.0, 10.0), (50.0, 30.0)]
    hv = log_ehvi(mu, sd, np.full(5, 20.0), front)
    assert np.all(np.isfinite(hv)) and np.all(np.diff(hv) > 0)


def test_no_open_candidate_scores_exactly_zero_or_nan_after_twenty_launches() -> None:
    rng = random.Random(0)
    rows = rng.sample(range(len(GRID)), 20)
    y = np.asarray([truth(*GRID[i]) for i in rows])
    post = fit_predict(FEATURES.take(rows), y, FEATURES, BLOCKS, scale=max(float(np.std(y)), 0.15))
    open_rows = [i for i in range(len(GRID)) if i not in rows]
    best = math.exp(float(np.max(post.mean[rows])))
    logs = log_scores(
        post.mean[open_rows], post.sd[open_rows], np.full(len(open_rows), math.log(0.9)),
        best=best, second=None, front=[],
    )  # fmt: skip
    assert np.all(np.isfinite(logs))
    assert np.all(np.exp(logs) > 0) or len(set(np.round(logs, 6))) > 0.9 * len(logs)  # no ties at 0
    assert len(set(np.round(logs, 9))) > 0.9 * len(logs)  # the choice never falls to tie-breaking


def test_an_improvement_threshold_ranks_a_certain_twin_of_the_incumbent_below_an_uncertain_guess() -> None:
    best = 1000.0
    twin, far = math.log(best), math.log(0.9 * best)  # the incumbent's flat neighbour; a 10% worse guess
    mu, sd = np.asarray([twin, far]), np.asarray([0.02, 0.1])
    logs = {
        by: log_scores(mu, sd, np.zeros(2), best=best, second=None, front=[], improve_by=by)
        for by in (0.0, 0.03)
    }
    assert logs[0.0][0] > logs[0.0][1]  # plain EI: the twin's sliver of noise wins
    assert logs[0.03][0] < logs[0.03][1]  # a 3% gain is out of the twin's reach, not of the other's
    assert np.all(np.isfinite(logs[0.03]))


def test_a_garbage_failure_lowers_its_pair_and_dtype_not_the_pair_with_another_dtype() -> None:
    seen = [
        Outcome(index=row(4, 0, 0, 0), failed=None),
        Outcome(index=row(4, 0, 1, 0), failed=Mechanism.NUMERICS),
    ]
    p = np.exp(log_p_feasible(FEATURES, BLOCKS, seen, FEATURES))
    same = p[row(5, 0, 1, 0)]
    other_dtype = p[row(5, 0, 1, 1)]
    other_pair = p[row(5, 0, 2, 0)]
    assert same < other_dtype < other_pair < p[row(5, 0, 0, 0)]  # the pair and dtype carry it most
    assert other_dtype > 3 * same  # the pair's other dtype stays a launch worth making
    # a memory failure at the top of the range says nothing about a backend pair in the middle
    oom = [
        Outcome(index=row(4, 0, 0, 0), failed=None),
        Outcome(index=row(8, 3, 1, 0), failed=Mechanism.MEMORY),
    ]
    q = np.exp(log_p_feasible(FEATURES, BLOCKS, oom, FEATURES))
    assert q[row(4, 0, 1, 0)] == pytest.approx(q[row(4, 0, 2, 0)], rel=1e-6)
    assert q[row(8, 3, 2, 0)] < q[row(4, 3, 2, 0)]  # the memory knobs carry it


def test_before_anything_runs_failure_risk_grows_toward_the_fraction_ends_and_with_graph_size() -> None:
    p = np.exp(log_p_feasible(FEATURES, BLOCKS, [], FEATURES))
    middle, low, high = p[row(4, 0, 0, 0)], p[row(0, 0, 0, 0)], p[row(8, 0, 0, 0)]
    assert middle > 2 * low and middle > 2 * high
    assert p[row(4, 3, 0, 0)] < p[row(4, 1, 0, 0)] < middle
    first = {choose(FEATURES, BLOCKS, [], [True] * len(GRID), second=None, seed=s) for s in range(12)}
    assert all(2 <= GRID[i][0] <= 6 for i in first if i is not None)  # away from the box's bounds


def test_a_measured_slo_margin_steers_toward_the_boundary_side_that_holds() -> None:
    seen = [
        Outcome(index=row(f, 0, 0, 0), failed=None, margins=(m,))
        for f, m in ((2, -6.0), (4, -2.0), (6, 2.0), (8, 6.0))
    ]
    p = np.exp(log_p_feasible(FEATURES, BLOCKS, seen, FEATURES))
    assert p[row(3, 0, 0, 0)] > 0.7 and p[row(7, 0, 0, 0)] < 0.3
    assert p[row(3, 0, 0, 0)] > p[row(5, 0, 0, 0)] > p[row(7, 0, 0, 0)]


def test_relevance_is_learnt_per_knob() -> None:
    rng = random.Random(2)
    rows = rng.sample(range(len(GRID)), 40)
    y = np.asarray([[0.0, 0.6, -0.4, 0.3][GRID[i][2]] for i in rows])  # only the pair matters
    post = fit_predict(FEATURES.take(rows), y, FEATURES, BLOCKS)
    weights = dict(zip((b.name for b in BLOCKS), post.weights, strict=True))
    assert weights["sparse_backends"] > 2 * weights["kv-cache-dtype"]
    assert weights["sparse_backends"] > 2 * weights["mem-fraction-static"]


def test_the_averaged_model_is_unsure_of_an_unseen_level_of_the_knob_that_matters() -> None:
    # pairs 0-2 measured at every graph setting: the pair moves the target by 0.5-1, graphs not at all
    rows = [row(4, g, p, 0) for p in range(3) for g in range(4)]
    y = np.asarray([[0.0, 1.0, -0.5][GRID[i][2]] for i in rows])
    test = FEATURES.take([row(4, 1, 3, 0), row(4, 2, 0, 0)])  # pair 3 never measured; pair 0 is known
    for average in (False, True):
        post = fit_predict(FEATURES.take(rows), y, test, BLOCKS, average=average)
        assert post.sd[0] > 3 * post.sd[1]


def test_a_known_benchmark_noise_is_not_read_as_knob_effects() -> None:
    # one configuration per fraction, each measured twice 5% apart: the fraction does nothing
    rows = [row(f, 0, 0, 0) for f in range(0, 9, 2) for _ in range(2)]
    y = np.asarray([0.025 * (-1) ** i for i in range(len(rows))])
    post = fit_predict(FEATURES.take(rows), y, FEATURES.take(rows), BLOCKS, scale=0.15,
                       noise_sd=(0.008, 0.015, 0.025, 0.04, 0.07))  # fmt: skip
    assert post.noise * 0.15**2 >= 0.015**2  # the pairs' spread is noise, not interpolated
    assert np.max(np.abs(post.mean)) < 0.02  # every fraction predicted alike


def test_with_the_option_slo_margins_are_log_ratios_to_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    assert relative_margin("tpot_p50_ms<=40", 10.0) == 10.0  # off by default: as measured
    monkeypatch.setattr(sampler, "RELATIVE_MARGINS", True)
    assert relative_margin("tpot_p50_ms<=40", 10.0) == pytest.approx(math.log(50 / 40))
    assert relative_margin("tpot_p50_ms<=40", -20.0) == pytest.approx(math.log(20 / 40))
    assert relative_margin("min_free_vram_mib>=1000", 500.0) == pytest.approx(math.log(1000 / 500))
    assert relative_margin("min_free_vram_mib>=1000", -1000.0) == pytest.approx(math.log(1000 / 2000))
    assert relative_margin("slo_attainment>=0", 0.5) == 0.5  # no ratio to a bound of 0: as measured
    assert relative_margin("not an slo", 3.0) == 3.0


def test_a_pending_launch_shrinks_the_uncertainty_near_it_and_keeps_the_mean() -> None:
    rows = [row(2, 0, 0, 0), row(6, 1, 1, 1), row(4, 2, 2, 0)]
    y = np.asarray([truth(*GRID[i]) for i in rows])
    plain = fit_predict(FEATURES.take(rows), y, FEATURES, BLOCKS, ard=False)
    waiting = FEATURES.take([row(8, 3, 3, 1)])
    cond = fit_predict(FEATURES.take(rows), y, FEATURES, BLOCKS, ard=False, pending=waiting)
    assert np.allclose(plain.mean, cond.mean)
    assert cond.sd[row(8, 3, 3, 1)] < 0.5 * plain.sd[row(8, 3, 3, 1)]
    assert cond.sd[row(7, 3, 3, 1)] < plain.sd[row(7, 3, 3, 1)]


def test_the_posterior_covariance_with_anchors_is_the_variance_on_its_diagonal() -> None:
    rows = [row(2, 0, 0, 0), row(6, 1, 1, 1), row(4, 2, 2, 0), row(3, 3, 0, 1)]
    y = np.asarray([truth(*GRID[i]) for i in rows])
    probe = [row(5, 1, 1, 1), row(0, 0, 3, 0), row(8, 3, 2, 1)]
    for waiting in (None, FEATURES.take([row(7, 2, 1, 0)])):
        post = fit_predict(
            FEATURES.take(rows), y, FEATURES.take(probe), BLOCKS, ard=False, pending=waiting,
            anchors=FEATURES.take(probe),
        )  # fmt: skip
        assert post.anchor_cov is not None
        assert np.allclose(np.diag(post.anchor_cov), post.sd**2, rtol=1e-6)
        assert np.allclose(post.anchor_cov, post.anchor_cov.T, atol=1e-9)
    # a point next to a launch moves with it: its covariance with a far point is smaller than its variance
    post = fit_predict(
        FEATURES.take(rows), y, FEATURES.take(probe), BLOCKS, ard=False, anchors=FEATURES.take(probe)
    )
    assert post.anchor_cov is not None and abs(post.anchor_cov[0, 1]) < post.sd[0] * post.sd[1]


def test_a_twin_tied_to_the_incumbent_gains_less_than_an_unseen_configuration_of_the_same_mean() -> None:
    best = 1000.0
    mu = np.full(2, math.log(best))
    sd = np.asarray([0.1, 0.1])
    # the twin's difference to the incumbent is nearly certain; the unseen one's is not
    got = log_scores(mu, sd, np.zeros(2), best=best, second=None, front=[], sd_gain=np.asarray([0.01, 0.14]))
    plain = log_scores(mu, sd, np.zeros(2), best=best, second=None, front=[])
    assert plain[0] == pytest.approx(plain[1])
    assert got[0] < got[1] and np.all(np.isfinite(got))


def test_a_twin_of_the_incumbent_differs_from_it_by_less_than_its_own_spread_and_a_stranger_by_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(strategy, "CORRELATED", True)
    # noisy launches; the fraction does not matter, so the incumbent's fraction twins move with it
    rng = np.random.default_rng(3)
    rows = [row(4, 1, p, 0) for p in range(4)] + [row(f, 1, 1, 0) for f in (0, 2, 6, 8)]
    rows += [row(4, 2, 1, 0), row(4, 1, 1, 1), row(4, 3, 0, 1), row(2, 2, 2, 1)]
    flat = lambda f, g, p, k: [0.0, 0.25, -0.1, 0.1][p] + 0.02 * g + 0.01 * k  # noqa: E731
    seen = [Seen(index=i, log_first=flat(*GRID[i]) + 0.03 * rng.standard_normal(), second=None, feasible=True)
            for i in rows]  # fmt: skip
    open_rows = [i for i in range(len(GRID)) if i not in rows]
    mu, sd, _, incumbent, sd_gain, _, _ = _posterior(FEATURES, BLOCKS, seen, FEATURES.take(open_rows), None)
    assert incumbent is not None and sd_gain is not None
    centre = GRID[incumbent]
    twin = open_rows.index(row(centre[0] - 1, *centre[1:]))
    stranger = open_rows.index(row(8, 3, 2, 0))
    assert sd_gain[twin] < 0.75 * sd[twin]
    assert sd_gain[stranger] > sd[stranger]


def test_seeds_diversify_the_first_choices_and_one_seed_gives_one_choice() -> None:
    allowed = [True] * len(GRID)
    picks = [choose(FEATURES, BLOCKS, [], allowed, second=None, seed=s) for s in range(10)]
    assert len(set(picks)) >= 4
    assert picks == [choose(FEATURES, BLOCKS, [], allowed, second=None, seed=s) for s in range(10)]


def test_late_in_the_budget_the_choice_exploits() -> None:
    rng = random.Random(5)
    rows = rng.sample(range(len(GRID)), 12)
    seen = [Seen(index=i, log_first=truth(*GRID[i]), second=None, feasible=True) for i in rows]
    allowed = [i not in rows for i in range(len(GRID))]
    y = np.asarray([truth(*GRID[i]) for i in rows])
    post = fit_predict(FEATURES.take(rows), y, FEATURES, BLOCKS, scale=max(float(np.std(y)), 0.15))
    early = [
        choose(FEATURES, BLOCKS, seen, allowed, second=None, seed=s, left=30, budget=32) for s in range(8)
    ]
    late = [choose(FEATURES, BLOCKS, seen, allowed, second=None, seed=s, left=1, budget=32) for s in range(8)]
    mean_of = lambda picks: float(np.mean([post.mean[p] for p in picks if p is not None]))  # noqa: E731
    sd_of = lambda picks: float(np.mean([post.sd[p] for p in picks if p is not None]))  # noqa: E731
    assert mean_of(late) >= mean_of(early) and sd_of(late) <= sd_of(early)


@pytest.mark.parametrize(
    ("names", "directions", "values", "first", "second"),
    [
        (["output_throughput", "kv_tokens"], ["maximize", "maximize"], [1200.0, 5e5], 1200.0, 5e5),
        (["output_throughput", "ttft_p99_ms"], ["maximize", "minimize"], [1200.0, 400.0], 1200.0, 1 / 400),
        (["ttft_p99_ms", "output_throughput"], ["minimize", "maximize"], [400.0, 1200.0], 1 / 400, 1200.0),
        (
            ["tpot_p50_ms", "output_throughput_per_gpu"],
            ["minimize", "maximize"],
            [12.0, 300.0],
            1 / 12,
            300.0,
        ),
        (
            ["output_throughput_per_user", "e2e_p99_ms"],
            ["maximize", "minimize"],
            [40.0, 9000.0],
            40.0,
            1 / 9000,
        ),
    ],
)
def test_the_sampler_reads_the_objectives_the_study_declares(
    names: list[str], directions: list[str], values: list[float], first: float, second: float
) -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(directions=directions)
    study.set_metric_names(names)
    trial = study.ask()
    trial.set_user_attr("feasible", True)
    trial.set_user_attr("outcome", "ok")
    trial.set_user_attr("c_slo:ttft_p99_ms<=2000", -500.0)
    study.tell(trial, values)
    got = _seen(study.get_trials()[0], 0, study.directions)
    assert got is not None and got.log_first == pytest.approx(math.log(first))
    assert got.second == pytest.approx(second) and got.margins == (-500.0,)
    assert got.failed is None


def test_failures_are_attributed_to_the_mechanism_their_log_names() -> None:
    assert mechanism_of("oom") is Mechanism.MEMORY
    # a capture that failed other than by memory (the classifier calls that oom) is the kernels' refusal
    assert mechanism_of("capture_failed") is Mechanism.NUMERICS
    assert mechanism_of("not_enough_memory") is Mechanism.KV_POOL  # the opposite end of the fraction
    assert (
        mechanism_of("nan") is mechanism_of("garbage") is mechanism_of("wrong_answer") is Mechanism.NUMERICS
    )
    assert mechanism_of("unsupported") is Mechanism.SUPPORT
    assert (
        mechanism_of("hang") is Mechanism.OTHER
        and mechanism_of("ok") is mechanism_of("slo_violation") is None
    )


def test_a_capture_that_failed_other_than_by_memory_says_nothing_of_what_its_graphs_need() -> None:
    oom = Outcome(index=row(8, 3, 0, 0), failed=Mechanism.MEMORY)  # the largest graphs at the top fraction
    at = row(7, 3, 1, 0)  # one step below it, another pair
    nan = [oom, Outcome(index=at, failed=Mechanism.NUMERICS)]  # wrong numbers: found after load and capture
    refused = [oom, Outcome(index=at, failed=Mechanism.NUMERICS, captured=False)]  # a kernel refused capture
    p_nan, p_refused = (np.exp(log_p_feasible(FEATURES, BLOCKS, s, FEATURES)) for s in (nan, refused))
    probe = row(7, 3, 2, 0)  # the same sizes with a third pair: the memory model speaks of it
    assert p_nan[probe] > 1.3 * p_refused[probe]  # the NaN's graphs were captured: they fit there
    # the refused capture still proves the weights loaded and the pool was sized
    assert feasible.passed(Mechanism.KV_POOL, Mechanism.NUMERICS, captured=False) is True
    assert feasible.passed(Mechanism.MEMORY, Mechanism.NUMERICS, captured=False) is None
    assert feasible.passed(Mechanism.SUPPORT, Mechanism.NUMERICS, captured=False) is True  # its kernels ran
    trial = optuna.trial.create_trial(
        params={}, distributions={}, values=None, state=optuna.trial.TrialState.FAIL,
        user_attrs={"failure": "capture_failed", "feasible": False},
    )  # fmt: skip
    seen = _seen(trial, 0, [optuna.study.StudyDirection.MAXIMIZE])
    assert seen is not None and seen.failed is Mechanism.NUMERICS and not seen.captured


def test_numerical_failures_of_two_pairs_sharing_a_prefill_backend_are_blamed_on_that_role() -> None:
    # backends 0..3; a pair is (prefill, decode, pair level): NaN whenever backend 1 prefills
    pairs = [(p, d) for p in range(4) for d in range(4)]
    blocks = (
        Block(name="mem-fraction-static", cat=(), num=(0,), role="fraction"),
        Block(name="sparse_backends", cat=(0, 1, 2), num=(), role="backends"),
    )
    feats = Features(
        cat=np.asarray([(p, d, 4 * p + d) for p, d in pairs for _ in range(3)], dtype=np.int64),
        num=np.asarray([(f / 2,) for _ in pairs for f in range(3)], dtype=np.float64),
    )
    at = {(p, d): 3 * pairs.index((p, d)) + 1 for p, d in pairs}  # the middle fraction
    seen = [
        Outcome(index=at[(0, 0)], failed=None),
        Outcome(index=at[(1, 2)], failed=Mechanism.NUMERICS),
        Outcome(index=at[(1, 3)], failed=Mechanism.NUMERICS),
    ]
    p = np.exp(log_p_feasible(feats, blocks, seen, feats))
    assert p[at[(2, 2)]] > p[at[(1, 0)]]  # decode 2 was in a failing pair, but prefill 1 was in both
    assert p[at[(3, 3)]] > p[at[(1, 1)]]


def _fraction_graphs_chunk() -> tuple[tuple[Block, ...], Features, list[tuple[int, int, int]]]:
    """fraction (9) x graphs (off + 3 sizes) x chunk (3 sizes)"""
    blocks = (
        Block(name="mem-fraction-static", cat=(), num=(0,), role="fraction"),
        Block(name="cuda_graph", cat=(0, 1), num=(1,), role="graphs"),
        Block(name="chunked-prefill-size", cat=(2,), num=(2,), role="chunk"),
    )
    grid = [(f, g, c) for f in range(9) for g in range(4) for c in range(3)]
    feats = Features(
        cat=np.asarray([(g, int(g > 0), c) for _, g, c in grid], dtype=np.int64),
        num=np.asarray([(f / 8, 0.0 if g == 0 else 0.25 + 0.25 * g, c / 2) for f, g, c in grid]),
    )
    return blocks, feats, grid


@pytest.fixture
def monotone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(feasible, "MONOTONE", True)


def test_too_small_a_kv_pool_says_nothing_about_graphs_or_the_chunk() -> None:
    blocks, feats, grid = _fraction_graphs_chunk()
    at = grid.index
    ran = [Outcome(index=at((6, 1, 0)), failed=None)]
    small = [
        *ran,
        Outcome(index=at((2, 3, 2)), failed=Mechanism.KV_POOL),
    ]  # not enough memory for the KV cache
    before = np.exp(log_p_feasible(feats, blocks, ran, feats))
    after = np.exp(log_p_feasible(feats, blocks, small, feats))
    drop = after / before
    assert drop[at((2, 3, 2))] == pytest.approx(drop[at((2, 0, 0))], rel=1e-6)  # same fraction, any graphs
    assert drop[at((2, 0, 0))] < 0.7 * drop[at((7, 0, 0))]  # the fraction carries it


def test_an_oom_proves_failure_for_every_point_needing_more_memory_and_a_pass_for_less(
    monotone: None,
) -> None:
    blocks, feats, grid = _fraction_graphs_chunk()
    at = grid.index
    seen = [
        Outcome(index=at((3, 1, 0)), failed=None),
        Outcome(index=at((5, 2, 1)), failed=Mechanism.MEMORY),  # OOM at fraction 5, graphs 2, chunk 1
    ]
    p = np.exp(log_p_feasible(feats, blocks, seen, feats))
    # more memory along the fraction and the chunk, however far: as doomed as the failure
    for more in ((8, 2, 2), (5, 2, 2), (8, 2, 1), (7, 2, 1)):
        assert p[at(more)] <= 0.05 < p[at((3, 1, 0))], more
    # monotone: along the fraction and the chunk, P(pass) never rises with the demand (from fraction 3
    # up, where the pass proves the KV pool large enough)
    for f, g, c in grid:
        for more in ((f + 1, g, c), (f, g, c + 1)):
            if more in grid and f >= 3:
                assert p[at(more)] <= p[at((f, g, c))] + 1e-9, ((f, g, c), more)
    # a larger captured batch is not more memory under load (eager decode beyond the graphs' largest
    # batch keeps activations that a larger graph keeps in its own pool); graphs off neither
    assert p[at((5, 3, 1))] > 0.1 and p[at((6, 0, 1))] > 0.3
    # a pass proves every point needing less of every memory knob
    good = [Outcome(index=at((6, 3, 2)), failed=None), Outcome(index=at((8, 3, 2)), failed=Mechanism.MEMORY)]
    q = np.exp(log_p_feasible(feats, blocks, good, feats))
    assert q[at((6, 3, 0))] > 0.95 and q[at((6, 3, 1))] > 0.95


def test_with_the_graph_axis_on_a_larger_captured_batch_is_more_memory(
    monotone: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tuner.search import monotone as mono

    monkeypatch.setattr(mono, "GRAPHS_ORDERED", True)
    blocks, feats, grid = _fraction_graphs_chunk()
    at = grid.index
    seen = [Outcome(index=at((3, 1, 0)), failed=None), Outcome(index=at((5, 2, 1)), failed=Mechanism.MEMORY)]
    p = np.exp(log_p_feasible(feats, blocks, seen, feats))
    assert max(p[at((5, 3, 1))], p[at((7, 3, 2))]) <= 0.05 < p[at((3, 1, 0))]


def test_not_enough_memory_at_a_fraction_proves_it_for_every_smaller_fraction_not_for_a_larger(
    monotone: None,
) -> None:
    blocks, feats, grid = _fraction_graphs_chunk()
    at = grid.index
    seen = [
        Outcome(index=at((5, 1, 0)), failed=None),
        Outcome(index=at((3, 2, 2)), failed=Mechanism.KV_POOL),
    ]
    p = np.exp(log_p_feasible(feats, blocks, seen, feats))
    assert max(p[at((f, g, c))] for f in range(4) for g in range(4) for c in range(3)) <= 0.05
    assert min(p[at((f, 1, 0))] for f in range(5, 8)) > 0.5  # the KV pool grows with the fraction


def _pairs_graphs_kv() -> tuple[tuple[Block, ...], Features, list[tuple[int, int, int, int]], list[Outcome]]:
    """Backends 0..3 as pairs (prefill, decode, pair level) x graphs (off, two sizes) x KV dtype (2);
    one launch measured, and pair 1/2 with KV dtype 0 giving NaN."""
    blocks = (
        Block(name="mem-fraction-static", cat=(), num=(0,), role="fraction"),
        Block(name="cuda_graph", cat=(0, 1), num=(1,), role="graphs"),
        Block(name="sparse_backends", cat=(2, 3, 4), num=(), role="backends"),
        Block(name="kv-cache-dtype", cat=(5,), num=(), role="kv_dtype"),
    )
    grid = [(g, p, d, k) for g in range(3) for p in range(4) for d in range(4) for k in range(2)]
    feats = Features(
        cat=np.asarray([(g, int(g > 0), p, d, 4 * p + d, k) for g, p, d, k in grid], dtype=np.int64),
        num=np.asarray([(0.5, 0.0 if g == 0 else 0.5 * g) for g, _, _, _ in grid]),
    )
    seen = [
        Outcome(index=grid.index((1, 0, 0, 0)), failed=None),
        Outcome(index=grid.index((1, 1, 2, 0)), failed=Mechanism.NUMERICS),
    ]
    return blocks, feats, grid, seen


def test_a_nan_of_one_pair_and_kv_dtype_is_not_spread_over_another_pair_sharing_its_decode_backend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(feasible, "NUMERICS_BY_KV", True)
    blocks, feats, grid, seen = _pairs_graphs_kv()
    at = grid.index
    p = np.exp(log_p_feasible(feats, blocks, seen, feats))
    # the winner 3/2 with the other dtype shares only the decode backend: as likely as an unrelated pair
    assert p[at((1, 3, 2, 1))] == pytest.approx(p[at((1, 3, 3, 1))], rel=0.02)
    # with the failing dtype the shared decode backend stays a suspect, and the pair itself most
    assert p[at((1, 1, 2, 0))] < p[at((1, 3, 2, 0))] < p[at((1, 3, 3, 0))]


def test_averaged_the_chance_of_right_numbers_lies_between_the_plain_and_the_by_dtype_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    blocks, feats, grid, seen = _pairs_graphs_kv()
    mixed = np.exp(log_p_feasible(feats, blocks, seen, feats))  # the default
    monkeypatch.setattr(feasible, "NUMERICS_AVERAGE", False)
    plain = np.exp(log_p_feasible(feats, blocks, seen, feats))
    monkeypatch.setattr(feasible, "NUMERICS_BY_KV", True)
    by_dtype = np.exp(log_p_feasible(feats, blocks, seen, feats))
    assert np.all(mixed >= np.minimum(plain, by_dtype) * (1 - 1e-9))
    assert np.all(mixed <= np.maximum(plain, by_dtype) * (1 + 1e-9))
    # the failing pair with the other dtype: "the pair fails" and "the pair fails with that dtype"
    # disagree, and the average is neither
    other = grid.index((1, 1, 2, 1))
    low, high = sorted((plain[other], by_dtype[other]))
    assert high > 1.2 * low
    assert low * 1.02 < mixed[other] < high / 1.02


def test_as_a_kernel_fault_a_nan_in_graphs_is_not_spread_over_other_decode_backends_in_those_graphs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(feasible, "KERNEL_FAULTS", True)
    blocks = (
        Block(name="mem-fraction-static", cat=(), num=(0,), role="fraction"),
        Block(name="cuda_graph", cat=(0, 1), num=(1,), role="graphs"),
        Block(name="sparse_backends", cat=(2, 3, 4), num=(), role="backends"),
    )
    grid = [(g, p, d) for g in range(3) for p in range(3) for d in range(3)]
    feats = Features(
        cat=np.asarray([(g, int(g > 0), p, d, 3 * p + d) for g, p, d in grid], dtype=np.int64),
        num=np.asarray([(0.5, 0.0 if g == 0 else 0.5 * g) for g, _, _ in grid]),
    )
    at = grid.index
    seen = [
        Outcome(index=at((0, 0, 1)), failed=None),  # pair 0/1 runs eager
        Outcome(index=at((0, 0, 2)), failed=None),  # pair 0/2 runs eager
        Outcome(index=at((2, 0, 1)), failed=Mechanism.NUMERICS),  # pair 0/1 gives NaN in the largest graphs
    ]
    # what the NaN changes, per candidate (the memory prior also falls with the graph size)
    p = np.exp(log_p_feasible(feats, blocks, seen, feats) - log_p_feasible(feats, blocks, seen[:2], feats))
    # another decode backend in the same graphs, behind the same prefill backend: no less likely than in
    # smaller graphs (graphs replay decode steps; the prefill backend runs eager)
    assert p[at((2, 0, 2))] == pytest.approx(p[at((1, 0, 2))], rel=0.02)
    # the failing decode backend in those graphs stays the suspect
    assert p[at((2, 1, 1))] < p[at((2, 1, 2))]
    monkeypatch.setattr(feasible, "KERNEL_FAULTS", False)
    q = np.exp(log_p_feasible(feats, blocks, seen, feats) - log_p_feasible(feats, blocks, seen[:2], feats))
    assert q[at((2, 0, 2))] < 0.9 * q[at((1, 0, 2))]  # the plain model spreads the NaN over the graph size


def test_twins_of_a_measured_launch_are_repeats_not_exploration() -> None:
    # only the backend pair matters; pair 1 is the best, measured once
    rng = np.random.default_rng(5)
    rows = [row(4, 2, 1, 0), row(4, 0, 0, 0), row(4, 1, 2, 1), row(3, 3, 3, 0), row(6, 2, 0, 1)]
    seen = [Seen(index=i, log_first=[0.0, 0.25, -0.1, 0.1][GRID[i][2]] + 0.02 * rng.standard_normal(),
                 second=None, feasible=True) for i in rows]  # fmt: skip
    allowed = [i not in rows for i in range(len(GRID))]
    twins = np.full(len(GRID), -1, dtype=np.int64)
    twins[[i for i, (_, _, p, _) in enumerate(GRID) if p == 1 and allowed[i]]] = row(4, 2, 1, 0)
    kw = {"second": None, "left": 4, "budget": 16}
    plain = [choose(FEATURES, BLOCKS, seen, allowed, seed=s, **kw) for s in range(16)]
    known = [choose(FEATURES, BLOCKS, seen, allowed, seed=s, twins=twins, **kw) for s in range(16)]
    assert sum(i is not None and twins[i] >= 0 for i in plain) >= 12  # near the incumbent, each looks a gain
    # told they would run the incumbent's schedule again, the search measures something it has not
    assert all(i is not None and twins[i] < 0 for i in known)
