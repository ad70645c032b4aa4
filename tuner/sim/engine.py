"""The central scheduler loop: chunked prefill, then one decode step for the whole running batch.

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
from typing import Any

from tuner.sim import logfmt, memory, perf
from tuner.sim.memory import MemoryPlan
from tuner.sim.resolve import Launch
from tuner.sim.scenario import Scenario
from tuner.sim.text import GARBAGE_TOKEN, Answer

log = logging.getLogger(__name__)

_ids = itertools.count(1)


@dataclass(eq=False, kw_only=True, slots=True)
class Request:
    """One request inside the scheduler (mutable, engine-private state)."""

    prompt_tokens: int
    answer: Answer
    rid: str = field(default_factory=lambda: f"{next(_ids):032x}")
    queue: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)  # see DONE below
    arrival_s: float = field(default_factory=time.monotonic)
    prefilled: int = 0
    generated: int = 0
    cancelled: bool = False
    finished: bool = False

    @property
    def reserve_tokens(self) -> int:
        return self.prompt_tokens + len(self.answer.pieces)


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
    ) -> None:
        self._s = scenario
        self._l = launch
        self._plan = plan
        self._rng = random.Random(seed)
        sigma = scenario.perf.noise_pct / 100
        self._run_factor = max(0.9, min(1.1, self._rng.gauss(1.0, sigma))) if sigma else 1.0
        self._on_crash = on_crash
        self._on_peak = on_peak
        self._crash_after = crash_after_requests
        self.capacity_tokens = plan.kv_tokens
        self.max_running = launch.max_running_requests or min(
            max(int(plan.kv_tokens / scenario.model.context_len * 512), 2048), 4096
        )
        self.waiting: deque[Request] = deque()
        self.prefilling: list[Request] = []
        self.running: list[Request] = []
        self.reserved_tokens = 0
        self.used_tokens = 0
        self.generated_total = 0
        self.prompt_total = 0
        self.finished_requests = 0
        self.last_gen_tok_s = 0.0
        self.peak_used_mib = plan.idle_used_mib
        self.dead = False
        self._wake = asyncio.Event()
        self._decode_steps = 0
        self._log_t = time.monotonic()
        self._log_tokens = 0
        self._last_nan_step = -(10**9)
        self._step_graph = False

    @property
    def in_flight(self) -> int:
        return len(self.waiting) + len(self.prefilling) + len(self.running)

    def submit(self, request: Request) -> None:
        """Queue a request; tokens arrive on request.queue."""
        if self.dead:
            raise EngineError("scheduler is dead")
        self.waiting.append(request)
        self._wake.set()

    def cancel(self, request: Request) -> None:
        request.cancelled = True

    async def run(self) -> None:
        """The scheduler loop; returns when the scheduler dies."""
        loop = asyncio.get_running_loop()
        clock = loop.time()
        while not self.dead:
            self._drop_cancelled()
            self._admit()
            if not self.prefilling and not self.running:
                self._wake.clear()
                await self._wake.wait()
                clock = loop.time()
                continue
            if self.prefilling:
                dt, done, n_tokens, n_seq = self._prefill_step()
            else:
                dt, done, n_tokens, n_seq = self._decode_step(), [], 0, 0
            if self.dead:
                break
            clock = max(clock, loop.time() - 0.05) + dt * self._jitter()
            delay = clock - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            if n_tokens:
                self._finish_prefill(done, n_tokens, n_seq, dt)
            else:
                self._emit_decode()
        self._fail_all()

    def _jitter(self) -> float:
        return self._run_factor * (1 + self._rng.uniform(-0.005, 0.005))

    def _drop_cancelled(self) -> None:
        for group in (self.prefilling, self.running):
            for r in [r for r in group if r.cancelled]:
                group.remove(r)
                self._release(r)
        if any(r.cancelled for r in self.waiting):
            self.waiting = deque(r for r in self.waiting if not r.cancelled)

    def _admit(self) -> None:
        while self.waiting and len(self.prefilling) + len(self.running) < self.max_running:
            head = self.waiting[0]
            if self.reserved_tokens + head.reserve_tokens > self.capacity_tokens and (
                self.prefilling or self.running
            ):
                break
            self.waiting.popleft()
            self.reserved_tokens += head.reserve_tokens
            self.prefilling.append(head)

    def _release(self, r: Request) -> None:
        self.reserved_tokens -= r.reserve_tokens
        self.used_tokens -= r.prefilled + r.generated

    def _check_memory(self, *, decode_batch: int, graph_mode: bool, prefill_tokens: int) -> None:
        act = memory.activation_mib(
            self._s, decode_batch=decode_batch, graph_mode=graph_mode, prefill_tokens=prefill_tokens
        )
        used = self._plan.idle_used_mib + act
        if used > self._plan.total_mib:
            free = self._plan.total_mib - self.peak_used_mib
            self._die(logfmt.scheduler_exception("forward", logfmt.cuda_oom(act, self._plan.total_mib, free)))
        elif used > self.peak_used_mib + 1:
            self.peak_used_mib = used
            self._on_peak(used)

    def _prefill_step(self) -> tuple[float, list[Request], int, int]:
        budget = self._l.chunked_prefill_size if self._l.chunked_prefill_size > 0 else 1 << 62
        taken, done = 0, []
        for r in self.prefilling:
            if taken >= budget:
                break
            n = min(r.prompt_tokens - r.prefilled, budget - taken)
            r.prefilled += n
            taken += n
            if r.prefilled >= r.prompt_tokens:
                done.append(r)
        self._check_memory(decode_batch=0, graph_mode=False, prefill_tokens=taken)
        self.used_tokens += taken
        self.prompt_total += taken
        return perf.prefill_s(self._s.perf, taken), done, max(taken, 1), len(done)

    def _finish_prefill(self, done: list[Request], n_tokens: int, n_seq: int, dt: float) -> None:
        for r in done:
            self.prefilling.remove(r)
            if r.cancelled:
                self._release(r)
                continue
            self.running.append(r)
            self._emit(r, garbage=self._l.behaviour == "garbage")
        log.info(
            logfmt.prefill_batch(
                self._l.version,
                n_seq,
                n_tokens,
                self.used_tokens / max(1, self.capacity_tokens),
                len(self.running),
                len(self.waiting),
                n_tokens / dt if dt > 0 else 0.0,
            )
        )

    def _decode_step(self) -> float:
        batch = len(self.running)
        graph = perf.padded_bs(batch, self._l.captured_bs) is not None
        self._check_memory(decode_batch=batch, graph_mode=graph, prefill_tokens=0)
        self._step_graph = graph
        return perf.decode_step_ms(self._s.perf, batch, self._l.captured_bs) / 1000

    def _emit_decode(self) -> None:
        batch = len(self.running)
        behaviour = self._l.behaviour
        garbage = behaviour == "garbage" or (behaviour == "nan_batched" and batch > 1)
        if garbage and self._l.enable_nan_detection and self._decode_steps - self._last_nan_step >= 40:
            self._last_nan_step = self._decode_steps
            log.warning(logfmt.NAN)
        for r in list(self.running):
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
                    self._step_graph,
                    self.last_gen_tok_s,
                    len(self.waiting),
                )
            )

    def _emit(self, r: Request, *, garbage: bool) -> None:
        piece = r.answer.pieces[r.generated] if r.generated < len(r.answer.pieces) else ""
        if garbage:
            piece = GARBAGE_TOKEN
        r.generated += 1
        self.used_tokens += 1
        self.generated_total += 1
        self._log_tokens += 1
        r.queue.put_nowait((piece, garbage))
        if r.generated >= len(r.answer.pieces):
            r.finished = True
            r.queue.put_nowait(DONE)
            self.running.remove(r)
            self._release(r)
            self.finished_requests += 1
            if self._crash_after is not None and self.finished_requests >= self._crash_after:
                self._die(
                    logfmt.scheduler_exception(
                        "forward", "RuntimeError: CUDA error: an illegal memory access was encountered"
                    )
                )

    def _die(self, text: str) -> None:
        if not self.dead:
            self.dead = True
            self._on_crash(text)

    def kill(self) -> None:
        """Stop the loop from outside (the scheduler process died)."""
        self.dead = True
        self._wake.set()

    def _fail_all(self) -> None:
        for r in [*self.waiting, *self.prefilling, *self.running]:
            r.queue.put_nowait(EngineError("scheduler is dead"))
        self.waiting.clear()
        self.prefilling.clear()
        self.running.clear()
