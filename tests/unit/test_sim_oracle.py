"""Pure models behind the landscapes: scheduler, per-backend speed, knob-coupled failures, oracle."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tuner.sim import memory
from tuner.sim.landscape import best, evaluate, pareto_front
from tuner.sim.oracle import Outcome, Workload, predict
from tuner.sim.resolve import Launch
from tuner.sim.scenario import Scenario, load_scenario
from tuner.sim.sched import Scheduler, Seq
from tuner.sim.spacefile import launch_from_argv, read_space

ROOT = Path(__file__).resolve().parents[2]
SEED_BS = ["1", "2", "4", "8", "12", "16", "24", "32", "40", "48", "56", "64"]


def _launch(scenario: Scenario, version: str, *argv: str) -> Launch:
    return launch_from_argv(scenario, version, ["--model-path", "/m", *argv])


@pytest.fixture(scope="module")
def glm5() -> Scenario:
    return load_scenario("glm5-nvfp4-sm120")


@pytest.fixture(scope="module")
def h200() -> Scenario:
    return load_scenario("dsv32-fp8-h200")


@pytest.fixture(scope="module")
def b200() -> Scenario:
    return load_scenario("glm5-nvfp4-b200-tp4")


def _sched(scenario: Scenario, launch: Launch, capacity: int, max_running: int = 4096) -> Scheduler:
    return Scheduler(perf=scenario.perf, launch=launch, capacity_tokens=capacity, max_running=max_running)


def _drain(sched: Scheduler, limit: int = 100_000) -> list[str]:
    kinds = []
    for _ in range(limit):
        step = sched.plan()
        if step is None:
            return kinds
        kinds.append(step.kind + ("+retract" if step.retracted else ""))
        sched.commit(step)
    raise AssertionError("scheduler did not drain")


def test_admission_is_bounded_by_max_running_and_the_kv_pool(glm5: Scenario) -> None:
    launch = _launch(glm5, "0.5.9", "--tp-size", "8", "--disable-cuda-graph")
    sched = _sched(glm5, launch, capacity=10**9, max_running=3)
    for _ in range(5):
        sched.submit(Seq(prompt_tokens=10, max_new=4))
    sched.plan()
    assert len(sched.prefilling) == 3 and len(sched.waiting) == 2
    small = _sched(glm5, launch, capacity=1000)
    for _ in range(5):
        small.submit(Seq(prompt_tokens=300, max_new=100))  # 300 + 0.7 x 100 + 1 = 371 each
    small.plan()
    assert len(small.prefilling) == 2 and len(small.waiting) == 3  # 742 fits, 1113 does not
    assert _drain(small) and small.in_flight == 0 and small.used_tokens == 0


def test_decode_out_of_kv_retracts_requeues_and_reprefills(glm5: Scenario) -> None:
    launch = _launch(glm5, "0.5.9", "--tp-size", "8", "--disable-cuda-graph")
    sched = _sched(glm5, launch, capacity=2000)
    seqs = [Seq(prompt_tokens=400, max_new=300) for _ in range(4)]
    for seq in seqs:
        sched.submit(seq)
    kinds = _drain(sched)
    assert "decode+retract" in kinds
    assert sched.retracted_total >= 1 and any(s.retractions for s in seqs)
    assert all(s.generated == 300 and s.finished for s in seqs)
    assert sched.prompt_total > 4 * 400  # retracted requests were prefilled again
    assert sched.used_tokens == 0


def test_per_backend_speed_follows_the_pair_and_the_batch(h200: Scenario) -> None:
    a = _launch(h200, "0.5.23", "--dsa-prefill-backend", "fa3", "--dsa-decode-backend", "flashmla_kv")
    b = _launch(
        h200, "0.5.23", "--dsa-prefill-backend", "flashmla_sparse", "--dsa-decode-backend", "flashmla_sparse"
    )
    assert a.prefill_factor == 0.75 and b.prefill_factor == 0.8
    assert a.decode_factor_at(8) == 0.85 and a.decode_factor_at(128) == 1.05
    assert b.decode_factor_at(8) == 1.1 and b.decode_factor_at(64) == 0.85
    # the factors reach the step times the scheduler plans
    s = _sched(h200, a, capacity=10**6)
    s.submit(Seq(prompt_tokens=1000, max_new=2))
    prefill = s.plan()
    assert prefill is not None and prefill.dt_s == pytest.approx((1000 / 60000 + 0.02) * 0.75)


def test_nan_rules_need_backend_graphs_and_batch_together(h200: Scenario, glm5: Scenario) -> None:
    sparse = _launch(h200, "0.5.23", "--dsa-decode-backend", "flashmla_sparse")
    assert sparse.behaviour == "nan" and sparse.nan_min_batch == 64 and sparse.nan_graph_only
    assert sparse.nan_at(64, graph=True) and not sparse.nan_at(64, graph=False)
    assert not sparse.nan_at(63, graph=True)
    batched = _launch(glm5, "0.5.9", "--nsa-decode-backend", "flashmla_kv")
    assert not batched.nan_at(1, graph=False) and batched.nan_at(2, graph=False)


def test_capture_oom_depends_on_fraction_and_graph_size(h200: Scenario) -> None:
    def captures(fraction: float, max_bs: int) -> bool:
        bs = memory.default_capture_bs(max_bs)
        plan = memory.plan_memory(h200, tp_size=8, fraction=fraction, kv_dtype="fp8_e4m3", captured_bs=bs)
        return memory.capture_peak_mib(h200, plan) <= plan.total_mib

    assert captures(0.80, 256) and not captures(0.81, 256)
    assert captures(0.91, 128) and not captures(0.92, 128)
    assert captures(0.94, 64) and not captures(0.95, 64)


def test_oracle_reproduces_the_seed_numbers(glm5: Scenario) -> None:
    work = Workload(input_len=331, output_len=256, concurrency=64, num_prompts=128)
    base = ("--tp-size", "8", "--nsa-prefill-backend", "trtllm", "--nsa-decode-backend", "trtllm")
    eager = predict(
        glm5, _launch(glm5, "0.5.9", *base, "--mem-fraction-static", "0.85", "--disable-cuda-graph"), work
    )
    graphs = predict(
        glm5,
        _launch(glm5, "0.5.9", *base, "--mem-fraction-static", "0.92", "--cuda-graph-bs", *SEED_BS),
        work,
    )
    assert eager.outcome is Outcome.OK and graphs.outcome is Outcome.OK
    assert eager.output_tok_s == pytest.approx(225, rel=0.02) and eager.total_tok_s == pytest.approx(
        516, rel=0.02
    )
    assert graphs.output_tok_s == pytest.approx(194, rel=0.02)
    assert eager.kv_tokens == pytest.approx(370_000, rel=0.02) and graphs.kv_tokens == pytest.approx(
        498_000, rel=0.02
    )
    assert eager.free_mib == pytest.approx(16_574, rel=0.10)


@pytest.mark.parametrize(
    ("argv", "outcome"),
    [
        (("--mem-fraction-static", "0.6"), Outcome.NOT_ENOUGH_MEMORY),
        (("--mem-fraction-static", "0.95", "--cuda-graph-bs", *SEED_BS), Outcome.OOM_AT_CAPTURE),
        (("--mem-fraction-static", "0.95", "--disable-cuda-graph"), Outcome.OOM_UNDER_LOAD),
        (("--nsa-decode-backend", "flashmla_kv", "--disable-cuda-graph"), Outcome.NAN),
        (("--nsa-decode-backend", "flashmla_sparse", "--disable-cuda-graph"), Outcome.GARBAGE),
        (("--nsa-prefill-backend", "fa3", "--disable-cuda-graph"), Outcome.UNSUPPORTED),
    ],
)
def test_oracle_failure_classes(glm5: Scenario, argv: tuple[str, ...], outcome: Outcome) -> None:
    launch = _launch(
        glm5,
        "0.5.9",
        "--tp-size",
        "8",
        "--nsa-prefill-backend",
        "trtllm",
        "--nsa-decode-backend",
        "trtllm",
        *argv,
    )
    assert (
        predict(glm5, launch, Workload(input_len=128, output_len=16, concurrency=64, num_prompts=64)).outcome
        is outcome
    )


def test_kv_bound_workload_queues_and_memory_fraction_matters(b200: Scenario) -> None:
    work = Workload(input_len=8000, output_len=64, concurrency=64, num_prompts=64)
    pair = (
        "--tp-size",
        "4",
        "--dsa-prefill-backend",
        "flashmla_sparse",
        "--dsa-decode-backend",
        "trtllm",
        "--kv-cache-dtype",
        "fp8_e4m3",
        "--cuda-graph-max-bs-decode",
        "64",
    )
    low = predict(b200, _launch(b200, "0.5.23", *pair, "--mem-fraction-static", "0.7"), work)
    high = predict(b200, _launch(b200, "0.5.23", *pair, "--mem-fraction-static", "0.86"), work)
    assert low.outcome is high.outcome is Outcome.OK
    assert low.max_queue > 0 and low.max_batch < 64 and high.max_queue == 0 and high.max_batch == 64
    assert high.output_tok_s is not None and low.output_tok_s is not None
    assert high.output_tok_s > 1.2 * low.output_tok_s
    # the prefill chunk's activations: 16K tokens OOM where 8K still fit (fraction x chunk)
    at = ("--mem-fraction-static", "0.92")
    assert predict(
        b200, _launch(b200, "0.5.23", *pair, *at, "--chunked-prefill-size", "16384"), work
    ).outcome is (Outcome.OOM_UNDER_LOAD)
    assert predict(b200, _launch(b200, "0.5.23", *pair, *at, "--chunked-prefill-size", "8192"), work).feasible


def test_oracle_is_fast_enough_for_search_benchmarks(glm5: Scenario) -> None:
    space = read_space(ROOT / "search_spaces" / "glm5-nvfp4-sm120-sim.yaml")
    t0 = time.perf_counter()
    scored = evaluate(space, glm5)
    assert len(scored) == 320 and time.perf_counter() - t0 < 10


def test_landscapes_have_different_winners() -> None:
    winners = {}
    for name in ("glm5-nvfp4-sm120-sim", "dsv32-fp8-h200-sim", "glm5-nvfp4-b200-tp4-sim"):
        space = read_space(ROOT / "search_spaces" / f"{name}.yaml")
        scored = evaluate(space, space.scenario())
        top = best(scored)
        assert (
            top is not None and pareto_front(scored)[0].prediction.output_tok_s == top.prediction.output_tok_s
        )
        winners[name] = (top.point["sparse_backends"], top.point["cuda_graph"])
        assert {s.prediction.outcome for s in scored} >= {Outcome.OK, Outcome.NAN, Outcome.OOM_AT_CAPTURE}
    assert winners["glm5-nvfp4-sm120-sim"] == ("trtllm/trtllm", "off")
    assert winners["dsv32-fp8-h200-sim"] == ("fa3/flashmla_kv", "max:128")  # graphs help on NVLink
    assert winners["glm5-nvfp4-b200-tp4-sim"][0] == "flashmla_sparse/flashinfer_sparse_mla"


def test_space_reader_renders_flags_for_the_release() -> None:
    space = read_space(ROOT / "search_spaces" / "dsv32-fp8-h200-sim.yaml")
    argv = space.argv(
        {"mem-fraction-static": 0.9, "cuda_graph": "max:128", "sparse_backends": "fa3/flashmla_kv"}
    )
    assert argv[-8:] == [
        "--mem-fraction-static",
        "0.9",
        "--cuda-graph-max-bs-decode",
        "128",
        "--dsa-prefill-backend",
        "fa3",
        "--dsa-decode-backend",
        "flashmla_kv",
    ]
    assert space.version == "0.5.23" and space.workload.concurrency == 128
    assert len(list(space.points())) == 18 * 4 * 7


def test_closed_loop_keeps_one_record_per_request_when_prompts_outnumber_clients(glm5: Scenario) -> None:
    # finished requests are freed while later ones are sent: every request keeps its own record
    from tuner.sim.memory import plan_memory
    from tuner.sim.oracle import _run_closed, _Watch

    launch = _launch(glm5, "0.5.9", "--tp-size", "8", "--mem-fraction-static", "0.85")
    plan = plan_memory(glm5, tp_size=8, fraction=0.85, kv_dtype=launch.kv_cache_dtype, captured_bs=())
    for clients, requests in ((4, 40), (16, 200), (64, 320)):
        records, _ = _run_closed(
            glm5, launch, plan, _Watch(), clients=clients, requests=requests, prompt=128, output=16
        )
        assert len(records) == requests
        assert all(a <= f <= e for a, f, e in records)  # arrival, first token, finish: all set, in order
        arrivals = sorted(r[0] for r in records)
        assert arrivals[:clients] == [0.0] * clients and arrivals[clients] > 0  # later ones wait for a slot
