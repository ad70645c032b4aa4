"""Is the client the bottleneck, or was it starved by other processes? (reference bench-metrics §9.3)

Three figures over the stage: the client's CPU time over wall time, the lag of a 10 ms sleep in
its event loop (p99), and, where Linux reports it (`/proc/<pid>/task/<tid>/schedstat`), how long
the loop's thread waited in the run queue (runnable, not running) against how long it ran.

- CPU share above `cpu_share` of a core: the client itself was busy, a client bottleneck.
- Lag above `loop_lag_p99_s` while the thread waited for a CPU a large share of its runnable
  time (or, without schedstat, while its CPU share was far from a core): other processes
  starved it. Past `noisy_lag_p99_s` the measurement is marked noisy, kept with a warning; below
  it, repeats agreed (benchmarks/noisy_mark.py: 120 runs on a busy 2-core machine, lag p99 up
  to 22 ms with 40-90% run-queue wait, output throughput within ±2.4% of the median), so the
  mark stays off rather than flag every run.
- Lag above the limit with neither: the loop blocked on its own work, a client bottleneck.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import threading
import time
from dataclasses import dataclass

import numpy as np

from tuner.bench.settings import SelfCheckSettings
from tuner.host import task_schedstat

LAG_PROBE_S = 0.010  # the probe sleeps this long and records how late it wakes
CLIENT_CORES = 1  # one process, one event loop: at most one core of useful work


class Judgement(str, enum.Enum):
    """What the self-check concludes about the stage."""

    TRUSTED = "trusted"
    CLIENT_BOUND = "client_bound"  # the client was the bottleneck: not a measurement of the server
    STARVED = "starved"  # other processes kept the client waiting for a CPU: noisy


@dataclass(frozen=True, kw_only=True, slots=True)
class SelfCheck:
    """What the client measured about itself over the stage."""

    cpu_share: float  # process CPU seconds / wall seconds
    loop_lag_p99_ms: float | None  # None when the probe never completed a sample
    run_queue_wait_share: float | None  # wait / (wait + run) of the loop's thread; None: not reported
    judgement: Judgement

    @property
    def client_bound(self) -> bool:
        return self.judgement is Judgement.CLIENT_BOUND

    @property
    def starved(self) -> bool:
        return self.judgement is Judgement.STARVED


def judge(
    cpu_share: float,
    lag_p99_ms: float | None,
    *,
    wait_share: float | None = None,
    samples: int,
    limits: SelfCheckSettings,
    cores: int = CLIENT_CORES,
) -> Judgement:
    """Client-bound, starved or trusted, from the stage's figures (see the module's docstring)."""
    if samples < limits.min_samples:
        return Judgement.TRUSTED  # a p99 of a few samples is one stray one; CPU share is start-up cost
    if cpu_share > limits.cpu_share * cores:
        return Judgement.CLIENT_BOUND
    if lag_p99_ms is None or lag_p99_ms <= limits.loop_lag_p99_s * 1000.0:
        return Judgement.TRUSTED
    if wait_share is not None:
        starved = wait_share > limits.starved_wait_share
    else:
        starved = cpu_share < limits.cpu_share * cores / 2  # lagging far from a core: not running
    if not starved:
        return Judgement.CLIENT_BOUND
    # other processes delayed the client: noisy only past the lag at which a repeat stopped agreeing
    return Judgement.STARVED if lag_p99_ms > limits.noisy_lag_p99_s * 1000.0 else Judgement.TRUSTED


def read_schedstat(tid: int) -> tuple[int, int] | None:
    """(ns on a CPU, ns waiting in the run queue) of one thread, or None where Linux does not say."""
    return task_schedstat("self", tid)


class LoopLagProbe:
    """A task that sleeps 10 ms in a loop and records its overshoot; start() / stop() → SelfCheck."""

    def __init__(self, limits: SelfCheckSettings | None = None) -> None:
        self.limits = limits or SelfCheckSettings()
        self._lags_s: list[float] = []
        self._task: asyncio.Task[None] | None = None
        self._wall0 = 0.0
        self._cpu0 = 0.0
        self._tid = threading.get_native_id()
        self._sched0: tuple[int, int] | None = None

    def start(self) -> None:
        self._wall0 = time.perf_counter()
        self._cpu0 = time.process_time()
        self._tid = threading.get_native_id()
        self._sched0 = read_schedstat(self._tid)
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        clock = time.perf_counter
        while True:
            t = clock()
            await asyncio.sleep(LAG_PROBE_S)
            self._lags_s.append(max(0.0, clock() - t - LAG_PROBE_S))

    async def stop(self) -> SelfCheck:
        wall = time.perf_counter() - self._wall0
        cpu = time.process_time() - self._cpu0
        sched1 = read_schedstat(self._tid)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        share = cpu / wall if wall > 0 else 0.0
        lag = float(np.percentile(np.asarray(self._lags_s) * 1000.0, 99)) if self._lags_s else None
        wait_share = None
        if self._sched0 is not None and sched1 is not None:
            run_ns, wait_ns = sched1[0] - self._sched0[0], sched1[1] - self._sched0[1]
            if run_ns + wait_ns > 0:
                wait_share = wait_ns / (run_ns + wait_ns)
        verdict = judge(share, lag, wait_share=wait_share, samples=len(self._lags_s), limits=self.limits)
        return SelfCheck(
            cpu_share=share, loop_lag_p99_ms=lag, run_queue_wait_share=wait_share, judgement=verdict
        )
