"""Is the client the bottleneck? CPU share and event-loop lag (reference bench-metrics §9.3)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

import numpy as np

LAG_PROBE_S = 0.010  # the probe sleeps this long and records how late it wakes
CPU_LIMIT_SHARE = 0.7  # of the cores the client uses
LAG_LIMIT_MS = 5.0
CLIENT_CORES = 1  # one process, one event loop: at most one core of useful work
MIN_LAG_SAMPLES = 50  # ~0.5 s: on shorter stages a p99 is one stray sample, and CPU share is start-up cost


@dataclass(frozen=True, kw_only=True, slots=True)
class SelfCheck:
    """What the client measured about itself over the stage."""

    cpu_share: float  # process CPU seconds / wall seconds
    loop_lag_p99_ms: float | None  # None when the probe never completed a sample
    client_bound: bool


def judge(
    cpu_share: float, lag_p99_ms: float | None, *, cores: int = CLIENT_CORES, samples: int = MIN_LAG_SAMPLES
) -> bool:
    """client_bound ⇔ cpu_share > 0.7 × cores or lag p99 > 5 ms, judged over at least ~0.5 s (50 samples)."""
    if samples < MIN_LAG_SAMPLES:
        return False
    return cpu_share > CPU_LIMIT_SHARE * cores or (lag_p99_ms is not None and lag_p99_ms > LAG_LIMIT_MS)


class LoopLagProbe:
    """A task that sleeps 10 ms in a loop and records its overshoot; start() / stop() → SelfCheck."""

    def __init__(self) -> None:
        self._lags_s: list[float] = []
        self._task: asyncio.Task[None] | None = None
        self._wall0 = 0.0
        self._cpu0 = 0.0

    def start(self) -> None:
        self._wall0 = time.perf_counter()
        self._cpu0 = time.process_time()
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
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        share = cpu / wall if wall > 0 else 0.0
        lag = float(np.percentile(np.asarray(self._lags_s) * 1000.0, 99)) if self._lags_s else None
        bound = judge(share, lag, samples=len(self._lags_s))
        return SelfCheck(cpu_share=share, loop_lag_p99_ms=lag, client_bound=bound)
