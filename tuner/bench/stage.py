"""The live state of one benchmark run: requests in flight, the watchdog, the abort reason.

The watchdog enforces per-request first-content and idle limits and the stage deadline, ends the
stage as a hang when requests are open and none progressed for twice the per-request limit (idle,
or first byte before any content flowed: a frozen server), and
polls `server_died` and `stop` (a stop request) every 20 ms: when one fires, every request still
queued or in flight is cancelled with a reason, so it is recorded as a failed request of that class.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Coroutine
from time import perf_counter
from typing import Any, TypeVar

from tuner.bench.client import Flight, RequestSender, uncancel
from tuner.bench.settings import RequestTimeouts
from tuner.bench.types import ErrorClass, OutputSource, RequestRecord
from tuner.bench.workload import RequestSpec

WATCH_TICK_S = 0.02  # server_died and deadline are noticed within this
TIMEOUT_EVERY_TICKS = 5  # per-request limits are checked every 100 ms
T = TypeVar("T")

log = logging.getLogger(__name__)


class Aborted(Exception):
    """The stage was ended (server died or deadline); the reason is on the stage."""


class Stage:
    """The mutable state of one run: in-flight requests, the abort reason, the watchdog."""

    def __init__(
        self,
        timeouts: RequestTimeouts,
        server_died: threading.Event | None,
        stop: Callable[[], bool] | None = None,
    ) -> None:
        self.timeouts = timeouts
        self.server_died = server_died
        self.stop = stop  # True once a stop was asked: everything in flight is cancelled
        self.deadline = perf_counter() + timeouts.stage_deadline_s
        self.reason: ErrorClass | None = None
        self.aborted = asyncio.Event()
        self.flights: dict[asyncio.Task[RequestRecord], Flight] = {}
        self.progress_at = perf_counter()  # the last request that succeeded (bytes count via flights)

    def abort(self, reason: ErrorClass) -> None:
        if self.reason is not None:
            return
        log.warning("benchmark stage ended early: %s", reason.value)
        self.reason = reason
        self.aborted.set()
        for task, flight in list(self.flights.items()):
            if flight.reason is None:
                flight.reason = reason
            task.cancel()

    def check(self) -> None:
        if self.reason is None:
            if self.server_died is not None and self.server_died.is_set():
                self.abort(ErrorClass.SERVER_DIED)
            elif self.stop is not None and self.stop():
                self.abort(ErrorClass.INTERRUPTED)
            elif perf_counter() >= self.deadline:
                self.abort(ErrorClass.DEADLINE)
        if self.reason is not None:
            raise Aborted

    async def watch(self) -> None:
        tick = 0
        first_s, idle_s = self.timeouts.first_byte_s, self.timeouts.idle_read_s
        while True:
            await asyncio.sleep(WATCH_TICK_S)
            with contextlib.suppress(Aborted):
                self.check()
            tick += 1
            if tick % TIMEOUT_EVERY_TICKS:
                continue
            now = perf_counter()
            if self._stalled(now, first_s, idle_s):
                self.abort(ErrorClass.HANG)
                continue
            for task, f in list(self.flights.items()):
                if f.t_sent is None or f.reason is not None:
                    continue
                if not f.has_content and now - f.t_sent > first_s:
                    f.reason = ErrorClass.FIRST_BYTE_TIMEOUT
                    task.cancel()
                elif f.has_content and now - f.t_activity > idle_s:
                    f.reason = ErrorClass.IDLE_TIMEOUT
                    task.cancel()

    def _stalled(self, now: float, first_s: float, idle_s: float) -> bool:
        """Requests are open and none progressed (a byte, a success) for twice the per-request limit
        (idle once content flowed, first byte before): the server froze. Twice, so that one stalled
        request is that request's timeout, not the stage's."""
        open_flights = [f for f in self.flights.values() if f.t_sent is not None]
        if not open_flights:
            return False
        streaming = [f.t_activity for f in open_flights if f.has_content]
        limit = 2 * (idle_s if streaming else first_s)
        return now - max([self.progress_at, *streaming]) > limit

    async def race(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await coro unless the stage is aborted first (then cancel it and raise Aborted).

        Aborted before it starts (the server died already), the coroutine is closed unrun: a coroutine
        object never awaited would be reported as such when it is collected.
        """
        try:
            self.check()
        except Aborted:
            coro.close()
            raise
        task = asyncio.ensure_future(coro)
        waiter = asyncio.ensure_future(self.aborted.wait())
        try:
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            raise Aborted
        return task.result()

    async def sleep(self, seconds: float) -> None:
        await self.race(asyncio.sleep(seconds))

    async def run_requests(
        self,
        sender: RequestSender,
        specs: tuple[RequestSpec, ...],
        *,
        label: str,
        concurrency: int | None,
        offsets_s: Any = None,
        prepared: list[bytes] | None = None,
        on_done: Callable[[], None] | None = None,
    ) -> list[RequestRecord]:
        """Send specs bounded by `concurrency`, at `offsets_s` after now if given; one record each."""
        sem = asyncio.Semaphore(concurrency) if concurrency is not None else None
        spawned: list[tuple[asyncio.Task[RequestRecord], RequestSpec, float]] = []

        def spawn(spec: RequestSpec, request: bytes | None) -> None:
            flight = Flight()
            t_q = perf_counter()
            task = asyncio.ensure_future(self._one(sender, spec, request, flight, label, t_q, sem))
            flight.task = task
            self.flights[task] = flight
            task.add_done_callback(self._forget)
            if on_done is not None:
                task.add_done_callback(lambda _t: on_done())
            spawned.append((task, spec, t_q))

        start = perf_counter()
        try:
            for i, spec in enumerate(specs):
                if offsets_s is not None:
                    delay = start + float(offsets_s[i]) - perf_counter()
                    if delay > 0:
                        await self.sleep(delay)
                if self.reason is not None:
                    break
                spawn(spec, prepared[i] if prepared is not None else None)
                if offsets_s is None and (concurrency is None or i < concurrency):
                    # This task sends at once: let the loop poll the sockets before the next
                    # start. Run back to back, a wave of C starts (≈ 50 µs of CPU each) holds
                    # back every response that arrives meanwhile, and that wait lands in TTFT
                    # (benchmarks/bench_client.py, C=256: TTFT p99 +16 ms without, +8 with).
                    await asyncio.sleep(0)
        except Aborted:
            pass
        results = await asyncio.gather(*(t for t, _, _ in spawned), return_exceptions=True)
        records = []
        for (_, spec, t_q), res in zip(spawned, results, strict=True):
            if isinstance(res, RequestRecord):
                records.append(res)
            elif isinstance(res, asyncio.CancelledError):  # cancelled before it ever ran
                records.append(unsent(spec, label, t_q, self.reason or ErrorClass.CLIENT_ERROR))
            else:
                raise res  # a bug in our own code: keep the traceback
        return records

    def _forget(self, task: asyncio.Task[RequestRecord]) -> None:
        self.flights.pop(task, None)
        if not task.cancelled() and task.exception() is None and task.result().success:
            self.progress_at = perf_counter()

    async def _one(
        self,
        sender: RequestSender,
        spec: RequestSpec,
        request: bytes | None,
        flight: Flight,
        label: str,
        t_q: float,
        sem: asyncio.Semaphore | None,
    ) -> RequestRecord:
        if sem is not None:
            try:
                await sem.acquire()
            except asyncio.CancelledError:
                if flight.reason is None:
                    raise
                uncancel()
                return unsent(spec, label, t_q, flight.reason)
        try:
            return await sender.send(spec, flight, label=label, t_queued=t_q, request=request)
        finally:
            if sem is not None:
                sem.release()


def unsent(spec: RequestSpec, label: str, t_q: float, reason: ErrorClass) -> RequestRecord:
    return RequestRecord(
        load_point=label,
        index=spec.index,
        input_tokens_declared=spec.input_tokens,
        input_tokens_server=None,
        output_tokens_requested=spec.output_tokens,
        output_tokens=0,
        output_source=OutputSource.EVENTS,
        success=False,
        error=reason,
        error_text=f"never sent: {reason.value}",
        t_queued_s=t_q,
        t_sent_s=None,
    )
