"""A benchmark result in SGLang bench_serving's own result format: one flat record per load point.

bench_serving (`--output-file`) appends one JSON line per run whose keys are its arguments and
flat metrics (`p99_ttft_ms`, `median_e2e_latency_ms`, `duration`); the tuner's own JSON nests
the latencies (`ttft.p99_ms`) and says `duration_s`. This renders the same measurements under
bench_serving's keys (those of 0.5.23, in its order), so tools written for its files read ours.
Values it has no source for here are None (its server_info, accept_length) or the one value a
text-only workload implies (no vision tokens; the output tokens are not retokenized).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from tuner.bench.goodput import point_goodput
from tuner.bench.settings import Api, BenchSettings, WorkloadKind
from tuner.bench.types import BenchResult, LatencyStats, LoadPointResult

_ARGUMENT_KEYS = (
    "tag",
    "backend",
    "dataset_name",
    "request_rate",
    "max_concurrency",
    "sharegpt_output_len",
    "random_input_len",
    "random_output_len",
    "random_range_ratio",
    "server_info",
)
_TOTAL_KEYS = (
    "duration",
    "completed",
    "total_input_tokens",
    "total_input_text_tokens",
    "total_input_vision_tokens",
    "total_output_tokens",
    "total_output_tokens_retokenized",
    "request_throughput",
    "input_throughput",
    "output_throughput",
    "total_throughput",
)
# bench_serving's latency groups: its key infix -> our LatencyStats field of BenchMetrics.
_LATENCIES = (("e2e_latency", "e2e"), ("ttft", "ttft"), ("tpot", "tpot"), ("itl", "itl"))
_STATS = (("mean", "mean_ms"), ("median", "median_ms"), ("std", "std_ms"), ("p90", "p90_ms"),
          ("p95", "p95_ms"), ("p99", "p99_ms"))  # fmt: skip
_TAIL_KEYS = ("concurrency", "accept_length", "max_output_tokens_per_s", "max_concurrent_requests")

BENCH_SERVING_KEYS: tuple[str, ...] = (
    *_ARGUMENT_KEYS,
    *_TOTAL_KEYS,
    *(f"{stat}_{infix}_ms" for infix, _ in _LATENCIES for stat, _ in _STATS),
    *_TAIL_KEYS,
)


def _backend(settings: BenchSettings) -> str:
    return {Api.CHAT: "sglang-oai-chat", Api.GENERATE: "sglang"}.get(settings.workload.api, "sglang-oai")


def _dataset(settings: BenchSettings) -> str:
    kind = settings.workload.kind
    return (
        "random"
        if kind is WorkloadKind.RANDOM
        else "sharegpt"
        if kind is WorkloadKind.SHAREGPT
        else kind.value
    )


def bench_serving_record(point: LoadPointResult, settings: BenchSettings) -> dict[str, Any]:
    """One load point as bench_serving's result record (exactly its keys)."""
    m, wl = point.metrics, settings.workload
    random = wl.kind is WorkloadKind.RANDOM
    out: dict[str, Any] = {
        "tag": None,
        "backend": _backend(settings),
        "dataset_name": _dataset(settings),
        "request_rate": point.point.request_rate if point.point.request_rate is not None else math.inf,
        "max_concurrency": point.point.concurrency,
        "sharegpt_output_len": None if random else wl.output_len,
        "random_input_len": wl.input_len if random else None,
        "random_output_len": wl.output_len if random else None,
        "random_range_ratio": wl.range_ratio if random else None,
        "server_info": None,
        "duration": m.duration_s,
        "completed": m.completed,
        "total_input_tokens": m.total_input_tokens,
        "total_input_text_tokens": m.total_input_tokens,
        "total_input_vision_tokens": 0,
        "total_output_tokens": m.total_output_tokens,
        "total_output_tokens_retokenized": m.total_output_tokens,
        "request_throughput": m.request_throughput,
        "input_throughput": m.input_throughput,
        "output_throughput": m.output_throughput,
        "total_throughput": m.total_throughput,
    }
    for infix, group in _LATENCIES:
        stats: LatencyStats = getattr(m, group)
        for stat, field in _STATS:
            out[f"{stat}_{infix}_ms"] = getattr(stats, field)
    out.update(
        concurrency=m.concurrency,
        accept_length=None,
        max_output_tokens_per_s=m.max_output_tokens_per_s,
        max_concurrent_requests=m.max_concurrent_requests,
    )
    return out


def bench_serving_records(
    result: BenchResult, settings: BenchSettings, goodput: Mapping[str, float] | None = None
) -> list[dict[str, Any]]:
    """Every load point of a result as bench_serving records, in the order they ran; with `goodput`
    bounds (`--goodput`), each with bench_serving's `request_goodput` and the `slo_attainment`."""
    out = []
    for point in result.points:
        record = bench_serving_record(point, settings)
        if goodput:
            found = point_goodput(point.records, goodput, point.metrics.duration_s)
            record["request_goodput"] = found.request_goodput if found else None
            record["slo_attainment"] = found.slo_attainment if found else None
        out.append(record)
    return out
