"""GPU-backed simulator on CPU: scaling maths, chunk plans, OOM lines, DeviceMemory on a fake torch."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tuner.engine import engine_for, probe_for
from tuner.errors import GpuError
from tuner.gpu.nvml import NvmlProbe
from tuner.sim.args import SimFlagError, split_sim_flags
from tuner.sim.device import (
    DeviceMemory,
    DeviceOutOfMemory,
    DeviceUnavailable,
    oom_line,
    plan_chunks,
    scale_mib,
)
from tuner.space.loader import load_space

ROOT = Path(__file__).resolve().parents[2]
FAKE_TORCH = ROOT / "tests" / "fixtures" / "fake_torch"


def test_the_scenarios_card_maps_onto_the_real_one() -> None:
    assert scale_mib(143771, 143771, 143771) == 143771
    assert scale_mib(40000, 80000, 143771) == 71886  # half the scenario's card is half the real one
    assert scale_mib(0, 80000, 143771) == 0
    assert scale_mib(-5, 80000, 143771) == 0
    with pytest.raises(ValueError, match="positive"):
        scale_mib(1, 0, 143771)


@pytest.mark.parametrize(
    ("held", "target", "plan"),
    [
        ([], 2500, (0, (1024, 1024, 452))),
        ([1024, 1024, 452], 2500, (3, ())),
        ([1024, 1024, 452], 3000, (3, (500,))),  # grow: keep all, add the rest
        ([1024, 1024, 452], 1500, (1, (476,))),  # shrink: drop what no longer fits, top up
        ([1024], 0, (0, ())),
    ],
)
def test_chunk_plans_keep_a_prefix_and_fill_the_rest(held: list[int], target: int, plan: tuple) -> None:
    assert plan_chunks(held, target, 1024) == plan
    kept, add = plan
    assert sum(held[:kept]) + sum(add) == target


def test_torchs_message_becomes_sglangs_one_line() -> None:
    assert oom_line("CUDA out of memory. Tried to allocate 2.00 GiB.\nGPU 0 has ...") == (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has ..."
    )
    assert oom_line("torch.OutOfMemoryError: x") == "torch.OutOfMemoryError: x"


@pytest.fixture
def fake_torch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("FAKE_TORCH_TOTAL_MIB", "10000")
    ledger = tmp_path / "ledger"
    monkeypatch.setenv("FAKE_TORCH_LEDGER", str(ledger))
    monkeypatch.syspath_prepend(str(FAKE_TORCH))
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    return ledger


def test_device_memory_holds_the_scaled_model_shrinks_and_raises_torchs_oom(fake_torch: Path) -> None:
    mem = DeviceMemory(ranks=2, scenario_total_mib=5000)  # the real card is twice the scenario's
    mem.hold(1000)
    assert mem.card_total_mib == 10000 and mem.held_mib() == (2000, 2000)
    mem.hold(2600)
    assert mem.held_mib() == (5200, 5200)
    mem.hold(700)
    assert mem.held_mib() == (1400, 1400)
    with pytest.raises(DeviceOutOfMemory, match=r"CUDA out of memory\. Tried to allocate"):
        mem.hold(5001)
    mem.release()
    assert mem.held_mib() == (0, 0)
    last = {}
    for line in fake_torch.read_text().splitlines():
        _, device, mib = line.split()
        last[device] = int(mib)
    assert last == {"0": 0, "1": 0}  # everything given back


def test_without_torch_the_device_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    with pytest.raises(DeviceUnavailable, match="needs torch"):
        DeviceMemory(ranks=1, scenario_total_mib=1000).hold(1)


def test_sim_flag_and_space_setting_pick_the_gpu_backed_mode_and_nvml(tmp_path: Path) -> None:
    sim, rest = split_sim_flags(["--sim-gpu-backed", "--model-path", "m"])
    assert sim.gpu_backed and rest == ["--model-path", "m"]
    assert not split_sim_flags(["--model-path", "m"])[0].gpu_backed
    with pytest.raises(SimFlagError):
        split_sim_flags(["--sim-gpu-backed=no"])
    space = load_space(ROOT / "search_spaces" / "h200-gpu-backed-sim.yaml")
    engine = engine_for(space, state_root=tmp_path)
    assert engine.launcher[-1] == "--sim-gpu-backed"
    assert engine.env == () and engine.gpu_state_dir is None  # no state files: NVML sees real memory
    try:
        probe = probe_for(engine)
    except GpuError as exc:  # no driver on this machine: the NVML probe was chosen and said so
        assert "NVML" in str(exc)
    else:
        assert isinstance(probe, NvmlProbe)
        probe.close()
