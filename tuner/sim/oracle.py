"""The noise-free oracle: what a launch of the simulator will do under a workload, without running it.

    predict(scenario, launch, workload) -> Prediction

Pure and deterministic. Startup failures follow the scheduler child's order
(weights, KV pool, unsupported backend, graph capture); serving runs the very
scheduler the server runs (sched.Scheduler) in virtual time over the server's
warmup request, the gate (sequential prompts, then a burst) and the closed-loop
benchmark, watching every step for activation OOM and NaN. Decode steps that
cannot change anything are fast-forwarded, so a call costs about a millisecond
per hundred requests. Throughput is the benchmark's formula: tokens / (first
dispatch -> last completion).
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum

from tuner.sim import memory
from tuner.sim.memory import MemoryPlan
from tuner.sim.resolve import Launch
from tuner.sim.scenario import Scenario
from tuner.sim.sched import WAKE_S, Scheduler, Seq, Step, default_max_running

CLIENT_GAP_S = 0.0005  # a client's next request arrives this long after its previous one ended
_FAST = 1 << 30


class Outcome(str, Enum):
    """What a launch ends in."""

    OK = "ok"
    LAUNCH_ERROR = "launch_error"  # more TP ranks than visible GPUs
    OOM_AT_LOAD = "oom_at_load"  # the weights do not fit
    NOT_ENOUGH_MEMORY = "not_enough_memory"  # the KV pool is below the minimum
    UNSUPPORTED = "unsupported"  # a backend of the pair does not run on this GPU
    OOM_AT_CAPTURE = "oom_at_capture"  # CUDA-graph capture runs out of memory
    OOM_UNDER_LOAD = "oom_under_load"  # a prefill or eager decode step runs out of memory
    NAN = "nan"  # NaN in some decode step of the gate or benchmark
    GARBAGE = "garbage"  # garbage from the first token

    @property
    def at_startup(self) -> bool:
        return self in _STARTUP


_STARTUP = {
    Outcome.LAUNCH_ERROR,
    Outcome.OOM_AT_LOAD,
    Outcome.NOT_ENOUGH_MEMORY,
    Outcome.UNSUPPORTED,
    Outcome.OOM_AT_CAPTURE,
}


@dataclass(frozen=True, kw_only=True, slots=True)
class Workload:
    """The trial's traffic: the gate's burst and one closed-loop benchmark load point."""

    input_len: int
    output_len: int
    concurrency: int
    num_prompts: int
    gate_burst: int = 8  # concurrent gate requests (0: no gate)
    gate_prompt_tokens: int = 24
    gate_output_tokens: int = 16
    # requests/s, Poisson arrivals (bench_serving's --request-rate; at most `concurrency` in flight);
    # None: closed loop, every client sends its next request when its last one ends
    request_rate: float | None = None
    arrival_seed: int = 1


@dataclass(frozen=True, kw_only=True, slots=True)
class Prediction:
    """The predicted outcome and figures of one launch under one workload (None: not reached)."""

    outcome: Outcome
    kv_tokens: int | None = None
    free_mib: float | None = None  # idle, after startup (what nvidia-smi shows before traffic)
    min_free_mib: float | None = None  # lowest during gate and benchmark (activation peaks included)
    output_tok_s: float | None = None
    total_tok_s: float | None = None
    duration_s: float | None = None
    ttft_p50_ms: float | None = None
    ttft_p99_ms: float | None = None
    tpot_p50_ms: float | None = None
    tpot_p99_ms: float | None = None
    e2e_p50_ms: float | None = None
    e2e_p99_ms: float | None = None
    max_batch: int = 0  # largest decode batch of the benchmark
    max_queue: int = 0  # longest waiting queue of the benchmark
    peak_kv_used: int = 0  # most KV-cache tokens in use at once during the benchmark
    retractions: int = 0
    detail: str = ""

    @property
    def feasible(self) -> bool:
        return self.outcome is Outcome.OK


@dataclass(kw_only=True, slots=True)
class _Watch:
    """What the steps of a run did to memory and outputs."""

    peak_act_mib: float = 0.0
    oom: str = ""
    nan: bool = False
    max_batch: int = 0
    max_queue: int = 0
    peak_kv_used: int = 0


def predict(scenario: Scenario, launch: Launch, workload: Workload) -> Prediction:
    """The outcome, KV tokens, free memory and benchmark figures of `launch` under `workload`."""
    plan = memory.plan_memory(
        scenario,
        tp_size=launch.tp_size,
        fraction=launch.mem_fraction_static,
        kv_dtype=launch.kv_cache_dtype,
        captured_bs=launch.captured_bs,
    )
    early = _startup(scenario, launch, plan)
    if early is not None:
        return early
    kv, free = plan.kv_tokens, plan.free_mib
    if launch.behaviour == "garbage":
        return Prediction(outcome=Outcome.GARBAGE, kv_tokens=kv, free_mib=free, detail="garbage tokens")
    watch = _before_bench(scenario, launch, plan, workload)
    gate_watch = _Watch(peak_act_mib=watch.peak_act_mib, oom=watch.oom, nan=watch.nan)
    bench = _Watch(peak_act_mib=watch.peak_act_mib)
    records, sched = _run_closed(
        scenario,
        launch,
        plan,
        bench,
        clients=workload.concurrency,
        requests=workload.num_prompts,
        prompt=workload.input_len,
        output=workload.output_len,
        schedule=poisson(workload.request_rate, workload.num_prompts, workload.arrival_seed),
    )
    min_free = plan.total_mib - plan.idle_used_mib - bench.peak_act_mib
    base = Prediction(outcome=Outcome.OK, kv_tokens=kv, free_mib=free, min_free_mib=min_free)
    for w in (gate_watch, bench):
        if w.oom:
            return replace(base, outcome=Outcome.OOM_UNDER_LOAD, detail=w.oom)
        if w.nan:
            return replace(base, outcome=Outcome.NAN, detail="NaN in a decode step")
    return _measured(base, records, sched, bench, workload)


def _before_bench(
    scenario: Scenario, launch: Launch, plan: MemoryPlan, workload: Workload
) -> _Watch:
    """The server's own warmup request and the gate (sequential, then its burst), as they load memory."""
    watch = _Watch()
    if not launch.skip_server_warmup:
        _run_closed(scenario, launch, plan, watch, clients=1, requests=1, prompt=4, output=8)
    if workload.gate_burst:
        prompt, output, burst = workload.gate_prompt_tokens, workload.gate_output_tokens, workload.gate_burst
        _run_closed(scenario, launch, plan, watch, clients=1, requests=3, prompt=prompt, output=output)
        _run_closed(
            scenario, launch, plan, watch, clients=burst, requests=burst, prompt=prompt, output=output
        )
    return watch


def _measured(
    base: Prediction, records: list[tuple[float, float, float]], sched: Scheduler, bench: _Watch,
    workload: Workload,
) -> Prediction:  # fmt: skip
    """The benchmark's figures from its requests' (sent, first token, done) times."""
    duration = max(r[2] for r in records)
    out_tokens = workload.num_prompts * workload.output_len
    ttft = sorted((r[1] - r[0]) * 1000 for r in records)
    tpot = (
        sorted((r[2] - r[1]) * 1000 / (workload.output_len - 1) for r in records)
        if workload.output_len > 1
        else []
    )
    e2e = sorted((r[2] - r[0]) * 1000 for r in records)
    return replace(
        base,
        output_tok_s=out_tokens / duration,
        total_tok_s=(out_tokens + workload.num_prompts * workload.input_len) / duration,
        duration_s=duration,
        ttft_p50_ms=percentile(ttft, 50),
        ttft_p99_ms=percentile(ttft, 99),
        tpot_p50_ms=percentile(tpot, 50) if tpot else None,
        tpot_p99_ms=percentile(tpot, 99) if tpot else None,
        e2e_p50_ms=percentile(e2e, 50),
        e2e_p99_ms=percentile(e2e, 99),
        max_batch=bench.max_batch,
        max_queue=bench.max_queue,
        peak_kv_used=bench.peak_kv_used,
        retractions=sched.retracted_total,
    )


def _startup(scenario: Scenario, launch: Launch, plan: MemoryPlan) -> Prediction | None:
    """The startup failure of a launch, in the scheduler child's order, or None."""
    if len(launch.visible_gpus) < launch.tp_size:
        return Prediction(outcome=Outcome.LAUNCH_ERROR, detail="tp larger than the visible GPUs")
    if plan.overhead_mib / 2 + plan.weights_mib > plan.total_mib:
        return Prediction(outcome=Outcome.OOM_AT_LOAD, detail=f"weights {plan.weights_mib:.0f} MiB")
    if not memory.enough_for_kv(scenario, plan):
        return Prediction(outcome=Outcome.NOT_ENOUGH_MEMORY, detail=f"KV pool {plan.kv_mib:.0f} MiB")
    if launch.behaviour == "unsupported":
        return Prediction(
            outcome=Outcome.UNSUPPORTED, kv_tokens=plan.kv_tokens, detail=launch.unsupported_error
        )
    if launch.graphs and memory.capture_peak_mib(scenario, plan) > plan.total_mib:
        peak = memory.capture_peak_mib(scenario, plan)
        return Prediction(
            outcome=Outcome.OOM_AT_CAPTURE,
            kv_tokens=plan.kv_tokens,
            detail=f"capture peak {peak:.0f} > {plan.total_mib} MiB",
        )
    return None


def _watch_step(
    scenario: Scenario, launch: Launch, plan: MemoryPlan, step: Step, sched: Scheduler, watch: _Watch
) -> None:
    act = memory.activation_mib(
        scenario, decode_batch=step.batch, graph_mode=step.graph, prefill_tokens=step.prefill_tokens
    )
    if plan.idle_used_mib + act > plan.total_mib and not watch.oom:
        what = (
            f"decode batch {step.batch}" if step.kind == "decode" else f"prefill {step.prefill_tokens} tokens"
        )
        watch.oom = f"{what}: {plan.idle_used_mib + act:.0f} > {plan.total_mib} MiB"
    watch.peak_act_mib = max(watch.peak_act_mib, act)
    if step.kind == "decode":
        watch.max_batch = max(watch.max_batch, step.batch)
        watch.nan = watch.nan or launch.nan_at(step.batch, step.graph)
    watch.max_queue = max(watch.max_queue, len(sched.waiting))
    watch.peak_kv_used = max(watch.peak_kv_used, sched.used_tokens)


def _run_closed(
    scenario: Scenario,
    launch: Launch,
    plan: MemoryPlan,
    watch: _Watch,
    *,
    clients: int,
    requests: int,
    prompt: int,
    output: int,
    schedule: Sequence[float] | None = None,
) -> tuple[list[tuple[float, float, float]], Scheduler]:
    """`clients` closed-loop clients send `requests` requests from an idle server at t = 0; with a
    `schedule` (send times), request i is sent at its time or, when `clients` are in flight, as
    soon as one ends (bench_serving's request rate under --max-concurrency).

    Returns (arrival, first token, finish) per request and the scheduler.
    """
    output = max(1, min(output, min(scenario.model.context_len, plan.kv_tokens) - prompt))
    sched = _scheduler(scenario, launch, plan)
    arrivals: list[tuple[float, int]] = []
    times: list[list[float]] = []  # per request, in sending order: (arrival, first token, finish)
    live: dict[int, tuple[Seq, int]] = {}  # id of a running request -> (it, its record): kept alive
    sent = 0

    def send(at: float) -> None:
        nonlocal sent
        heapq.heappush(arrivals, (at, sent))
        sent += 1

    def due(after: float) -> float:
        return after if schedule is None else max(after, schedule[sent])

    for _ in range(min(clients, requests)):
        send(due(0.0))
    t = 0.0
    while True:
        _admit(arrivals, t, sched, times, live, prompt=prompt, output=output)
        step = sched.plan(max_repeat=1 if arrivals else _FAST)
        if step is None:
            if not arrivals:
                break
            t = max(t, arrivals[0][0]) + WAKE_S
            continue
        _watch_step(scenario, launch, plan, step, sched, watch)
        t += step.dt_s * step.repeat
        for seq in sched.commit(step):
            rec = times[live[id(seq)][1]]
            if math.isnan(rec[1]):
                rec[1] = t
            if seq.finished:
                rec[2] = t
                del live[id(seq)]
                if sent < requests:
                    send(due(t + CLIENT_GAP_S))
    return [(r[0], r[1], r[2]) for r in times], sched


def _scheduler(scenario: Scenario, launch: Launch, plan: MemoryPlan) -> Scheduler:
    return Scheduler(
        perf=scenario.perf,
        launch=launch,
        capacity_tokens=plan.kv_tokens,
        max_running=default_max_running(launch, plan.kv_tokens, scenario.model.context_len),
    )


def _admit(
    arrivals: list[tuple[float, int]], t: float, sched: Scheduler, times: list[list[float]],
    live: dict[int, tuple[Seq, int]], *, prompt: int, output: int,
) -> None:  # fmt: skip
    """Submit every request that has arrived by `t`, each with its record of times."""
    while arrivals and arrivals[0][0] <= t:
        at, _ = heapq.heappop(arrivals)
        seq = Seq(prompt_tokens=prompt, max_new=output)
        times.append([at, math.nan, math.nan])
        live[id(seq)] = (seq, len(times) - 1)  # holding seq: its id is not reused while it runs
        sched.submit(seq)


def poisson(rate: float | None, n: int, seed: int) -> list[float] | None:
    """Send times of `n` requests arriving at `rate` per second (exponential gaps, seeded); None: closed
    loop."""
    if rate is None:
        return None
    rng = random.Random(seed)
    out, t = [], 0.0
    for _ in range(n):
        out.append(t)
        t += rng.expovariate(rate)
    return out


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated percentile of an ascending list (numpy's default method)."""
    if len(sorted_values) == 1:
        return sorted_values[0]
    pos = (len(sorted_values) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)
