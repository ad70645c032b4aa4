"""The live scheduler loop: runs sched.Scheduler's steps in real time and streams their tokens.

Step times come from the scenario's performance model; every token is handed
to its request's queue the moment its step ends, so clients measure the model.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from tuner.sim import logfmt, memory
from tuner.sim.memory import MemoryPlan
from tuner.sim.resolve import Launch
from tuner.sim.scenario import Scenario
from tuner.sim.sched import WAKE_S, Scheduler, Seq, Step, default_max_running
from tuner.sim.text import GARBAGE_TOKEN, Answer

log = logging.getLogger(__name__)

_ids = itertools.count(1)
# A loop that falls behind its step clock (CPU busy with HTTP) runs the next steps back to back
# until it is on time again, up to this much; the pace stays the model's on average.
CATCH_UP_S = 0.5
# An idle scheduler waits WAKE_S after an arrival, and again while a burst keeps landing, up to this
# long: this process parses requests slower than SGLang's tokenizer manager hands them over, and a
# burst SGLang would batch at once must not trickle into small first batches (the oracle, in virtual
# time, sees such a burst land at once too).
SETTLE_MAX_S = 0.5
BURST_ARRIVALS = 2  # arrivals within one WAKE_S that mark a burst still landing


@dataclass(eq=False, kw_only=True, slots=True)
class Request(Seq):
    """One request inside the scheduler: its scheduling state plus what the HTTP side waits on."""

    answer: Answer
    rid: str = field(default_factory=lambda: f"{next(_ids):032x}")
    queue: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)  # see DONE below
    arrival_s: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.max_new = len(self.answer.pieces)


# Items put on Request.queue: (piece, garbage) per token, then DONE or an EngineError.
DONE = object()


class EngineError(Exception):
    """The scheduler died; the request cannot finish."""


class Engine:
    """Continuous batching against the scenario's clock."""

    def __init__(
        self,
        *,
        scenario: Scenario,
        launch: Launch,
        plan: MemoryPlan,
        seed: int,
        on_crash: Callable[[str], None],
        on_peak: Callable[[float], None],
        crash_after_requests: int | None = None,
        real_memory: bool = False,
    ) -> None:
        self._s = scenario
        self._l = launch
        self._plan = plan
        self._rng = random.Random(seed)
        self._sigma = scenario.perf.noise_pct / 100
        self._run_factor = max(0.9, min(1.1, self._rng.gauss(1.0, self._sigma))) if self._sigma else 1.0
        self._on_crash = on_crash
        self._on_peak = on_peak
        self._crash_after = crash_after_requests
        self._real_memory = real_memory  # peaks go to the scheduler child, whose device says OOM or not
        self.sched = Scheduler(
            perf=scenario.perf,
            launch=launch,
            capacity_tokens=plan.kv_tokens,
            max_running=default_max_running(launch, plan.kv_tokens, scenario.model.context_len),
        )
        self.finished_requests = 0
        self.last_gen_tok_s = 0.0
        self.peak_used_mib = plan.idle_used_mib
        self.dead = False
        self._wake = asyncio.Event()
        self._decode_steps = 0
        self._log_t = time.monotonic()
        self._log_tokens = 0
        self._last_nan_step = -(10**9)

    # the scheduler's figures, for the endpoints and log lines
    @property
    def capacity_tokens(self) -> int:
        return self.sched.capacity_tokens

    @property
    def max_running(self) -> int:
        return self.sched.max_running

    @property
    def waiting(self) -> deque[Seq]:
        return self.sched.waiting

    @property
    def prefilling(self) -> list[Seq]:
        return self.sched.prefilling

    @property
    def running(self) -> list[Seq]:
        return self.sched.running

    @property
    def used_tokens(self) -> int:
        return self.sched.used_tokens

    @property
    def prompt_total(self) -> int:
        return self.sched.prompt_total

    @property
    def generated_total(self) -> int:
        return self.sched.generated_total

    @property
    def retracted_total(self) -> int:
        return self.sched.retracted_total

    @property
    def in_flight(self) -> int:
        return self.sched.in_flight

    def submit(self, request: Request) -> None:
        """Queue a request; tokens arrive on request.queue."""
        if self.dead:
            raise EngineError("scheduler is dead")
        self.sched.submit(request)
        self._wake.set()

    def cancel(self, request: Request) -> None:
        request.cancelled = True

    async def run(self) -> None:
        """The scheduler loop; returns when the scheduler dies."""
        loop = asyncio.get_running_loop()
        clock = loop.time()
        while not self.dead:
            step = self.sched.plan()
            if step is None:
                self._wake.clear()
                await self._wake.wait()
                await self._settle(loop)  # let a burst of arrivals land, as SGLang drains its socket
                clock = loop.time()
                continue
            if step.retracted:
                log.warning(logfmt.retract(step.retracted, step.tokens_gained))
            self._check_memory(step)
            if self.dead:
                break
            clock = max(clock, loop.time() - CATCH_UP_S) + step.dt_s * self._jitter()
            delay = clock - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            if step.kind == "prefill":
                self._finish_prefill(step)
            else:
                self._finish_decode(step)
        self._fail_all()

    async def _settle(self, loop: asyncio.AbstractEventLoop) -> None:
        """Wait WAKE_S after the first arrival, and WAKE_S more while a burst lands (2 or more arrivals
        in the last WAKE_S: faster than any steady load the benchmarks offer at a point's start)."""
        start = loop.time()
        seen = len(self.waiting)
        await asyncio.sleep(WAKE_S)
        while len(self.waiting) - seen >= BURST_ARRIVALS and loop.time() - start < SETTLE_MAX_S:
            seen = len(self.waiting)
            await asyncio.sleep(WAKE_S)

    def _jitter(self) -> float:
        if not self._sigma:
            return 1.0
        return self._run_factor * (1 + self._rng.uniform(-0.005, 0.005))

    def _check_memory(self, step: Step) -> None:
        act = memory.activation_mib(
            self._s, decode_batch=step.batch, graph_mode=step.graph, prefill_tokens=step.prefill_tokens
        )
        used = self._plan.idle_used_mib + act
        if used > self._plan.total_mib and not self._real_memory:
            free = self._plan.total_mib - self.peak_used_mib
            oom = logfmt.cuda_oom(act, self._plan.total_mib, free, self._s.platform)
            self._die(logfmt.scheduler_exception("forward", oom))
        elif used > self.peak_used_mib + 1:
            self.peak_used_mib = used
            self._on_peak(used)

    def _finish_prefill(self, step: Step) -> None:
        garbage = self._l.behaviour == "garbage"
        decoding = len(self.running)  # SGLang logs the requests running beside the new ones, not with them
        for r in self.sched.commit(step):
            self._emit(r, garbage=garbage)
        dt = step.dt_s
        log.info(
            logfmt.prefill_batch(
                self._l.version,
                len(step.done),
                step.prefill_tokens,
                self.used_tokens / max(1, self.capacity_tokens),
                decoding,
                len(self.waiting),
                step.prefill_tokens / dt if dt > 0 else 0.0,
            )
        )

    def _finish_decode(self, step: Step) -> None:
        garbage = self._l.nan_at(step.batch, step.graph)
        if garbage and self._l.enable_nan_detection and self._decode_steps - self._last_nan_step >= 40:
            self._last_nan_step = self._decode_steps
            log.warning(logfmt.NAN)
        for r in self.sched.commit(step):
            self._emit(r, garbage=garbage)
        self._decode_steps += 1
        if self._decode_steps % max(1, self._l.decode_log_interval) == 0:
            now = time.monotonic()
            self.last_gen_tok_s = self._log_tokens / max(1e-9, now - self._log_t)
            self._log_t, self._log_tokens = now, 0
            log.info(
                logfmt.decode_batch(
                    len(self.running),
                    self.used_tokens,
                    self.used_tokens / max(1, self.capacity_tokens),
                    step.graph,
                    self.last_gen_tok_s,
                    len(self.waiting),
                )
            )

    def _emit(self, seq: Seq, *, garbage: bool) -> None:
        r = cast(Request, seq)
        index = r.generated - 1
        piece = GARBAGE_TOKEN if garbage else (r.answer.pieces[index] if index < len(r.answer.pieces) else "")
        self._log_tokens += 1
        r.queue.put_nowait((piece, garbage))
        if r.finished:
            r.queue.put_nowait(DONE)
            self.finished_requests += 1
            if self._crash_after is not None and self.finished_requests >= self._crash_after:
                self._die(logfmt.scheduler_exception("forward", logfmt.device_fault(self._s.platform)))

    def _die(self, text: str) -> None:
        if not self.dead:
            self.dead = True
            self._on_crash(text)

    def kill(self) -> None:
        """Stop the loop from outside (the scheduler process died)."""
        self.dead = True
        self._wake.set()

    def _fail_all(self) -> None:
        for seq in [*self.waiting, *self.prefilling, *self.running]:
            cast(Request, seq).queue.put_nowait(EngineError("scheduler is dead"))
        self.waiting.clear()
        self.prefilling.clear()
        self.running.clear()
