"""One trial end to end (launch -> gate -> benchmark -> teardown) on the seed deployment's scenario."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.config import Outcome
from tuner.engine import engine_for, probe_for
from tuner.gate.run import GateVerdict
from tuner.session import TrialContext
from tuner.sim import perf
from tuner.sim.scenario import load_scenario
from tuner.space.loader import config_from_params, load_space
from tuner.trial import run_trial

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory) -> TrialContext:
    space = load_space(ROOT / "search_spaces" / "glm5-nvfp4-sm120-sim.yaml")
    run_dir = tmp_path_factory.mktemp("glm5")
    engine = engine_for(space, state_root=run_dir)
    return TrialContext(space=space, engine=engine, probe=probe_for(engine), log_dir=run_dir / "logs")


def _run(ctx: TrialContext, backends: str, label: str):  # type: ignore[no-untyped-def]
    params = {"mem-fraction-static": 0.85, "cuda_graph": "off", "sparse_backends": backends}
    return run_trial(config_from_params(ctx.space, params), ctx, label=label)


def test_trtllm_passes_the_gate_and_measures_what_the_scenario_models(ctx: TrialContext) -> None:
    result = _run(ctx, "trtllm/trtllm", "trtllm")
    assert result.outcome is Outcome.OK, result.failure
    assert result.gate is not None and result.gate.verdict is GateVerdict.PASSED
    assert result.server is not None and result.server.kv_tokens == pytest.approx(370_000, rel=0.02)
    assert result.min_free_mib is not None and len(result.min_free_mib) == 8
    metrics = result.bench.objective_metrics if result.bench else None
    assert metrics is not None and metrics.completed == 64 and metrics.failed == 0
    bench = ctx.space.bench
    want = perf.predict_closed_loop(
        load_scenario("glm5-nvfp4-sm120").perf,
        concurrency=bench.load_points[0].concurrency or 64,
        input_len=bench.workload.input_len,
        output_len=bench.workload.output_len,
        captured=(),
        chunked_prefill=8192,
    )
    assert metrics.output_throughput == pytest.approx(want.output_tok_s, rel=0.15)
    assert metrics.total_throughput == pytest.approx(want.total_tok_s, rel=0.15)
    assert not result.bench.client_bound
    # the scheduler's batch under the benchmark, from its log lines: what the search reads as twins
    load = result.load
    assert load is not None and load.retractions == 0, load
    assert load.peak_running is not None and 1 < load.peak_running <= bench.load_points[0].concurrency, load
    assert load.peak_kv_usage is not None and 0 < load.peak_kv_usage < 1, load


@pytest.mark.parametrize("backends", ["flashmla_kv/flashmla_kv", "flashmla_sparse/flashmla_sparse"])
def test_flashmla_backends_fail_the_gate_with_outputs_kept(ctx: TrialContext, backends: str) -> None:
    result = _run(ctx, backends, backends.split("/")[0])
    assert result.outcome in (Outcome.NAN, Outcome.GARBAGE), result.failure
    assert result.bench is None, "a configuration that failed the gate must not be benchmarked"
    assert result.gate is not None and result.gate.answers
    bad = [a for a in result.gate.answers if a.verdict is not GateVerdict.PASSED]
    assert bad and all(a.text is not None for a in result.gate.answers)
