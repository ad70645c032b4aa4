"""The structured search's pure core: candidates, the knob-kernel surrogate, the acquisition, the choice."""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import optuna
import pytest

from tuner.config import Outcome
from tuner.search import candidates as candidates_module
from tuner.search.acquire import ehvi, expected_excess, hypervolume, norm_cdf, scores
from tuner.search.candidates import Block, candidates, params_key
from tuner.search.evidence import Evidence, knobs_of
from tuner.search.policy import Policy, build_policy
from tuner.search.sampler import OUTLOOK_ATTR, StructuredSampler, _kv_cover
from tuner.search.strategy import (
    Seen,
    _neighbours,
    _posterior,
    _with_column,
    choose,
    kernel_paths,
    seeded_draw,
)
from tuner.search.surrogate import Features, combine, fit_predict, knob_kernels
from tuner.space.loader import SearchSpace, load_space, suggest
from tuner.space.sampling import joined_params, sampler_params
from tuner.study.finalist_jobs import latest_outlook

ROOT = Path(__file__).resolve().parents[2]

# a toy space of three knobs: 4 x 3 x 5 levels, log throughput additive plus one interaction
BLOCKS = (
    Block(name="a", cat=(0,), num=()),
    Block(name="b", cat=(1,), num=()),
    Block(name="f", cat=(), num=(0,)),
)
GRID = [(a, b, f) for a in range(4) for b in range(3) for f in range(5)]
FEATURES = Features(
    cat=np.asarray([(a, b) for a, b, _ in GRID], dtype=np.int64),
    num=np.asarray([(f / 4,) for _, _, f in GRID], dtype=np.float64),
)


def truth(a: int, b: int, f: int) -> float:
    return (
        [0.0, 0.3, -0.2, 0.1][a]
        + [0.0, 0.2, -0.1][b]
        - 0.5 * (f / 4 - 0.6) ** 2
        + (0.15 if (a, b) == (1, 1) else 0)
    )


def test_every_knob_kernel_is_one_on_the_diagonal_and_the_full_kernel_has_unit_prior_variance() -> None:
    kernels = knob_kernels(FEATURES, FEATURES, BLOCKS)
    assert len(kernels) == 3
    for k in kernels:
        assert np.allclose(np.diag(k), 1.0) and (k >= 0).all() and (k <= 1 + 1e-12).all()
    full = combine(kernels, 0.3)
    assert np.allclose(np.diag(full), 1.0)
    assert np.all(np.linalg.eigvalsh(full) > -1e-9)  # a valid covariance


def test_the_surrogate_learns_additive_effects_from_few_launches() -> None:
    rng = random.Random(3)
    rows = rng.sample(range(len(GRID)), 14)
    y = np.asarray([truth(*GRID[i]) for i in rows])
    post = fit_predict(FEATURES.take(rows), y, FEATURES, BLOCKS)
    true = np.asarray([truth(*g) for g in GRID])
    assert np.corrcoef(post.mean, true)[0, 1] > 0.9
    assert true[int(np.argmax(post.mean))] >= np.sort(true)[-4]  # its favourite is among the true top 4
    seen_sd = post.sd[rows].mean()
    unseen_sd = np.delete(post.sd, rows).mean()
    assert seen_sd < unseen_sd


def test_expected_excess_matches_a_monte_carlo_estimate() -> None:
    rng = np.random.default_rng(0)
    mu, sd, t = np.asarray([0.1, -0.5]), np.asarray([0.3, 0.05]), 1.2
    draws = np.exp(mu[:, None] + sd[:, None] * rng.standard_normal((2, 200_000)))
    mc = np.maximum(draws - t, 0).mean(axis=1)
    assert np.allclose(expected_excess(mu, sd, t), mc, rtol=0.02, atol=1e-4)
    assert expected_excess(mu, sd, 0.0) == pytest.approx(np.exp(mu + sd**2 / 2))
    assert norm_cdf(np.asarray([0.0]))[0] == pytest.approx(0.5)


def test_ehvi_is_the_hypervolume_gain_when_certain_and_zero_for_a_dominated_point() -> None:
    front = [(100.0, 10.0), (50.0, 30.0)]
    assert hypervolume(front) == pytest.approx(100 * 10 + 50 * 20)
    tiny = np.asarray([1e-6, 1e-6, 1e-6])
    mu = np.log(np.asarray([120.0, 40.0, 80.0]))
    second = np.asarray([20.0, 20.0, 40.0])
    got = ehvi(mu, tiny, second, front)
    for i in range(3):
        point = (math.exp(mu[i]), second[i])
        assert got[i] == pytest.approx(hypervolume([*front, point]) - hypervolume(front), rel=1e-4, abs=1e-3)
    assert got[1] == pytest.approx(0.0, abs=1e-6)


def test_scores_prefer_likely_feasible_improvements() -> None:
    mu = np.log(np.asarray([110.0, 110.0, 90.0]))
    sd = np.full(3, 0.05)
    got = scores(mu, sd, np.asarray([0.9, 0.1, 0.9]), best=100.0, second=None, front=[])
    assert got[0] > got[1] and got[0] > got[2]


def test_with_nothing_feasible_yet_the_likeliest_to_run_comes_first(monkeypatch: pytest.MonkeyPatch) -> None:
    mu = np.log(np.asarray([110.0, 110.0, 90.0]))
    sd, p = np.asarray([0.1, 0.6, 0.2]), np.asarray([1.0, 0.5, 0.9])
    cold = scores(mu, sd, p, best=None, second=None, front=[])
    assert list(np.argsort(-cold)) == [0, 2, 1]  # feasibility first: P(feasible) alone orders them
    monkeypatch.setattr("tuner.search.acquire.SD_WEIGHT_UNFOUND", 1.0)  # a measured option (design.md)
    cold = scores(mu, sd, p, best=None, second=None, front=[])
    assert list(np.argsort(-cold)) == [1, 2, 0]  # most uncertain x likely feasible


def test_choose_never_picks_a_disallowed_candidate_and_is_deterministic_per_seed() -> None:
    seen = [Seen(index=i, log_first=truth(*GRID[i]), second=None, feasible=True) for i in (0, 17, 33)]
    allowed = [True] * len(GRID)
    for s in seen:
        allowed[s.index] = False
    picks = {choose(FEATURES, BLOCKS, seen, allowed, second=None, seed=s) for s in range(20)}
    assert picks and all(p is not None and allowed[p] for p in picks)
    assert choose(FEATURES, BLOCKS, seen, allowed, second=None, seed=5) == choose(
        FEATURES, BLOCKS, seen, allowed, second=None, seed=5
    )
    assert choose(FEATURES, BLOCKS, seen, [False] * len(GRID), second=None, seed=1) is None


def test_choose_steers_away_from_the_neighbours_of_unexplained_failures() -> None:
    # every launch with a == 2 failed: the feasibility surrogate makes a == 2 unlikely
    seen = [
        Seen(index=i, log_first=None, second=None, feasible=False) for i, g in enumerate(GRID) if g[0] == 2
    ][:4]
    seen += [Seen(index=i, log_first=truth(*GRID[i]), second=None, feasible=True) for i in (0, 20, 50)]
    allowed = [i not in {s.index for s in seen} for i in range(len(GRID))]
    picks = [choose(FEATURES, BLOCKS, seen, allowed, second=None, seed=s) for s in range(10)]
    assert sum(1 for p in picks if p is not None and GRID[p][0] == 2) <= 1


def test_the_candidates_of_a_shipped_space_are_its_points_with_pairs_only_from_its_choices() -> None:
    space = load_space(ROOT / "search_spaces" / "dsv32-fp8-h200-sim.yaml")
    found = candidates(space)
    assert len(found.params) == 18 * 4 * 7  # fraction 0.78..0.95 step 0.01, 4 graph choices, 7 pairs
    pairs = {p["sparse_backends"] for p in found.params}
    assert pairs == set(next(p for p in space.params if p.name == "sparse_backends").choices)
    assert len(set(found.keys)) == len(found.keys)
    assert params_key(found.params[0]) == found.keys[0]
    assert len(found.cat[0]) == 5 and len(found.num[0]) == 2  # pair: 3 columns, graphs: 2 + batch size


def test_with_the_options_graphs_are_featured_by_the_running_batch_they_cover_as_a_share_and_a_level(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(candidates_module, "COVERAGE", True)
    monkeypatch.setattr(candidates_module, "COVERS", True)
    space = load_space(ROOT / "search_spaces" / "dsv32-fp8-h200-sim.yaml")
    found = candidates(space)
    batch = max(lp.concurrency or 0 for lp in space.bench.load_points)
    assert batch > 0
    column = next(b for b in found.blocks if b.role == "graphs").cat[-1]
    levels: set[int] = set()
    for params, cat, num in zip(found.params, found.cat, found.num, strict=True):
        graphs, cover, level = str(params["cuda_graph"]), num[2], cat[column]
        levels.add(level)
        if graphs == "off":
            assert cover == 0.0 and level == 0
        elif graphs.startswith("max:"):
            assert cover == pytest.approx(min(1.0, int(graphs[4:]) / batch))
            assert level == int(int(graphs[4:]) >= batch), graphs
    assert levels == {0, 1}  # the space has lists on both sides of the batch


def test_the_running_cap_bounds_the_batch_the_graphs_must_cover(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(candidates_module, "COVERAGE", True)
    text = (ROOT / "search_spaces" / "dsv32-fp8-h200-sim.yaml").read_text()
    capped = text.replace(
        "  - name: sparse_backends\n",
        "  - name: max-running-requests\n    kind: categorical\n    choices: [32, 128]\n"
        "  - name: sparse_backends\n",
    )
    baseline = "sparse_backends: flashmla_kv/flashmla_kv}"
    capped = capped.replace(baseline, baseline[:-1] + ", max-running-requests: 128}")
    assert capped != text
    (tmp_path / "space.yaml").write_text(capped)
    space = load_space(tmp_path / "space.yaml")
    found = candidates(space)
    cover = {
        (str(p["cuda_graph"]), p["max-running-requests"]): n[2]
        for p, n in zip(found.params, found.num, strict=True)
    }
    assert cover[("max:64", 128)] == pytest.approx(0.5)  # 128 clients, 128 running: half the batch
    assert cover[("max:64", 32)] == 1.0  # at most 32 running: graphs of 64 cover every batch
    assert cover[("off", 32)] == 0.0


def _ask(study: optuna.Study, space: SearchSpace) -> dict[str, object]:
    trial = study.ask()
    _, params = suggest(space, trial)
    return joined_params(space, params)


def test_the_sampler_answers_whole_allowed_configurations_and_never_one_already_running() -> None:
    space = load_space(ROOT / "search_spaces" / "dsv32-fp8-h200-sim.yaml")
    choices = set(next(p for p in space.params if p.name == "sparse_backends").choices)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    picks = []
    for _ in range(2):
        study = optuna.create_study(directions=["maximize", "maximize"])
        study.sampler = StructuredSampler(space, seed=3)
        first, second = _ask(study, space), _ask(study, space)  # both still running: two workers at once
        assert first != second
        assert {first["sparse_backends"], second["sparse_backends"]} <= choices
        picks.append((first, second))
    assert picks[0] == picks[1]  # deterministic per seed


def test_the_sampler_moves_towards_what_measured_well() -> None:
    space = load_space(ROOT / "search_spaces" / "dsv32-fp8-h200-sim.yaml")
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(directions=["maximize", "maximize"])
    study.sampler = StructuredSampler(space, seed=1)
    good = "flashmla_kv/flashmla_kv"
    tried = [(0.8, good), (0.86, "fa3/fa3"), (0.9, "tilelang/tilelang"), (0.84, good)]
    tried.append((0.82, "fa3/flashmla_kv"))
    for fraction, pair in tried:
        params = {"mem-fraction-static": fraction, "cuda_graph": "off", "sparse_backends": pair}
        study.enqueue_trial(sampler_params(space, params))
        trial = study.ask()
        suggest(space, trial)
        trial.set_user_attr("feasible", True)
        study.tell(trial, [1000.0 if pair == good else 400.0, 1e5])
    later = [_ask(study, space) for _ in range(3)]
    assert sum(1 for p in later if p["sparse_backends"] == good) >= 2
    for p in later:  # never a launch already made
        assert (p["mem-fraction-static"], p["sparse_backends"]) not in tried or p["cuda_graph"] != "off"


def test_each_ask_after_a_measured_launch_records_what_exploring_is_worth() -> None:
    space = load_space(ROOT / "search_spaces" / "dsv32-fp8-h200-sim.yaml")
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(directions=["maximize", "maximize"])
    study.sampler = StructuredSampler(space, seed=1)
    _ask(study, space)
    assert latest_outlook(study) is None  # nothing measured: no incumbent to improve on
    for fraction, pair, value in ((0.8, "fa3/fa3", 900.0), (0.86, "tilelang/tilelang", 700.0)):
        study.enqueue_trial(sampler_params(space, {"mem-fraction-static": fraction, "cuda_graph": "off",
                                                   "sparse_backends": pair}))  # fmt: skip
        trial = study.ask()
        suggest(space, trial)
        trial.set_user_attr("feasible", True)
        study.tell(trial, [value, 1e5])
    _ask(study, space)
    outlook = latest_outlook(study)
    assert outlook is not None and 0 < outlook.gain < 10 and 0 < outlook.noise < 1
    assert study.get_trials()[-1].system_attrs[OUTLOOK_ATTR]["gain"] == outlook.gain


def test_a_trial_asked_while_an_earlier_one_is_still_choosing_takes_another_candidate() -> None:
    space = load_space(ROOT / "search_spaces" / "dsv32-fp8-h200-sim.yaml")
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(directions=["maximize", "maximize"])
    sampler = StructuredSampler(space, seed=4)
    study.sampler = sampler
    for fraction, pair, value in ((0.8, "fa3/fa3", 900.0), (0.9, "flashmla_kv/flashmla_kv", 1200.0)):
        study.enqueue_trial(sampler_params(space, {"mem-fraction-static": fraction, "cuda_graph": "off",
                                                   "sparse_backends": pair}))  # fmt: skip
        trial = study.ask()
        suggest(space, trial)
        trial.set_user_attr("feasible", True)
        study.tell(trial, [value, 1e5])
    study.ask(), study.ask()  # two workers asked; neither has written a param yet
    early, late = study.get_trials(deepcopy=False)[-2:]
    plan_late = sampler._plan(study, late)  # noqa: SLF001 - both choose before either writes its params
    plan_early = sampler._plan(study, early)  # noqa: SLF001
    assert plan_early and plan_late and plan_early != plan_late


def test_a_capacity_column_lets_the_model_see_a_cliff_the_knobs_place_apart() -> None:
    """KV_COVER's column: throughput that follows the KV pool's share of the batch (which moves with
    the fraction at a place set by another knob) is predicted closer with the column than without."""
    cover = np.asarray([min(1.0, (0.4 + f / 4) * (1.6 if b == 0 else 1.0)) for _, b, f in GRID])
    y = np.log(cover) + np.asarray([[0.0, 0.1, -0.1, 0.05][a] for a, _, _ in GRID])
    rows = random.Random(5).sample(range(len(GRID)), 16)
    seen = [Seen(index=i, log_first=float(y[i]), second=None, feasible=True) for i in rows]
    every = list(range(len(GRID)))
    plain, *_ = _posterior(FEATURES, BLOCKS, seen, FEATURES, None)
    features, blocks, test, waiting = _with_column(FEATURES, BLOCKS, cover, every, [])
    assert len(blocks) == len(BLOCKS) + 1 and features.num.shape[1] == FEATURES.num.shape[1] + 1
    assert waiting is None and np.array_equal(test.num[:, -1], cover)
    wider, *_ = _posterior(features, blocks, seen, test, None)
    assert np.sqrt(np.mean((wider - y) ** 2)) < 0.7 * np.sqrt(np.mean((plain - y) ** 2))


def test_the_capacity_is_unknown_until_a_launch_places_its_memory_line() -> None:
    space = load_space(ROOT / "search_spaces" / "dsv32-fp8-h200-sim.yaml")
    found = candidates(space)

    def cover(policy: Policy) -> np.ndarray | None:
        return _kv_cover(space, found, [policy.memory.predict(knobs_of(c)).kv_tokens for c in found.configs])

    assert (cover(build_policy([])) == -1.0).all()
    configs = [c for c in found.configs if c.mem_fraction_static is not None][:1]
    same = [c for c in found.configs if knobs_of(c).graph_key == knobs_of(configs[0]).graph_key
            and knobs_of(c).others == knobs_of(configs[0]).others
            and c.mem_fraction_static != configs[0].mem_fraction_static][:1]  # fmt: skip
    launched = [
        Evidence(trial=n, knobs=knobs_of(c), outcome=Outcome.OK, kv_tokens=kv, min_free_mib=9000)
        for n, (c, kv) in enumerate(zip([*configs, *same], (100_000, 140_000), strict=True))
    ]
    got = cover(build_policy(launched))
    assert got is not None
    batch = max(lp.concurrency or 0 for lp in space.bench.load_points)
    demand = batch * (space.bench.workload.input_len + space.bench.workload.output_len)
    first = found.configs.index(configs[0])
    assert got[first] == pytest.approx(min(1.0, 100_000 / demand))  # on the line through both launches
    known = got >= 0
    assert 0 < known.sum() < len(got) and (got[known] <= 1.0).all()  # other groups: not yet known


def test_the_incumbents_neighbours_differ_from_it_in_one_knob_at_most() -> None:
    blocks = (*BLOCKS, Block(name="a x b", cat=(0, 1), num=(), product=True))  # an interaction: not a knob
    centre = GRID.index((1, 1, 2))
    rows = np.arange(len(GRID))
    near = _neighbours(FEATURES, blocks, rows, centre)
    moved = [sum(x != y for x, y in zip(GRID[i], GRID[centre], strict=True)) for i in rows]
    assert [bool(v) for v in near] == [m <= 1 for m in moved]
    assert sum(near) == 1 + 3 + 2 + 4  # itself, and every other level of one knob


PATH_BLOCKS = (
    Block(name="fraction", cat=(), num=(0,), role="fraction"),
    Block(name="pair", cat=(0, 1), num=(), role="backends"),
    Block(name="graphs", cat=(2, 3), num=(1,), role="graphs"),
    Block(name="running", cat=(4,), num=(2,), role="running"),
)


def test_kernel_paths_join_size_twins_and_part_kernels() -> None:
    # (prefill, decode, graph list, its level, running cap level)
    cat = np.asarray([
        [0, 0, 1, 0, 0],  # the first path
        [0, 0, 1, 0, 1],  # another fraction and running cap: the same path
        [0, 1, 1, 0, 0],  # another decode backend
        [0, 0, 0, 0, 0],  # graphs off
    ], dtype=np.int64)  # fmt: skip
    num = np.asarray([[0.1, 0.5, 0.2], [0.9, 1.0, 0.8], [0.1, 0.5, 0.2], [0.5, 0, 0.2]])
    features = Features(cat=cat, num=num)
    paths = kernel_paths(features, PATH_BLOCKS, np.arange(4))
    assert paths[0] == paths[1] and len({paths[0], paths[2], paths[3]}) == 3
    sizes_only = PATH_BLOCKS[:1]
    assert list(kernel_paths(features, sizes_only, np.arange(4))) == [0, 0, 0, 0]  # one path


def test_the_seeded_draw_weighs_paths_not_their_twins() -> None:
    """A path with 40 equal twins at the top is drawn about as often as one with a single candidate
    of the same score (per candidate it would be drawn 40 times as often); within a path the best wins."""
    acq = np.concatenate([np.zeros(40), [0.0], [-0.05]])
    paths = np.asarray([0] * 40 + [1, 1], dtype=np.intp)
    picks = [seeded_draw(acq, paths, seed=s) for s in range(400)]
    single = sum(p == 40 for p in picks) / len(picks)
    assert 0.35 < single < 0.65 and 41 not in picks
    per_candidate = [seeded_draw(acq, np.arange(42, dtype=np.intp), seed=s) for s in range(400)]
    assert sum(p == 40 for p in per_candidate) / len(per_candidate) < 0.1


def test_trials_asked_together_take_one_draws_paths_in_turn() -> None:
    acq = np.asarray([0.0, -0.01, -0.3, -0.31, -2.0])
    paths = np.asarray([0, 0, 1, 1, 2], dtype=np.intp)
    firsts = [seeded_draw(acq, paths, seed=9, rank=k) for k in range(3)]
    assert sorted(int(paths[p]) for p in firsts) == [0, 1, 2]  # one candidate of each path
    assert all(acq[p] == acq[paths == paths[p]].max() for p in firsts)  # each its path's best
    for seed in range(20):  # paths spent: the others, never one taken already
        taken = [seeded_draw(acq, paths, seed=seed, rank=k) for k in range(5)]
        assert sorted(taken) == [0, 1, 2, 3, 4]
