"""A trial against the simulator speaking as real SGLang 0.5.17 spoke on an H200: what ran is what is kept."""

from __future__ import annotations

import contextlib
import signal
import threading
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from tuner.config import CudaGraph, Outcome
from tuner.engine import engine_for, probe_for
from tuner.gate.checks import GateResult, GateVerdict
from tuner.session import TrialContext
from tuner.space.loader import config_from_params, load_space
from tuner.trial import run_trial

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _ctx(tmp: Path, **fixed: object) -> TrialContext:
    space = load_space(ROOT / "search_spaces" / "tiny-fast-sim.yaml")
    space = replace(space, sglang_version="0.5.17", fixed_flags={**dict(space.fixed_flags), **fixed})
    engine = engine_for(space, state_root=tmp)
    return TrialContext(space=space, engine=engine, probe=probe_for(engine), log_dir=tmp / "logs")


def test_torch_native_runs_without_graphs_and_the_trial_is_kept_as_what_ran(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, **{"attention-backend": "torch_native"})
    params = {"mem-fraction-static": 0.8, "cuda_graph": 8, "chunked-prefill-size": None}
    result = run_trial(config_from_params(ctx.space, params), ctx, label="native")
    assert result.outcome is Outcome.OK, result.failure
    assert result.server is not None and result.server.cuda_graph is False
    assert result.server.captured_bs is None
    assert result.config.cuda_graph == CudaGraph(max_bs=8)  # the request, as asked
    assert result.effective is not None and result.effective.cuda_graph == CudaGraph(enabled=False)
    assert result.effective_key is not None and result.launch is not None
    assert result.effective_key != result.launch.key
    assert any("SGLang ran off" in w for w in result.warnings)
    log = result.launch.log_path.read_text()
    assert "Cuda graph is disabled because of using torch native attention backend" in log
    assert "crashed with exit code -9" in log  # 0.5.17's shutdown noise, after a healthy run
    assert result.log_excerpt == ""  # a passing trial has no excerpt: its last lines are that noise


def test_the_capture_list_is_the_resolved_one(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    params = {"mem-fraction-static": 0.8, "cuda_graph": 16, "chunked-prefill-size": None}
    result = run_trial(config_from_params(ctx.space, params), ctx, label="graphs")
    assert result.outcome is Outcome.OK, result.failure
    assert result.server is not None and result.server.cuda_graph is True
    assert result.server.captured_bs is not None and max(result.server.captured_bs) == 16
    assert result.effective is None and not any("effective" in w for w in result.warnings)
    load = result.gate.load if result.gate is not None else None
    assert load is not None and load.target == 2 and load.client == 2  # the space's burst_size: 2
    assert load.server is not None and 2 <= load.server <= 2 + 1  # the gate's own burst, as batched


def _kill(process: psutil.Process) -> None:
    with contextlib.suppress(psutil.NoSuchProcess):
        process.send_signal(signal.SIGKILL)


def test_a_server_killed_from_outside_during_the_gate_is_the_machine_s_fault_not_a_gate_error(
    tmp_path: Path,
) -> None:
    """The gate's requests fail the moment the server is SIGKILLed, before its exit is seen: the trial
    waits for the exit and classifies the death (no error line: infra_error), never a gate_error."""
    ctx = _ctx(tmp_path)

    def gate_cut_off(base_url: str, *_: object, **__: object) -> GateResult:
        port = int(base_url.rsplit(":", 1)[1])
        server = next(p for p in psutil.Process().children() if str(port) in " ".join(p.cmdline()))
        threading.Timer(0.3, _kill, (server,)).start()  # the exit comes after the failed requests
        return GateResult(verdict=GateVerdict.ERROR, reason="connection failed: reset", duration_s=0.0)

    ctx = replace(ctx, gate=gate_cut_off)
    params = {"mem-fraction-static": 0.8, "cuda_graph": "off", "chunked-prefill-size": None}
    result = run_trial(config_from_params(ctx.space, params), ctx, label="killed")
    assert result.outcome is Outcome.INFRA_ERROR, result.failure
    assert result.failure is not None and result.failure.phase.value == "gate"
