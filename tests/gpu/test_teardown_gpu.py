"""The real teardown on a real GPU: a 'server' whose stray grandchild (own session) holds GPU memory.

ProcessGroup.stop must escalate, sweep the grandchild that left the group, and
wait_for_release must see the memory back at the pre-launch baseline.
Run on purpose on a GPU machine: `python -m pytest tests/gpu -v -s`.
"""

from __future__ import annotations

import os
import sys
import time

import pytest

from tuner.errors import GpuError
from tuner.gpu.sampler import NvmlProbe, visible_to_nvml, wait_for_release
from tuner.sglang.process import ProcessGroup

pytestmark = pytest.mark.gpu

SERVER = """
import signal, subprocess, sys, time
holder = '''
import time, torch
x = torch.empty(3072 * 2**20, dtype=torch.uint8, device="cuda"); x.fill_(1); torch.cuda.synchronize()
print("grandchild holding", flush=True)
time.sleep(600)
'''
child = subprocess.Popen([sys.executable, "-c", holder], start_new_session=True)
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("server up", child.pid, flush=True)
time.sleep(600)
"""


def test_stop_sweeps_a_stray_gpu_holder_and_the_memory_comes_back() -> None:
    try:
        probe = NvmlProbe()
    except GpuError as exc:
        pytest.skip(str(exc))
    gpus = visible_to_nvml(os.environ.get("CUDA_VISIBLE_DEVICES"), probe.devices())[:1]
    baseline = tuple(m.used_mib for m in probe.memory(gpus))
    lines: list[str] = []
    group = ProcessGroup([sys.executable, "-c", SERVER], env=dict(os.environ), on_line=lines.append)
    deadline = time.monotonic() + 120
    while not any("grandchild holding" in ln for ln in lines):
        assert time.monotonic() < deadline, lines
        time.sleep(0.05)
    group.remember_descendants()
    held = probe.memory(gpus)[0]
    assert held.used_mib >= baseline[0] + 3000, held
    pids = group.known_pids()
    report = group.stop(sigint_grace_s=1.0, sigterm_grace_s=1.0)
    waited = wait_for_release(probe, gpus, baseline_used_mib=baseline, our_pids=pids, timeout_s=60)
    after = probe.memory(gpus)[0]
    print(f"\nheld {held.used_mib} MiB (baseline {baseline[0]}); signals {report.signals_sent}; "
          f"swept {report.swept_pids}; release seen {waited:.3f} s after stop; now {after.used_mib} MiB")
    assert report.signals_sent == ("SIGINT", "SIGTERM", "SIGKILL") and report.swept_pids
    assert after.used_mib <= baseline[0] + 256
    probe.close()
