"""The simulator's latency under load, as SGLang's scheduler makes it: Poisson arrivals queue for
prefill (TTFT rises with the rate, the served rate falls behind past saturation), and the shipped
capacity space has a launch that wins saturated throughput and loses SLO capacity."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tuner.sim.oracle import Prediction, Workload, poisson, predict
from tuner.sim.spacefile import read_space

ROOT = Path(__file__).resolve().parents[2]
SPACE = read_space(ROOT / "search_spaces" / "glm5-nvfp4-sm120-capacity-sim.yaml")
SCENARIO = SPACE.scenario()
GRAPHS = {"mem-fraction-static": 0.89, "cuda_graph": "max:32", "sparse_backends": "trtllm/trtllm"}
EAGER = {"mem-fraction-static": 0.89, "cuda_graph": "off", "sparse_backends": "trtllm/trtllm"}


def _at(point: dict[str, object], rate: float | None, n: int = 32) -> Prediction:
    launch = SPACE.launch(SCENARIO, point)
    base = SPACE.workload_for(launch)
    if rate is None:
        return predict(SCENARIO, launch, base)  # the space's load point: 8 in flight, closed loop
    return predict(SCENARIO, launch, replace(base, concurrency=64, num_prompts=n, request_rate=rate))


def _served(p: Prediction, n: int = 32) -> float:
    assert p.duration_s is not None and p.e2e_p50_ms is not None
    return n / (p.duration_s - p.e2e_p50_ms / 1000)


def _within(p: Prediction) -> bool:  # the space's SLOs
    assert p.ttft_p99_ms is not None and p.tpot_p99_ms is not None
    return p.ttft_p99_ms <= 3000 and p.tpot_p99_ms <= 80


def test_poisson_arrivals_are_seeded_and_spread_at_their_rate() -> None:
    times = poisson(2.0, 2000, 1)
    assert times is not None and times == poisson(2.0, 2000, 1) and times[0] == 0.0
    assert 900 < times[-1] < 1100  # 1,999 gaps of 0.5 s on average
    assert poisson(None, 10, 1) is None


def test_latency_rises_with_the_offered_rate_and_the_server_falls_behind_past_saturation() -> None:
    light, busy, over = (_at(EAGER, r) for r in (0.05, 0.3, 2.0))
    assert light.ttft_p99_ms is not None and busy.ttft_p99_ms is not None and over.ttft_p99_ms is not None
    assert light.ttft_p99_ms < busy.ttft_p99_ms < over.ttft_p99_ms
    assert over.ttft_p99_ms > 3 * light.ttft_p99_ms  # requests wait in the queue for prefill
    assert over.duration_s is not None
    assert _served(light) > 0.9 * 0.05 and 32 / over.duration_s < 0.9 * 2.0  # the queue grows
    closed = predict(SCENARIO, SPACE.launch(SCENARIO, EAGER), replace(Workload(
        input_len=2048, output_len=256, concurrency=8, num_prompts=48)))  # fmt: skip
    assert closed.ttft_p99_ms is not None and closed.ttft_p99_ms > light.ttft_p99_ms


def test_the_saturated_throughput_winner_serves_less_within_the_slo() -> None:
    graphs, eager = _at(GRAPHS, None), _at(EAGER, None)
    assert graphs.output_tok_s is not None and eager.output_tok_s is not None
    assert graphs.output_tok_s > 1.03 * eager.output_tok_s  # 8 in flight: a captured size
    rate = 0.37  # between the two launches' capacities
    assert _within(_at(EAGER, rate)) and _served(_at(EAGER, rate)) > 0.9 * rate
    assert not _within(_at(GRAPHS, rate))
