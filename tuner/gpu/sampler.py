"""GPU probe: who holds how much memory on which GPU, and waiting until it is given back.

Two adapters behind one `GpuProbe` protocol (gpu_memory.py): `NvmlProbe` (the real
driver, through pynvml; gpu_nvml.py) and `FileGpuProbe` (files the simulator publishes;
gpu_files.py). On top of either, here: `MemorySampler` (minimum free memory over a
window), `wait_for_release` (after a server stops: no process of ours on the GPUs and
used memory back at its pre-launch baseline) and `check_gpus_free` (before a launch: no
foreign process on the GPUs). The probes and values are re-exported, so callers read
all of it from `tuner.gpu.sampler`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Sequence
from types import TracebackType
from typing import Literal

import psutil

from tuner.errors import GpuBusyError, ReleaseTimeoutError
from tuner.gpu.files import FileGpuProbe
from tuner.gpu.nvml import NvmlProbe, visible_to_nvml
from tuner.gpu.probe import MIB, GpuMemory, GpuProbe, GpuProcess

__all__ = [
    "MIB",
    "FileGpuProbe",
    "GpuMemory",
    "GpuProbe",
    "GpuProcess",
    "MemorySampler",
    "NvmlProbe",
    "check_gpus_free",
    "visible_to_nvml",
    "wait_for_release",
]

log = logging.getLogger(__name__)


class MemorySampler:
    """Background thread recording the minimum free and maximum used MiB per GPU over its window.

    Use as a context manager; it samples once on entry and once on exit, and every
    `interval_s` between. A probe error is kept in `.error` and sampling goes on.
    """

    def __init__(self, probe: GpuProbe, indices: Sequence[int], *, interval_s: float = 0.1) -> None:
        self._probe = probe
        self._indices = tuple(indices)
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._min_free: list[int | None] = [None] * len(self._indices)
        self._max_used: list[int | None] = [None] * len(self._indices)
        self.samples = 0
        self.error: Exception | None = None

    def __enter__(self) -> MemorySampler:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> MemorySampler:
        self._sample()
        self._thread = threading.Thread(target=self._run, name="gpu-memory-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self._sample()

    @property
    def min_free_mib(self) -> tuple[int, ...] | None:
        """Lowest free MiB seen per GPU, in the order given; None until every GPU reported a free figure."""
        with self._lock:
            values = list(self._min_free)
        return None if any(v is None for v in values) else tuple(v for v in values if v is not None)

    @property
    def max_used_mib(self) -> tuple[int, ...] | None:
        """Highest used MiB seen per GPU, in the order given; None before the first sample."""
        with self._lock:
            values = list(self._max_used)
        return None if any(v is None for v in values) else tuple(v for v in values if v is not None)

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._sample()

    def _sample(self) -> None:
        try:
            snapshot = self._probe.memory(self._indices)
        except Exception as exc:  # keep sampling: one failed read must not end a trial
            if self.error is None:
                log.warning("GPU memory sampling failed: %s", exc)
            self.error = exc
            return
        with self._lock:
            self.samples += 1
            for pos, mem in enumerate(snapshot):
                if mem.free_mib is not None:
                    low = self._min_free[pos]
                    self._min_free[pos] = mem.free_mib if low is None else min(low, mem.free_mib)
                high = self._max_used[pos]
                self._max_used[pos] = mem.used_mib if high is None else max(high, mem.used_mib)


def wait_for_release(
    probe: GpuProbe,
    indices: Sequence[int],
    *,
    baseline_used_mib: Sequence[int] | None,
    our_pids: Collection[int],
    timeout_s: float,
    tolerance_mib: int = 256,
    tolerance_frac: float = 0.02,
    poll_s: float = 0.1,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> float:
    """Seconds until no pid of ours holds memory on `indices` and used MiB is back at the baseline.

    "Back" means within max(tolerance_mib, tolerance_frac * total) of `baseline_used_mib`
    (per index, same order; None checks processes only). Raises ReleaseTimeoutError naming
    the pids (with command lines) and MiB still held after `timeout_s`.
    """
    start = clock()
    ours = set(our_pids)
    while True:
        snapshot = probe.memory(indices)
        holders = [(mem.index, p) for mem in snapshot for p in mem.processes if p.pid in ours]
        excess = [
            (mem.index, mem.used_mib - base)
            for mem, base in zip(snapshot, baseline_used_mib or (), strict=False)
            if mem.used_mib - base > max(tolerance_mib, tolerance_frac * (mem.total_mib or 0))
        ]
        waited = clock() - start
        if not holders and not excess:
            return waited
        if waited >= timeout_s:
            parts = [_holder(i, p) for i, p in holders]
            parts += [f"GPU {i} still uses {mib} MiB above its pre-launch baseline" for i, mib in excess]
            raise ReleaseTimeoutError(f"GPU memory not released after {timeout_s:.0f} s: " + "; ".join(parts))
        sleep(min(poll_s, max(timeout_s - waited, 0.0)))


def check_gpus_free(
    probe: GpuProbe,
    indices: Sequence[int],
    *,
    policy: Literal["wait", "fail", "ignore"],
    timeout_s: float,
    our_pids: Collection[int] = (),
    poll_s: float = 0.5,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> float:
    """Before a launch: seconds waited until no foreign process holds memory on `indices`.

    policy "fail" raises GpuBusyError at once, "wait" raises it after `timeout_s`,
    "ignore" logs a warning and returns 0. Our own pids and this process are not foreign.
    """
    mine = set(our_pids) | {os.getpid()}
    start = clock()
    while True:
        snapshot = probe.memory(indices)
        foreign = [(mem.index, p) for mem in snapshot for p in mem.processes if p.pid not in mine]
        waited = clock() - start
        if not foreign:
            return waited
        what = "; ".join(_holder(i, p) for i, p in foreign)
        if policy == "ignore":
            log.warning("GPUs %s are not free, launching anyway: %s", list(indices), what)
            return 0.0
        if policy == "fail" or waited >= timeout_s:
            after = "" if policy == "fail" else f" after waiting {timeout_s:.0f} s"
            raise GpuBusyError(
                f"GPUs {list(indices)} are busy{after}: {what} "
                "(stop those processes, or set the GPU policy to wait or ignore)"
            )
        sleep(min(poll_s, max(timeout_s - waited, 0.0)))


def _holder(index: int, proc: GpuProcess) -> str:
    held = "an unknown amount" if proc.used_mib is None else f"{proc.used_mib} MiB"
    return f"pid {proc.pid} ({_command(proc.pid)}) holds {held} on GPU {index}"


def _command(pid: int) -> str:
    try:
        cmdline = psutil.Process(pid).cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
        return "command unknown"
    text = " ".join(" ".join(cmdline).split()) or "command unknown"  # one line, even for `python -c "..."`
    return text if len(text) <= 160 else text[:157] + "..."
