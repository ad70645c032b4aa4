"""The tuner's benchmark over SGLang's native /generate against the simulator (a real subprocess)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from support.sim import Sim

from tuner.bench.runner import benchmark
from tuner.bench.settings import Api, BenchSettings, LoadPoint, Workload
from tuner.bench.types import OutputSource

pytestmark = pytest.mark.integration

TINY = ["--model-path", "/models/tiny", "--sim-seed", "1", "--sim-sglang-version", "0.5.17"]


@pytest.mark.parametrize("incremental", [False, True])
def test_every_request_completes_with_the_servers_token_counts(
    sim_factory: Callable[..., Sim], incremental: bool
) -> None:
    flags = ["--incremental-streaming-output"] if incremental else []
    sim = sim_factory(*TINY, *flags)
    sim.wait_ready(60)
    settings = BenchSettings(
        workload=Workload(input_len=24, output_len=12, api=Api.GENERATE),
        load_points=(LoadPoint(concurrency=3, num_prompts=6),),
        warmup_requests=0,
    )
    result = benchmark(sim.url, settings, settle_s=0.0)
    m = result.objective_metrics
    assert m is not None and (m.completed, m.failed) == (6, 0)
    records = result.points[0].records
    assert all(r.output_source is OutputSource.USAGE and r.output_tokens == 12 for r in records)
    assert all(r.input_tokens_server == 24 for r in records)  # token ids reach the server unchanged
    assert all(r.content_events >= 1 and r.ttft_s is not None for r in records)
    assert m.output_throughput > 0 and m.tpot.median_ms > 0
