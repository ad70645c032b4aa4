"""Generated landscapes (tuner.sim.generate): valid, deterministic per seed, with a true best."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tuner.sim import memory
from tuner.sim.generate import MAX_POINTS, TEST_SEEDS, TRAIN_SEEDS, Draw, draw, write
from tuner.sim.generate_families import family_of
from tuner.sim.generation_check import check, generate, main
from tuner.sim.landscape import best
from tuner.sim.oracle import Outcome
from tuner.sim.resolve import Launch
from tuner.sim.scenario import parse_scenario
from tuner.sim.spacefile import launch_from_argv, read_space


@pytest.mark.parametrize("seed", range(40))
def test_every_draw_passes_the_scenario_validation(seed: int) -> None:
    found = draw(seed)
    scenario = parse_scenario(found.scenario, f"seed {seed}")
    params = {p["name"]: p for p in found.space["params"]}
    assert {"mem-fraction-static", "cuda_graph", "sparse_backends"} <= set(params)
    frac = params["mem-fraction-static"]
    steps = (frac["high"] - frac["low"]) / frac["step"]
    assert abs(steps - round(steps)) < 1e-6  # the step divides the range (the space loader insists)
    assert 1.0 <= scenario.perf.noise_pct <= 5.0
    for pair in params["sparse_backends"]["choices"]:
        prefill, decode = pair.split("/")
        assert prefill in scenario.backends and decode in scenario.backends


def test_a_seed_always_draws_the_same_landscape_and_seeds_differ() -> None:
    assert draw(7) == draw(7)
    assert draw(7).scenario != draw(8).scenario
    assert draw(7, attempt=1).scenario != draw(7).scenario


def test_the_split_is_fixed_and_disjoint() -> None:
    assert not set(TRAIN_SEEDS) & set(TEST_SEEDS)
    assert len(TEST_SEEDS) >= 30


@pytest.mark.parametrize("seed", [TRAIN_SEEDS[2]])
def test_a_generated_landscape_has_failures_and_a_true_best_the_oracle_finds(
    seed: int, tmp_path: Path
) -> None:
    found, line = generate(seed)
    why, scored = check(found)
    assert why is None and "within 2% of the best" in line
    top = best(scored)
    assert top is not None and top.feasible and (top.prediction.output_tok_s or 0) > 0
    assert any(not s.prediction.feasible for s in scored)
    _, space_file = write(found, tmp_path)
    assert len(list(read_space(space_file).points())) == len(scored)  # the written space is the one checked


def test_the_generator_varies_the_structure_across_seeds() -> None:
    draws = [draw(seed) for seed in TRAIN_SEEDS]
    knobs = {p["name"] for d in draws for p in d.space["params"]}
    assert {"kv-cache-dtype", "chunked-prefill-size", "max-running-requests"} <= knobs
    gpus = {d.scenario["gpus"]["name"] for d in draws}
    assert len(gpus) >= 4
    mechanisms = " ".join(d.summary for d in draws)
    for what in ("unsupported", "NaN in graphs of batch", "NaN at batch", "with KV"):
        assert what in mechanisms


def test_generate_writes_a_scenario_and_a_space_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--seed", str(TRAIN_SEEDS[2]), "--out", str(tmp_path)]) == 0
    space = yaml.safe_load((tmp_path / "space.yaml").read_text())
    assert space["engine"]["scenario"] == "scenario.yaml" and (tmp_path / "scenario.yaml").is_file()
    assert "wrote" in capsys.readouterr().out


def test_nan_coupled_to_the_kv_dtype_fails_only_with_that_dtype() -> None:
    found = draw(0)
    raw = dict(found.scenario)
    backends = dict(raw["backends"])
    victim = next(n for n in backends if n != "default")  # whatever its drawn rule, now only this one
    backends[victim] = {"behaviour": "garbage", "behaviour_kv_dtypes": ["bfloat16"]}
    raw["backends"] = backends
    scenario = parse_scenario(raw, "kv coupling")

    def behaviour(kv: str) -> str:
        argv = ["--model-path", "/m", "--tp-size", str(scenario.gpus.count), "--kv-cache-dtype", kv,
                "--dsa-prefill-backend", victim, "--dsa-decode-backend", victim]  # fmt: skip
        return launch_from_argv(scenario, "0.5.23", argv).behaviour

    assert behaviour("bfloat16") == "garbage"
    assert behaviour("fp8_e4m3") == "ok"
    assert Outcome.GARBAGE.value == "garbage"


def test_behaviour_kv_dtypes_needs_a_nan_or_garbage_behaviour() -> None:
    raw = dict(draw(0).scenario)
    raw["backends"] = {"x": {"behaviour": "ok", "behaviour_kv_dtypes": ["bfloat16"]}}
    with pytest.raises(Exception, match="behaviour_kv_dtypes is set"):
        parse_scenario(raw, "bad")


def test_every_split_holds_every_family_in_equal_shares() -> None:
    from tuner.sim.generate_families import FAMILIES, family_of

    for split in (TRAIN_SEEDS, TEST_SEEDS):
        counts = [sum(1 for s in split if family_of(s) == f) for f in FAMILIES]
        assert max(counts) - min(counts) <= 1
    assert {draw(s).family for s in range(8)} == set(FAMILIES)


def test_the_families_draw_what_they_stand_for() -> None:
    draws = [draw(seed) for seed in TRAIN_SEEDS]
    by = {f: [d for d in draws if d.family == f] for f in ("kv-bound", "decode-bound", "slo-bound")}
    assert all(d.space["bench"]["workload"]["input_len"] >= 4000 for d in by["kv-bound"])
    decode = by["decode-bound"]
    assert all(d.space["bench"]["workload"]["output_len"] >= 256 for d in decode)
    assert (
        min(
            len(next(p for p in d.space["params"] if p["name"] == "sparse_backends")["choices"])
            for d in decode
        )
        >= 5
    )
    for d in by["slo-bound"]:
        names = {p["name"] for p in d.space["params"]}
        assert {"max-running-requests", "chunked-prefill-size"} <= names and d.slo
    point = [d.space["bench"]["load_points"][0] for d in draws]
    assert any(p["num_prompts"] > p["concurrency"] for p in point)
    assert any(d.infeasible_baseline for d in draws) and not all(d.infeasible_baseline for d in draws)
    assert " as decode" in " ".join(d.summary for d in draws)  # failures tied to one role


def test_an_slo_bound_landscape_has_its_best_on_a_constraint_boundary() -> None:
    found, _ = generate(19)
    assert found.family == "slo-bound"
    metrics = sorted(c.split()[0] for c in found.space["constraints"])
    assert metrics == ["min_free_vram_mib", "tpot_p50_ms"]
    _, scored = check(found)
    top = best(scored)
    assert top is not None
    unconstrained = max(
        (s for s in scored if s.prediction.feasible), key=lambda s: s.prediction.output_tok_s or 0
    )
    assert (unconstrained.prediction.output_tok_s or 0) > (top.prediction.output_tok_s or 0)  # the SLOs bind
    assert any(s.violated for s in scored)


def test_a_failure_tied_to_the_decode_role_shows_only_where_that_backend_decodes() -> None:
    raw = dict(draw(0).scenario)
    names = [n for n in raw["backends"] if n != "default"][:2]
    a, b = names
    raw["backends"] = {
        **raw["backends"],
        a: {"behaviour": "nan_batched", "nan_min_batch": 1, "behaviour_roles": ["decode"]},
        b: {"behaviour": "ok"},
    }
    scenario = parse_scenario(raw, "role")

    def behaviour(prefill: str, decode: str) -> str:
        argv = ["--model-path", "/m", "--tp-size", str(scenario.gpus.count),
                "--dsa-prefill-backend", prefill, "--dsa-decode-backend", decode]  # fmt: skip
        return launch_from_argv(scenario, "0.5.23", argv).behaviour

    assert behaviour(b, a) == "nan_batched" and behaviour(a, a) == "nan_batched"
    assert behaviour(a, b) == "ok"
    bad = dict(raw)
    bad["backends"] = {**raw["backends"], a: {"behaviour": "nan", "behaviour_roles": ["both"]}}
    with pytest.raises(Exception, match="behaviour_roles"):
        parse_scenario(bad, "bad role")


def test_a_nan_only_in_captured_graphs_never_comes_from_the_prefill_backend() -> None:
    raw = dict(draw(0).scenario)
    a, b = [n for n in raw["backends"] if n != "default"][:2]
    raw["backends"] = {
        **raw["backends"],
        a: {"behaviour": "nan", "nan_min_batch": 8, "nan_graph_only": True},
        b: {"behaviour": "ok"},
    }
    scenario = parse_scenario(raw, "graph nan")

    def launch(prefill: str, decode: str) -> Launch:
        argv = ["--model-path", "/m", "--tp-size", str(scenario.gpus.count),
                "--cuda-graph-max-bs-decode", "64",
                "--dsa-prefill-backend", prefill, "--dsa-decode-backend", decode]  # fmt: skip
        return launch_from_argv(scenario, "0.5.23", argv)

    for decodes_in_graphs in (launch(b, a), launch(a, a)):
        assert decodes_in_graphs.nan_at(32, graph=True) and not decodes_in_graphs.nan_at(32, graph=False)
    prefills_only = launch(a, b)
    assert prefills_only.behaviour == "ok" and not prefills_only.nan_at(32, graph=True)


def test_an_infeasible_baseline_is_a_failing_point() -> None:
    for seed in (7, 11, 15, 19, 23, 27, 31):  # slo-bound training seeds, quick to check
        found, _ = generate(seed)
        if found.infeasible_baseline:
            break
    assert found.infeasible_baseline
    _, scored = check(found)
    baseline = found.space["baselines"][0]
    entry = next(s for s in scored if s.point == baseline)
    assert not entry.prediction.feasible and not entry.feasible


def _capture_boundaries_inside(found: Draw, tmp: Path) -> int:
    """Graph settings of a draw that capture at the bottom of its fraction range and run out of memory
    capturing at its top (by the simulator's memory model, the largest chunk and running cap)."""
    _, path = write(found, tmp)
    space = read_space(path)
    scenario = space.scenario()
    params = {p["name"]: p for p in found.space["params"]}
    frac = params["mem-fraction-static"]
    base = {name: p["choices"][-1] for name, p in params.items() if "choices" in p}
    inside = 0
    for graph in params["cuda_graph"]["choices"]:
        if graph == "off":
            continue
        runs_out = []
        for fraction in (frac["low"], frac["high"]):
            point = {
                **base,
                "cuda_graph": graph if graph == "on" else f"max:{graph}",
                "mem-fraction-static": fraction,
            }
            launch = space.launch(scenario, point)
            plan = memory.plan_memory(
                scenario, tp_size=launch.tp_size, fraction=fraction, kv_dtype=launch.kv_cache_dtype,
                captured_bs=launch.captured_bs,
            )  # fmt: skip
            runs_out.append(memory.capture_peak_mib(scenario, plan) > plan.total_mib)
        inside += runs_out == [False, True]
    return inside


def test_the_fraction_range_reaches_the_capture_boundary_of_several_graph_sizes(tmp_path: Path) -> None:
    # memory tight at the top: the capture-OOM boundary falls inside the range and moves with the graph size
    inside = [_capture_boundaries_inside(draw(seed), tmp_path / str(seed)) for seed in TRAIN_SEEDS]
    assert sum(n >= 1 for n in inside) >= 0.6 * len(inside)  # 0.78 (the v4 generator: 0.32)
    assert sum(n >= 2 for n in inside) >= 0.35 * len(inside)  # 0.52 (v4: 0.12)


def test_the_runtime_outside_the_static_pool_needs_more_than_the_reserve_inside_it() -> None:
    # else a fraction near 1 would fit, graphs and all: no GPU runs at mem-fraction-static 1.0
    for seed in (*TRAIN_SEEDS, *TEST_SEEDS):
        mem = draw(seed).scenario["memory"]
        assert mem["runtime_overhead_mib"] > mem["static_reserve_mib"]


def test_failures_are_tied_to_one_role_a_kv_dtype_or_missing_kernels_in_many_draws() -> None:
    draws = [draw(seed) for seed in TRAIN_SEEDS]
    summaries = [d.summary for d in draws]
    role = sum(" as decode" in s or " as prefill" in s for s in summaries)
    assert role >= 0.4 * len(draws)  # 29 of 50 (v4: 7)
    assert sum("with KV" in s for s in summaries) >= 0.35 * len(draws)  # 26 (v4: 14)
    text = " ".join(summaries)
    assert "not built for sm_" in text  # a role's kernels, or a later chip revision's, missing
    assert any(f"NaN at batch >= {n}" in text for n in (32, 64, 128))  # only at a large batch
    assert any("NaN in graphs" in s and "with KV" in s for s in summaries)  # graph size x KV dtype
    for d in draws:  # a missing kernel is a startup error the tuner's classifier knows
        for name, rule in d.scenario["backends"].items():
            if isinstance(rule, dict) and rule.get("behaviour") == "unsupported":
                assert "Unsupported architecture" in rule["error"] or "no kernel image" in rule["error"], name


def test_decode_bound_spaces_pair_many_backends_and_cap_the_running_batch() -> None:
    decode = [draw(seed) for seed in TRAIN_SEEDS if family_of(seed) == "decode-bound"]
    pairs = [
        len(next(p for p in d.space["params"] if p["name"] == "sparse_backends")["choices"]) for d in decode
    ]
    assert min(pairs) >= 9
    knobs = [{p["name"] for p in d.space["params"]} for d in decode]
    assert sum("max-running-requests" in k for k in knobs) >= len(decode) // 2  # 9 of 12 (v4: 0)
    assert sum("kv-cache-dtype" in k for k in knobs) >= len(decode) // 2


def test_every_space_stays_within_the_points_the_oracle_evaluates() -> None:
    for seed in (*TRAIN_SEEDS, *TEST_SEEDS):
        points = 1
        for p in draw(seed).space["params"]:
            points *= len(p["choices"]) if "choices" in p else round((p["high"] - p["low"]) / p["step"]) + 1
        assert points <= MAX_POINTS


def test_a_tight_landscape_runs_out_of_memory_inside_its_range_at_a_point_per_graph_setting() -> None:
    found, _ = generate(28)  # a small mixed landscape (576 points)
    _, scored = check(found)
    low = next(p for p in found.space["params"] if p["name"] == "mem-fraction-static")["low"]
    first: dict[object, float] = {}
    for s in scored:
        if s.prediction.outcome in (Outcome.OOM_AT_CAPTURE, Outcome.OOM_UNDER_LOAD):
            graph = s.point["cuda_graph"]
            first[graph] = min(first.get(graph, 1.0), s.point["mem-fraction-static"])
    inside = {graph: f for graph, f in first.items() if f > low}
    assert len(inside) >= 3 and len(set(inside.values())) >= 2  # each graph setting has its own boundary
