"""The simulator's GPU-backed mode as a real process, on a fake torch (no GPU here).

What it proves without a GPU: the scheduler child holds the model's memory scaled to the card
(and gives it back on exit), publishes no state files, and a card that cannot give what the model
asks for is torch's own out-of-memory error, logged as SGLang logs it and classified as OOM.
The real card is exercised by benchmarks/gpu_study.py.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from support.sim import REPO, poll

from tuner.config import Outcome, Phase
from tuner.sglang.logs import classify_failure
from tuner.sim import memory
from tuner.sim.scenario import load_scenario

pytestmark = pytest.mark.integration

FAKE_TORCH = REPO / "tests" / "fixtures" / "fake_torch"
CARD_MIB = 2 * 143771  # the fake card is twice the scenario's: every figure doubles
BASE = ["--sim-scenario", "h200-one-gpu", "--sim-gpu-backed", "--sim-seed", "1", "--model-path", "/m"]


def _env(tmp: Path) -> dict[str, str]:
    path = os.pathsep.join([str(FAKE_TORCH), str(REPO), os.environ.get("PYTHONPATH", "")])
    ledger = str(tmp / "ledger")
    return {"PYTHONPATH": path, "FAKE_TORCH_TOTAL_MIB": str(CARD_MIB), "FAKE_TORCH_LEDGER": ledger}


def _held(tmp: Path) -> dict[int, int]:
    """MiB each process holds on device 0 now, from the fake torch's ledger."""
    last: dict[int, int] = {}
    ledger = tmp / "ledger"
    for line in ledger.read_text().splitlines() if ledger.exists() else ():
        pid, device, mib = map(int, line.split())
        if device == 0:
            last[pid] = mib
    return last


def test_the_child_holds_the_scaled_model_publishes_nothing_and_gives_it_back(sim_factory, tmp_path: Path):
    sim = sim_factory(*BASE, "--mem-fraction-static", "0.8", "--disable-cuda-graph", env=_env(tmp_path))
    sim.wait_ready(60)
    scenario = load_scenario("h200-one-gpu")
    plan = memory.plan_memory(scenario, tp_size=1, fraction=0.8, kv_dtype="bfloat16", captured_bs=())
    warmup = scenario.memory.eager_act_mib_per_req  # the server's warmup request decodes once, eagerly
    held = _held(tmp_path)
    assert list(held.values()) == [round(2 * (plan.idle_used_mib + warmup))]  # one process, the model x2
    assert not sim.state_dir.exists()  # NVML sees real memory: no state files
    os.killpg(sim.proc.pid, signal.SIGTERM)
    sim.wait_exit(30)
    poll(lambda: set(_held(tmp_path).values()) == {0}, 10, "the memory given back")


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--mem-fraction-static", "0.9", "--cuda-graph-max-bs", "256"], "Capture cuda graph failed: CUDA"),
        (["--mem-fraction-static", "1.0", "--disable-cuda-graph"], "torch.OutOfMemoryError: CUDA out of"),
    ],
)
def test_an_over_commit_is_torchs_oom_logged_like_sglang_and_classified_oom(
    sim_factory, tmp_path: Path, flags: list[str], needle: str
) -> None:
    sim = sim_factory(*BASE, *flags, env=_env(tmp_path))
    code = sim.wait_exit(60)
    log = sim.log()
    assert needle in log and "Tried to allocate" in log and "Scheduler hit an exception" in log
    verdict = classify_failure(log.splitlines(), exit_code=code, phase=Phase.LAUNCH)
    assert verdict.outcome is Outcome.OOM, verdict
