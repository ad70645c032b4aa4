"""Every metric the tuner knows, defined once: name, direction, unit, and how it is read.

Objectives, SLO constraints, the store's metric columns, the report and the export all look
metrics up here. A metric is read from one of three places: the benchmark's objective load
point (`BenchMetrics`), what the server reported about itself (`ServerFacts`), or the GPU
memory samples of the trial. Missing is None, never 0: a latency over no requests is not a
perfect 0 ms (SGLang's statistics report 0 for an empty list; `count` tells them apart).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum

from tuner.bench.types import BenchMetrics, LatencyStats
from tuner.config import TrialResult


class Direction(str, Enum):
    """Which way a metric is better."""

    MAXIMIZE = "maximize"
    MINIMIZE = "minimize"


class Source(str, Enum):
    """Where a metric's value comes from."""

    BENCH = "bench"  # the objective load point's BenchMetrics
    SERVER = "server"  # the server's own report (KV tokens)
    GPU = "gpu"  # the trial's GPU memory samples
    DERIVED = "derived"  # computed from other metrics of the trial (see `derived_values`)


@dataclass(frozen=True, kw_only=True, slots=True)
class Metric:
    """One metric: its name in space files, the store and reports; direction None = not optimisable."""

    name: str
    direction: Direction | None
    unit: str
    source: Source
    doc: str
    read: Callable[[BenchMetrics], float | None] | None = None  # BENCH metrics only

    @property
    def optimisable(self) -> bool:
        """Can be an objective or an SLO."""
        return self.direction is not None


def _finite(value: float | None) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _latency(group: str, stat: str) -> Callable[[BenchMetrics], float | None]:
    def read(metrics: BenchMetrics) -> float | None:
        stats: LatencyStats = getattr(metrics, group)
        return None if stats.count == 0 else _finite(getattr(stats, stat))

    return read


def _bench(name: str, direction: Direction | None, unit: str, doc: str) -> Metric:
    def read(metrics: BenchMetrics) -> float | None:
        return _finite(getattr(metrics, name))

    return Metric(name=name, direction=direction, unit=unit, source=Source.BENCH, doc=doc, read=read)


def _latency_metric(group: str, stat: str, doc: str) -> Metric:
    label = "p50" if stat == "median_ms" else stat.removesuffix("_ms")
    return Metric(
        name=f"{group}_{label}_ms",
        direction=Direction.MINIMIZE,
        unit="ms",
        source=Source.BENCH,
        doc=f"{doc}, {'median' if label == 'p50' else label}",
        read=_latency(group, stat),
    )


_MAX, _MIN = Direction.MAXIMIZE, Direction.MINIMIZE
_ALL = (
    _bench("output_throughput", _MAX, "tok/s", "Σ output tokens / benchmark duration"),
    _bench("total_throughput", _MAX, "tok/s", "(Σ declared input + Σ output tokens) / duration"),
    _bench("request_throughput", _MAX, "req/s", "completed requests / duration"),
    Metric(
        name="kv_tokens",
        direction=_MAX,
        unit="tokens",
        source=Source.SERVER,
        doc="KV-cache capacity the server reported (max_total_num_tokens)",
    ),
    Metric(
        name="min_free_vram_mib",
        direction=_MAX,
        unit="MiB",
        source=Source.GPU,
        doc="lowest free GPU memory sampled on any of the trial's GPUs",
    ),
    _latency_metric("ttft", "median_ms", "time to first token"),
    _latency_metric("ttft", "p99_ms", "time to first token"),
    _latency_metric("tpot", "median_ms", "time per output token after the first"),
    _latency_metric("tpot", "p99_ms", "time per output token after the first"),
    _latency_metric("itl", "median_ms", "gap between content events"),
    _latency_metric("itl", "p99_ms", "gap between content events"),
    _latency_metric("e2e", "median_ms", "request latency, sent to last event"),
    _latency_metric("e2e", "p99_ms", "request latency, sent to last event"),
    _bench("concurrency", None, "requests", "Σ e2e / duration: requests in flight on average"),
    Metric(
        name="output_throughput_per_gpu",
        direction=_MAX,
        unit="tok/s/GPU",
        source=Source.DERIVED,
        doc="output_throughput / number of the trial's GPUs",
    ),
    Metric(
        name="output_throughput_per_user",
        direction=_MAX,
        unit="tok/s/user",
        source=Source.DERIVED,
        doc="output_throughput / concurrency: what one request in flight receives on average",
    ),
)

METRICS: Mapping[str, Metric] = {m.name: m for m in _ALL}
BENCH_METRICS: tuple[str, ...] = tuple(m.name for m in _ALL if m.source is Source.BENCH)
OPTIMISABLE: tuple[str, ...] = tuple(m.name for m in _ALL if m.optimisable)
DEFAULT_OBJECTIVES = ("output_throughput", "kv_tokens")
# What the export and `confirm` summarise as median and spread over repeated measurements.
SPREAD_METRICS = ("output_throughput", "total_throughput", "kv_tokens", "ttft_p99_ms", "tpot_p99_ms")


def direction_of(name: str) -> Direction:
    """The direction of an optimisable metric (KeyError/ValueError for others)."""
    direction = METRICS[name].direction
    if direction is None:
        raise ValueError(f"{name} is not optimisable")
    return direction


def bench_values(metrics: BenchMetrics | None) -> dict[str, float | None]:
    """Every BENCH metric of one load point (all None when the benchmark never ran)."""
    out: dict[str, float | None] = dict.fromkeys(BENCH_METRICS)
    if metrics is None:
        return out
    for name in BENCH_METRICS:
        reader = METRICS[name].read
        assert reader is not None
        out[name] = reader(metrics)
    return out


def derived_values(values: Mapping[str, float | None], n_gpus: int) -> dict[str, float | None]:
    """The DERIVED metrics from a trial's other metrics and its GPU count (None where an input is)."""
    out = values.get("output_throughput")
    conc = values.get("concurrency")
    return {
        "output_throughput_per_gpu": out / n_gpus if out is not None and n_gpus > 0 else None,
        "output_throughput_per_user": out / conc if out is not None and conc else None,
    }


def trial_values(result: TrialResult) -> dict[str, float | None]:
    """Every metric of a trial result; None where it was not measured."""
    out: dict[str, float | None] = dict.fromkeys(METRICS)
    out.update(bench_values(result.bench.objective_metrics if result.bench is not None else None))
    if result.server is not None and result.server.kv_tokens is not None:
        out["kv_tokens"] = float(result.server.kv_tokens)
    if result.min_free_mib:
        out["min_free_vram_mib"] = float(min(result.min_free_mib))
    out.update(derived_values(out, len(result.gpus)))
    return out
