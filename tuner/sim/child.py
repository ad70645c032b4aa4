"""The scheduler child: loads, allocates KV, captures graphs, then holds the simulated GPU memory.

It dies with its parent (PR_SET_PDEATHSIG). On a failure it logs SGLang's
`Scheduler hit an exception` traceback and SIGQUITs the parent, which then
kills the whole tree, as SGLang's launcher does.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, NoReturn

from tuner.sim import logfmt, memory, statefiles
from tuner.sim.args import Injections
from tuner.sim.device import DeviceMemory, DeviceOutOfMemory, DeviceUnavailable, oom_line
from tuner.sim.memory import MemoryPlan
from tuner.sim.resolve import Launch, at_least
from tuner.sim.scenario import Scenario

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
ORPHAN_MIB = 768.0  # what a stray compile helper keeps: its CUDA context


@dataclass(frozen=True, kw_only=True, slots=True)
class ChildJob:
    """What the scheduler child needs (inherited through fork)."""

    scenario: Scenario
    launch: Launch
    plan: MemoryPlan
    inject: Injections
    state_dir: Path | None
    parent_pid: int
    gpu_backed: bool = False  # hold real device memory (tuner.sim.device) instead of publishing files


def die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGKILL this process when its parent dies (no-op elsewhere)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent_pid:
        os._exit(1)


class _Memory:
    """What the child holds: published in the state files, or really allocated (GPU-backed)."""

    def __init__(self, job: ChildJob) -> None:
        self.job = job
        self.used_mib = 0.0
        self.device = (
            DeviceMemory(ranks=job.launch.tp_size, scenario_total_mib=job.plan.total_mib)
            if job.gpu_backed
            else None
        )

    def set(self, used_mib: float, where: str) -> None:
        """Hold `used_mib`; on a real card that cannot give it, fail at `where` with torch's OOM."""
        if self.device is not None:
            try:
                self.device.hold(used_mib)
            except DeviceOutOfMemory as exc:
                _fail(self.job, where, _real_oom(self.job, where, str(exc)))
            except DeviceUnavailable as exc:
                _fail(self.job, "device", str(exc))
        self.used_mib = used_mib
        if self.job.state_dir:
            statefiles.write_proc(self.job.state_dir, self.job.launch.used_gpus, used_mib)

    @property
    def avail_mib(self) -> float:
        return self.job.plan.total_mib - self.used_mib

    @property
    def real(self) -> bool:
        """True when a real card, not the model, decides what fits."""
        return self.device is not None

    def release(self) -> None:
        if self.device is not None:
            self.device.release()
        if self.job.state_dir:
            statefiles.remove_proc(self.job.state_dir)


def _real_oom(job: ChildJob, where: str, message: str) -> str:
    """The error SGLang logs for torch's out-of-memory at `where` (capture wraps it in its advice)."""
    line = oom_line(message)
    if where == "capture":
        return logfmt.capture_failed(job.launch.version, line[len("torch.OutOfMemoryError: ") :])
    return line


def _fail(job: ChildJob, where: str, error: str, inner: tuple[tuple[str, int, str], ...] = ()) -> None:
    log.error(logfmt.scheduler_exception(where, error, inner))
    _quit_parent(job)


def _kv_error(launch: Launch, plan: MemoryPlan, *, pre_load_mib: float) -> tuple[str, str]:
    """(where, error) of a launch with no room for its KV pool, as its release words it."""
    version, fraction = launch.version, launch.mem_fraction_static
    if plan.kv_mib <= 0 and at_least(version, "0.5.14"):
        avail = pre_load_mib - plan.weights_mib
        error = logfmt.no_room_for_kv(version, fraction, avail, pre_load_mib)
        return logfmt.kv_frames(version, budget=True), error
    return logfmt.kv_frames(version, budget=False), logfmt.not_enough_memory(version, fraction)


def _quit_parent(job: ChildJob) -> NoReturn:
    """SIGQUIT the parent, as a failed SGLang scheduler does, and wait to be killed."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(job.parent_pid, signal.SIGQUIT)
    time.sleep(10)  # the parent kills the tree long before this
    os._exit(1)


def _hang() -> None:
    while True:
        time.sleep(3600)


def _spawn_orphan(job: ChildJob) -> None:
    gpus = ",".join(str(g) for g in job.launch.used_gpus)
    subprocess.Popen(
        [sys.executable, "-m", "tuner.sim.holder", "--mib", str(ORPHAN_MIB), "--gpus", gpus],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def startup(job: ChildJob, mem: _Memory) -> dict[str, Any]:
    """Load, allocate, capture; returns facts for the parent or never returns (failure / hang)."""
    s, launch, plan, inject = job.scenario, job.launch, job.plan, job.inject
    context_mib = plan.overhead_mib / 2
    if inject.startup_delay_s:
        time.sleep(inject.startup_delay_s)
    if inject.orphan_child:
        _spawn_orphan(job)
    if len(launch.visible_gpus) < launch.tp_size:
        _fail(
            job,
            "device",
            "RuntimeError: CUDA error: invalid device ordinal\n"
            "CUDA kernel errors might be asynchronously reported at some other API call, so the "
            "stacktrace below might be incorrect.",
        )
    mem.set(context_mib, "device")
    log.info(logfmt.load_begin(mem.avail_mib))
    if inject.hang_at == "load":
        _hang()
    t0 = time.monotonic()
    time.sleep(s.model.load_s)
    if not mem.real and context_mib + plan.weights_mib > plan.total_mib:
        _fail(job, "load", logfmt.cuda_oom(plan.weights_mib, plan.total_mib, mem.avail_mib, s.platform))
    mem.set(context_mib + plan.weights_mib, "load")
    log.info(
        logfmt.load_end(
            time.monotonic() - t0, s.model.architecture, s.model.dtype, mem.avail_mib, plan.weights_mib
        )
    )
    if not memory.enough_for_kv(s, plan):
        _fail(job, *_kv_error(launch, plan, pre_load_mib=plan.total_mib - context_mib))
    mem.set(plan.weights_mib + plan.kv_mib + plan.overhead_mib, "kv")
    log.info(
        logfmt.kv_allocated(launch, plan.kv_tokens, plan.kv_mib, memory.torch_kv_dtype(launch.kv_cache_dtype))
    )
    log.info(logfmt.pool_end(mem.avail_mib))
    if launch.behaviour == "unsupported":
        role = launch.failing_role
        backend = {"prefill": launch.prefill_backend, "decode": launch.decode_backend}.get(role or "")
        _fail(
            job,
            "capture" if launch.graphs else "forward",
            launch.unsupported_error or logfmt.no_kernel_for_device(s.platform),
            # the kernel fails inside the backend's own file, as a real traceback shows
            logfmt.attention_frames(backend, role, sparse=s.model.sparse_attention, capture=launch.graphs),
        )
    if launch.graphs:
        _capture(job, mem)
    elif inject.hang_at == "capture":
        _hang()
    return {"avail_mib": mem.avail_mib}


def _capture(job: ChildJob, mem: _Memory) -> None:
    """CUDA-graph capture: its log lines, its time, and its memory peak (an OOM past the GPU's total)."""
    s, launch, plan, inject = job.scenario, job.launch, job.plan, job.inject
    before = mem.avail_mib
    for line in logfmt.prefill_capture(launch, before):  # 0.5.17's breakable prefill graphs come first
        log.info(line)
    log.info(logfmt.capture_begin(launch, before))
    if inject.hang_at == "capture":
        _hang()
    t0 = time.monotonic()
    time.sleep(len(launch.captured_bs) * s.perf.capture_s_per_graph)
    peak = memory.capture_peak_mib(s, plan)
    if mem.real:
        mem.set(peak, "capture")
    elif peak > plan.total_mib:
        tried = memory.capture_workspace_mib(s, plan.max_captured_bs)
        mem.set(plan.total_mib - (peak - plan.total_mib) % 512, "capture")
        _fail(
            job,
            "capture",
            logfmt.capture_failed(
                launch.version,
                logfmt.cuda_oom(tried, plan.total_mib, mem.avail_mib, s.platform)[
                    len("torch.OutOfMemoryError: ") :
                ],
            ),
        )
    mem.set(plan.idle_used_mib, "capture")
    log.info(logfmt.capture_end(launch, time.monotonic() - t0, plan.graph_mib, mem.avail_mib))


def run_child(job: ChildJob, conn: Connection) -> None:
    """Entry point of the scheduler child process."""
    die_with_parent(job.parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher decides how the tree stops
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)
    mem = _Memory(job)
    facts = startup(job, mem)
    conn.send(("ready", facts))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            os._exit(0)
        kind = message[0]
        if kind == "peak":
            mem.set(max(mem.used_mib, float(message[1])), "forward")
        elif kind == "crash":
            log.error(message[1])
            _quit_parent(job)
        elif kind == "exit":
            mem.release()
            os._exit(0)
