"""NvmlProbe against a real NVIDIA GPU: a torch process takes ~4 GiB, is killed, and its memory comes back.

Run on purpose on a GPU machine: `python -m pytest tests/gpu -v -s`. Skipped where NVML is absent.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tuner.errors import GpuBusyError, GpuError
from tuner.gpu.sampler import (
    GpuMemory,
    MemorySampler,
    NvmlProbe,
    check_gpus_free,
    visible_to_nvml,
    wait_for_release,
)

pytestmark = pytest.mark.gpu

HOLD_MIB = 4096
HOLDER = f"""
import sys, time, torch
x = torch.empty({HOLD_MIB} * 2**20, dtype=torch.uint8, device="cuda")
x.fill_(1)
torch.cuda.synchronize()
print("holding", flush=True)
time.sleep(600)
"""


@pytest.fixture(scope="module")
def probe() -> Iterator[NvmlProbe]:
    try:
        nvml = NvmlProbe()
    except GpuError as exc:
        pytest.skip(str(exc))
    yield nvml
    nvml.close()


@pytest.fixture(scope="module")
def gpu(probe: NvmlProbe) -> int:
    visible = visible_to_nvml(os.environ.get("CUDA_VISIBLE_DEVICES"), probe.devices())
    if not visible:
        pytest.skip("no visible GPU")
    return visible[0]


def _one(probe: NvmlProbe, gpu: int) -> GpuMemory:
    (mem,) = probe.memory([gpu])
    return mem


def test_devices_describe_the_gpus(probe: NvmlProbe) -> None:
    devices = probe.devices()
    for d in devices:
        print(f"\nGPU {d.index}: {d.name} {d.uuid} cc {d.compute_capability}", end=" ")
        print(f"{d.total_mib} MiB driver {d.driver}")
    assert devices
    assert all(d.uuid.startswith("GPU-") and d.total_mib > 1024 for d in devices)
    assert all(d.compute_capability.count(".") == 1 for d in devices)
    by_uuid = visible_to_nvml(",".join(d.uuid for d in reversed(devices)), devices)
    assert by_uuid == tuple(d.index for d in reversed(devices))


def test_v2_used_excludes_driver_reserved_memory(probe: NvmlProbe, gpu: int) -> None:
    import pynvml

    handle = pynvml.nvmlDeviceGetHandleByIndex(gpu)
    v1 = pynvml.nvmlDeviceGetMemoryInfo(handle)
    mem = _one(probe, gpu)
    print(
        f"\nmemory api {probe.memory_api}: v1 used {v1.used // 2**20} MiB free {v1.free // 2**20} MiB; "
        f"probe used {mem.used_mib} MiB free {mem.free_mib} MiB total {mem.total_mib} MiB; "
        f"processes {mem.processes}"
    )
    assert mem.used_mib <= v1.used // 2**20
    assert mem.free_mib is not None and mem.total_mib is not None
    assert abs(mem.free_mib - v1.free // 2**20) < 64  # same free memory, only "used" differs


def test_probe_is_cheap(probe: NvmlProbe, gpu: int) -> None:
    n = 200
    t0 = time.perf_counter_ns()
    for _ in range(n):
        probe.memory([gpu])
    per_call_us = (time.perf_counter_ns() - t0) / n / 1000
    print(f"\nmemory([{gpu}]) takes {per_call_us:.0f} us per call")
    assert per_call_us < 20_000


def test_holder_is_seen_killed_and_released(probe: NvmlProbe, gpu: int) -> None:
    before = _one(probe, gpu)
    assert before.free_mib is not None
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=probe.devices()[gpu].uuid)
    with MemorySampler(probe, [gpu], interval_s=0.05) as sampler:
        t_spawn = time.monotonic()
        holder = subprocess.Popen([sys.executable, "-c", HOLDER], env=env, stdout=subprocess.PIPE)
        try:
            assert holder.stdout is not None
            ready, _, _ = select.select([holder.stdout], [], [], 120)
            assert ready and holder.stdout.readline().strip() == b"holding", "holder did not start"
            spawn_s = time.monotonic() - t_spawn
            print(f"\nholder pid {holder.pid} allocated {HOLD_MIB} MiB after {spawn_s:.1f} s")

            held = _one(probe, gpu)
            mine = [p for p in held.processes if p.pid == holder.pid]
            print(f"while held: used {held.used_mib} MiB free {held.free_mib} MiB processes {held.processes}")
            assert mine, f"pid {holder.pid} not among {held.processes}"
            assert mine[0].used_mib is not None and mine[0].used_mib >= HOLD_MIB
            assert held.used_mib >= before.used_mib + HOLD_MIB

            busy = rf"pid {holder.pid} \(.*python.*\) holds \d+ MiB on GPU {gpu}"
            with pytest.raises(GpuBusyError, match=busy):
                check_gpus_free(probe, [gpu], policy="fail", timeout_s=0)
            assert check_gpus_free(probe, [gpu], policy="ignore", timeout_s=0) == 0.0
            assert check_gpus_free(probe, [gpu], policy="fail", timeout_s=0, our_pids={holder.pid}) >= 0.0

            t_kill = time.monotonic()
            os.kill(holder.pid, signal.SIGKILL)  # not reaped yet: a zombie holds no GPU memory
            waited = wait_for_release(
                probe, [gpu], baseline_used_mib=[before.used_mib], our_pids={holder.pid}, timeout_s=60
            )
            after = _one(probe, gpu)
            print(
                f"released: wait_for_release returned {waited:.3f} s after SIGKILL "
                f"({time.monotonic() - t_kill:.3f} s wall); used {after.used_mib} MiB "
                f"(baseline {before.used_mib} MiB), processes {after.processes}"
            )
            assert all(p.pid != holder.pid for p in after.processes)
        finally:
            holder.kill()
            holder.wait()
    assert sampler.min_free_mib is not None and sampler.max_used_mib is not None
    print(
        f"sampler: {sampler.samples} samples, min free {sampler.min_free_mib[0]} MiB "
        f"(free before {before.free_mib} MiB), max used {sampler.max_used_mib[0]} MiB"
    )
    assert sampler.min_free_mib[0] <= before.free_mib - HOLD_MIB
    assert sampler.max_used_mib[0] >= before.used_mib + HOLD_MIB
