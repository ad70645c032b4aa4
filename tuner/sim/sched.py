"""Pure continuous-batching scheduler: KV-bounded admission, chunked prefill, decode with retraction.

The same state machine runs inside the live server (engine.Engine drives it in
real time) and inside the oracle (oracle.py drives it in virtual time), so the
oracle's figures are the server's figures without the clock.

    admission  the waiting queue's head joins while running + prefilling < max_running and
               used + Σ(active: left to prefill + ⌊left to generate × ratio⌋)
                    + head's (to prefill + ⌊left to generate × ratio⌋ + 1) <= max_total_num_tokens
               (an empty server always admits its head; SGLang's PrefillAdder, simplified)
    ratio      new_token_ratio: starts at 0.7, falls by (0.7 − 0.098)/600 per decode step to 0.098;
               after a retraction (Σ generated + 20 × n) / Σ max_new over the n requests left (≤ 1)
    prefill    prefilling requests have priority; one chunk of ≤ chunked_prefill_size tokens per
               step; a request whose prompt is done emits its first token and starts decoding
    decode     one token for every running request; when fewer free slots than running
               requests remain, retract (fewest generated tokens first, then longest prompt)
               until free >= 20 × running: their KV is freed, they go back to the queue's front
               and are prefilled again (prompt + tokens generated so far)
    idle       the ratio goes back to 0.7; the first step starts WAKE_S after the first arrival
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from tuner.sim import perf
from tuner.sim.resolve import Launch
from tuner.sim.scenario import PerfSpec

RATIO_INIT = 0.7
RATIO_MIN = 0.098  # SGLang: init x min_new_token_ratio factor 0.14
RATIO_DECAY = (RATIO_INIT - RATIO_MIN) / 600
RETRACT_STEPS = 20  # SGLang's retract_decode_steps
WAKE_S = 0.015  # an idle scheduler starts its first step this long after a request arrives (tokenizer + IPC)


@dataclass(eq=False, kw_only=True, slots=True)
class Seq:
    """A request as the scheduler sees it (mutable)."""

    prompt_tokens: int
    max_new: int = 0  # tokens to generate (the answer length)
    order: int = 0  # arrival order; retracted requests go back in this order
    generated: int = 0
    kv_tokens: int = 0  # slots this request holds in the KV pool
    to_prefill: int = 0  # tokens left to prefill in the current admission
    retractions: int = 0
    cancelled: bool = False
    finished: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class Step:
    """One scheduler step as planned: what runs and how long it takes (before noise)."""

    kind: str  # "prefill" | "decode"
    dt_s: float  # duration of one step
    repeat: int = 1  # identical decode steps in a row (the oracle's fast-forward; the server uses 1)
    batch: int = 0  # decode: running requests
    graph: bool = False  # decode: replayed from a captured graph
    prefill_tokens: int = 0
    done: tuple[Seq, ...] = ()  # prefill: requests whose prompt completes with this step
    retracted: int = 0
    tokens_gained: int = 0


@dataclass(eq=False, kw_only=True, slots=True)
class Scheduler:
    """Waiting queue, prefilling and running requests over one KV pool."""

    perf: PerfSpec
    launch: Launch
    capacity_tokens: int
    max_running: int
    waiting: deque[Seq] = field(default_factory=deque)
    prefilling: list[Seq] = field(default_factory=list)
    running: list[Seq] = field(default_factory=list)
    used_tokens: int = 0
    ratio: float = RATIO_INIT
    prompt_total: int = 0
    generated_total: int = 0
    retracted_total: int = 0
    _orders: int = 0

    @property
    def in_flight(self) -> int:
        return len(self.waiting) + len(self.prefilling) + len(self.running)

    def submit(self, seq: Seq) -> None:
        """Queue a new request."""
        self._orders += 1
        seq.order = self._orders
        seq.to_prefill = seq.prompt_tokens
        self.waiting.append(seq)

    def plan(self, max_repeat: int = 1) -> Step | None:
        """Drop cancelled requests, admit, and plan the next step (None: nothing to do)."""
        self._drop_cancelled()
        self._admit()
        if self.prefilling:
            return self._plan_prefill()
        if self.running:
            return self._plan_decode(max_repeat)
        self.ratio = RATIO_INIT  # SGLang re-initialises the estimate when idle
        return None

    def commit(self, step: Step) -> list[Seq]:
        """The step has ended: hand out its tokens; returns the requests that got one (in order)."""
        if step.kind == "prefill":
            out = []
            for seq in step.done:
                self.prefilling.remove(seq)
                self.running.append(seq)
                self._token(seq, 1)
                out.append(seq)
            self._reap()
            return out
        out = list(self.running)
        for seq in out:
            self._token(seq, step.repeat)
        self._reap()
        return out

    # ---------------------------------------------------------------- internals

    def _token(self, seq: Seq, n: int) -> None:
        seq.generated += n
        seq.kv_tokens += n
        self.used_tokens += n
        self.generated_total += n
        if seq.generated >= seq.max_new:
            seq.finished = True

    def _reap(self) -> None:
        if any(s.finished for s in self.running):
            for seq in [s for s in self.running if s.finished]:
                self.running.remove(seq)
                self._free(seq)

    def _free(self, seq: Seq) -> None:
        self.used_tokens -= seq.kv_tokens
        seq.kv_tokens = 0

    def _drop_cancelled(self) -> None:
        for group in (self.prefilling, self.running):
            for seq in [s for s in group if s.cancelled]:
                group.remove(seq)
                self._free(seq)
        if any(s.cancelled for s in self.waiting):
            self.waiting = deque(s for s in self.waiting if not s.cancelled)

    def _need(self, seq: Seq) -> int:
        return seq.to_prefill + int((seq.max_new - seq.generated) * self.ratio)

    def _admit(self) -> None:
        active = len(self.prefilling) + len(self.running)
        if not self.waiting or active >= self.max_running:
            return
        reserved = (
            self.used_tokens
            + sum(self._need(s) for s in self.prefilling)
            + sum(self._need(s) for s in self.running)
        )
        while self.waiting and active < self.max_running:
            head = self.waiting[0]
            need = self._need(head) + 1
            if active and reserved + need > self.capacity_tokens:
                break
            self.waiting.popleft()
            self.prefilling.append(head)
            reserved += need
            active += 1

    def _plan_prefill(self) -> Step:
        chunk = self.launch.chunked_prefill_size
        budget = chunk if chunk > 0 else 1 << 62
        taken, done = 0, []
        for seq in self.prefilling:
            if taken >= budget:
                break
            n = min(seq.to_prefill, budget - taken)
            seq.to_prefill -= n
            seq.kv_tokens += n
            taken += n
            if seq.to_prefill == 0:
                done.append(seq)
        self.used_tokens += taken
        self.prompt_total += taken
        dt = perf.prefill_s(self.perf, taken) * self.launch.prefill_factor
        return Step(kind="prefill", dt_s=dt, prefill_tokens=taken, done=tuple(done))

    def _plan_decode(self, max_repeat: int) -> Step:
        retracted = gained = 0
        if self.capacity_tokens - self.used_tokens < len(self.running):
            retracted, gained = self._retract()
        batch = len(self.running)
        captured = self.launch.captured_bs
        graph = perf.padded_bs(batch, captured) is not None
        dt = perf.decode_step_ms(self.perf, batch, captured) * self.launch.decode_factor_at(batch) / 1000
        repeat = 1
        if max_repeat > 1 and retracted == 0 and (not self.waiting or batch >= self.max_running):
            left = min(s.max_new - s.generated for s in self.running)
            room = (self.capacity_tokens - self.used_tokens) // batch
            repeat = max(1, min(max_repeat, left, room))
        self.ratio = max(RATIO_MIN, self.ratio - RATIO_DECAY * repeat)
        return Step(
            kind="decode",
            dt_s=dt,
            repeat=repeat,
            batch=batch,
            graph=graph,
            retracted=retracted,
            tokens_gained=gained,
        )

    def _retract(self) -> tuple[int, int]:
        order = sorted(self.running, key=lambda s: (s.generated, -s.prompt_tokens), reverse=True)
        out: list[Seq] = []
        while len(order) > 1 and (
            not out or self.capacity_tokens - self.used_tokens < len(order) * RETRACT_STEPS
        ):
            seq = order.pop()
            out.append(seq)
            self.running.remove(seq)
        gained = sum(s.kv_tokens for s in out)
        for seq in out:
            self._free(seq)
            seq.to_prefill = seq.prompt_tokens + seq.generated
            seq.retractions += 1
        self.waiting.extendleft(sorted(out, key=lambda s: s.order, reverse=True))
        self.retracted_total += len(out)
        left = self.running
        max_new = sum(s.max_new for s in left)
        if max_new:
            self.ratio = min(1.0, (sum(s.generated for s in left) + RETRACT_STEPS * len(left)) / max_new)
        return len(out), gained


def default_max_running(launch: Launch, kv_tokens: int, context_len: int) -> int:
    """--max-running-requests, or SGLang's default from the KV pool."""
    if launch.max_running_requests:
        return launch.max_running_requests
    return min(max(int(kv_tokens / context_len * 512), 2048), 4096)
