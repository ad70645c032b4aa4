"""Aggregate metrics of one load point from its request records (pure; reference §7).

The formulas are SGLang bench_serving's (OAI-chat backend), so figures compare
one to one with a user's own `sglang.benchmark.serving` run:

- sums and latency lists are over successful requests only;
- percentiles are `numpy.percentile` with linear interpolation, std has ddof=0;
- an empty latency list gives 0 (SGLang's `np.mean(x or 0)`), with `count=0`
  next to it so a reader can tell "nothing measured" from "0 ms".

Diagnostics beyond SGLang (queue time, steady state, tokens per event,
zero-gap fraction) are None when there is nothing to compute them from.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

from tuner.bench.types import BenchMetrics, LatencyStats, RequestRecord

ZERO_GAP_S = 50e-6  # gaps below this are coalesced events or a lagging client (§7)
STEADY_FRACTION = 0.9  # steady state: in-flight ≥ 0.9·C


def latency_stats(values_s: Sequence[float]) -> LatencyStats:
    """mean, median, std (ddof=0), p90/p95/p99 (numpy linear) of seconds, reported in ms; 0 if empty."""
    if not values_s:
        return LatencyStats()
    x = np.asarray(values_s, dtype=np.float64) * 1000.0
    p90, p95, p99 = np.percentile(x, [90, 95, 99])
    return LatencyStats(
        mean_ms=float(np.mean(x)),
        median_ms=float(np.median(x)),
        std_ms=float(np.std(x)),
        p90_ms=float(p90),
        p95_ms=float(p95),
        p99_ms=float(p99),
        count=int(x.size),
    )


def event_times(record: RequestRecord) -> list[float]:
    """Arrival times of the content events: t_first, then t_first + cumulative gaps."""
    if record.t_first_s is None:
        return []
    times = [record.t_first_s]
    t = record.t_first_s
    for gap in record.itl_gaps_s:
        t += gap
        times.append(t)
    return times


def max_output_tokens_per_s(records: Iterable[RequestRecord], t0_s: float) -> float:
    """Highest output tokens in one 1-second bucket [T0+k, T0+k+1).

    Each content event of a successful request carries output_tokens / content_events
    tokens (usage gives only the total, so the tokens are spread evenly over the events).
    """
    buckets: dict[int, float] = {}
    for r in records:
        if not r.success or r.content_events == 0:
            continue
        per_event = r.output_tokens / r.content_events
        for t in event_times(r):
            k = math.floor(t - t0_s)
            buckets[k] = buckets.get(k, 0.0) + per_event
    return max(buckets.values(), default=0.0)


def max_concurrent_requests(records: Iterable[RequestRecord], t0_s: float) -> int:
    """Highest number of successful requests whose [t_sent, t_end] overlaps one bucket [T0+k, T0+k+1)."""
    buckets: Counter[int] = Counter()
    for r in records:
        if not r.success or r.t_sent_s is None or r.t_end_s is None:
            continue
        for k in range(math.floor(r.t_sent_s - t0_s), math.floor(r.t_end_s - t0_s) + 1):
            buckets[k] += 1
    return max(buckets.values(), default=0)


def steady_window(records: Sequence[RequestRecord], concurrency: int | None) -> tuple[float, float] | None:
    """[first time in-flight ≥ 0.9·C, last time it falls below] over all sent requests.

    In-flight(t) = #requests with t_sent ≤ t < t_end (failures included: they hold a slot).
    C is the load point's concurrency, or the highest in-flight seen for a rate-only point.
    None when in-flight never reaches the threshold or the window has no length.
    """
    edges: list[tuple[float, int]] = []
    for r in records:
        if r.t_sent_s is None:
            continue
        edges.append((r.t_sent_s, 1))
        edges.append((r.t_end_s if r.t_end_s is not None else r.t_sent_s, -1))
    if not edges:
        return None
    edges.sort(key=lambda e: (e[0], e[1]))  # ends before starts at equal times
    level, peak = 0, 0
    for _, step in edges:
        level += step
        peak = max(peak, level)
    c = concurrency if concurrency is not None else peak
    threshold = STEADY_FRACTION * c
    level = 0
    start: float | None = None
    end: float | None = None
    for t, step in edges:
        before = level
        level += step
        if before < threshold <= level and start is None:
            start = t
        if before >= threshold > level:
            end = t
    if start is None or end is None or end <= start:
        return None
    return start, end


def steady_output_throughput(records: Sequence[RequestRecord], window: tuple[float, float]) -> float:
    """Output tokens of content events inside the window / window length (events spread as above)."""
    start, end = window
    tokens = 0.0
    for r in records:
        if not r.success or r.content_events == 0:
            continue
        per_event = r.output_tokens / r.content_events
        tokens += per_event * sum(1 for t in event_times(r) if start <= t <= end)
    return tokens / (end - start)


def output_source(successes: Sequence[RequestRecord]) -> str | None:
    """ "usage" or "requested" when all successful requests agree, "mixed" otherwise, None if none."""
    sources = {r.output_source for r in successes}
    if not sources:
        return None
    if len(sources) == 1:
        return next(iter(sources)).value
    return "mixed"


def compute_metrics(
    records: Sequence[RequestRecord],
    *,
    t0_s: float,
    t1_s: float,
    concurrency: int | None = None,
) -> BenchMetrics:
    """All of §7 for one load point; duration = T1 − T0 (first dispatch → all finished)."""
    duration = t1_s - t0_s
    if duration <= 0:
        raise ValueError(f"duration must be > 0 (T0={t0_s}, T1={t1_s})")
    ok = [r for r in records if r.success]
    failed = [r for r in records if not r.success]
    errors = Counter(r.error.value if r.error is not None else "unknown" for r in failed)

    in_declared = sum(r.input_tokens_declared for r in ok)
    server_counts = [r.input_tokens_server for r in ok if r.input_tokens_server is not None]
    in_server = sum(server_counts) if server_counts else None
    out_total = sum(r.output_tokens for r in ok)

    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
    e2es = [r.e2e_s for r in ok if r.e2e_s is not None]
    tpots = [r.tpot_s for r in ok if r.tpot_s is not None]
    itls = [g for r in ok for g in r.itl_gaps_s]
    queues = [r.queue_s for r in records if r.queue_s is not None]
    events = sum(r.content_events for r in ok)

    window = steady_window(records, concurrency)
    return BenchMetrics(
        duration_s=duration,
        completed=len(ok),
        failed=len(failed),
        errors=tuple(sorted(errors.items())),
        total_input_tokens=in_declared,
        total_input_tokens_server=in_server,
        total_output_tokens=out_total,
        request_throughput=len(ok) / duration,
        input_throughput=in_declared / duration,
        input_throughput_server=None if in_server is None else in_server / duration,
        output_throughput=out_total / duration,
        total_throughput=(in_declared + out_total) / duration,
        ttft=latency_stats(ttfts),
        tpot=latency_stats(tpots),
        itl=latency_stats(itls),
        e2e=latency_stats(e2es),
        max_itl_ms=max(itls) * 1000.0 if itls else 0.0,
        queue=latency_stats(queues),
        concurrency=sum(e2es) / duration,
        max_output_tokens_per_s=max_output_tokens_per_s(ok, t0_s),
        max_concurrent_requests=max_concurrent_requests(ok, t0_s),
        steady_output_throughput=None if window is None else steady_output_throughput(ok, window),
        steady_window_s=None if window is None else window[1] - window[0],
        tokens_per_content_event=out_total / events if events else None,
        zero_gap_fraction=sum(1 for g in itls if g < ZERO_GAP_S) / len(itls) if itls else None,
        output_tokens_source=output_source(ok),
    )


__all__ = [
    "compute_metrics",
    "event_times",
    "latency_stats",
    "max_concurrent_requests",
    "max_output_tokens_per_s",
    "output_source",
    "steady_output_throughput",
    "steady_window",
]
