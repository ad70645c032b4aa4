"""Every metric the tuner knows, defined once: name, direction, unit, label, format, how it is read.

Objectives, SLO constraints, the store's metric columns (a new BENCH metric is a new column,
added to existing databases when they are opened), status, the report, plots, the export and
the notebook all look metrics up here: adding a metric is one entry below. A metric is read
from one of three places: the benchmark's objective load point (`BenchMetrics`), what the
server reported about itself (`ServerFacts`), or the GPU memory samples of the trial.
Missing is None, never 0: a latency over no requests is not a perfect 0 ms (SGLang's
statistics report 0 for an empty list; `count` tells them apart).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum

from tuner.bench.types import BenchMetrics, LatencyStats
from tuner.result import TrialResult


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
    label: str = ""  # for people ("TTFT p99"); empty: the name with spaces
    fmt: str = "{:,.1f}"  # how a value is written (str.format), without its unit
    headline: bool = False  # one of the few every summary shows (export, confirm, tables)

    @property
    def optimisable(self) -> bool:
        """Can be an objective or an SLO."""
        return self.direction is not None

    @property
    def title(self) -> str:
        """The label for people, without the name's underscores."""
        return self.label or self.name.replace("_", " ")

    @property
    def heading(self) -> str:
        """A column or axis heading: the title and its unit ("TTFT p99 (ms)"); the unit once."""
        return self.title if self.unit in self.title else f"{self.title} ({self.unit})"

    def show(self, value: float) -> str:
        """A value with its unit for a line of text ("1,234.5 tok/s", "250,000 KV-cache tokens" reads
        as the title's unit)."""
        number = self.fmt.format(value)
        return number if self.unit in self.title else f"{number} {self.unit}"


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


def _bench(
    name: str,
    direction: Direction | None,
    unit: str,
    doc: str,
    *,
    label: str = "",
    fmt: str = "{:,.1f}",
    headline: bool = False,
) -> Metric:
    def read(metrics: BenchMetrics) -> float | None:
        return _finite(getattr(metrics, name))

    return Metric(
        name=name,
        direction=direction,
        unit=unit,
        source=Source.BENCH,
        doc=doc,
        read=read,
        label=label,
        fmt=fmt,
        headline=headline,
    )


_LATENCY_TITLES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e": "E2E latency"}


def _latency_metric(
    group: str, stat: str, doc: str, *, fmt: str = "{:,.1f}", headline: bool = False
) -> Metric:
    label = "p50" if stat == "median_ms" else stat.removesuffix("_ms")
    return Metric(
        name=f"{group}_{label}_ms",
        direction=Direction.MINIMIZE,
        unit="ms",
        source=Source.BENCH,
        doc=f"{doc}, {'median' if label == 'p50' else label}",
        read=_latency(group, stat),
        label=f"{_LATENCY_TITLES[group]} {label}",
        fmt=fmt,
        headline=headline,
    )


_MAX, _MIN = Direction.MAXIMIZE, Direction.MINIMIZE
_ALL = (
    _bench("output_throughput", _MAX, "tok/s", "Σ output tokens / benchmark duration", headline=True),
    _bench(
        "total_throughput", _MAX, "tok/s", "(Σ declared input + Σ output tokens) / duration", headline=True
    ),
    _bench("request_throughput", _MAX, "req/s", "completed requests / duration", fmt="{:,.2f}"),
    Metric(
        name="kv_tokens",
        direction=_MAX,
        unit="tokens",
        source=Source.SERVER,
        doc="KV-cache capacity the server reported (max_total_num_tokens)",
        label="KV-cache tokens",
        fmt="{:,.0f}",
        headline=True,
    ),
    Metric(
        name="min_free_vram_mib",
        direction=_MAX,
        unit="MiB",
        source=Source.GPU,
        doc="lowest free GPU memory sampled on any of the trial's GPUs",
        label="min free VRAM",
        fmt="{:,.0f}",
        headline=True,
    ),
    _latency_metric("ttft", "median_ms", "time to first token"),
    _latency_metric("ttft", "p99_ms", "time to first token", headline=True),
    _latency_metric("tpot", "median_ms", "time per output token after the first", fmt="{:,.2f}"),
    _latency_metric("tpot", "p99_ms", "time per output token after the first", fmt="{:,.2f}", headline=True),
    _latency_metric("itl", "median_ms", "gap between content events", fmt="{:,.2f}"),
    _latency_metric("itl", "p99_ms", "gap between content events", fmt="{:,.2f}"),
    _latency_metric("e2e", "median_ms", "request latency, sent to last event"),
    _latency_metric("e2e", "p99_ms", "request latency, sent to last event"),
    _bench("concurrency", None, "requests", "Σ e2e / duration: requests in flight on average"),
    _latency_metric("ttft", "p90_ms", "time to first token"),
    _latency_metric("ttft", "p95_ms", "time to first token"),
    _latency_metric("tpot", "p90_ms", "time per output token after the first", fmt="{:,.2f}"),
    _latency_metric("tpot", "p95_ms", "time per output token after the first", fmt="{:,.2f}"),
    _latency_metric("itl", "p90_ms", "gap between content events", fmt="{:,.2f}"),
    _latency_metric("itl", "p95_ms", "gap between content events", fmt="{:,.2f}"),
    _latency_metric("e2e", "p90_ms", "request latency, sent to last event"),
    _latency_metric("e2e", "p95_ms", "request latency, sent to last event"),
    Metric(
        name="failed_requests",
        direction=_MIN,
        unit="requests",
        source=Source.BENCH,
        doc="requests of the load point that failed, any error class (the classes: the bench record)",
        read=lambda m: float(m.failed),
    ),
    Metric(
        name="failed_fraction",
        direction=_MIN,
        unit="",
        source=Source.BENCH,
        doc="failed / (completed + failed) requests of the load point",
        read=lambda m: m.failed / (m.completed + m.failed) if m.completed + m.failed else None,
    ),
    Metric(
        name="request_goodput",
        direction=_MAX,
        unit="req/s",
        source=Source.BENCH,
        doc="bench_serving's goodput: requests within every per-request latency bound the space's "
        "TTFT/TPOT/E2E constraints set, per second of the benchmark (tuner.bench.goodput); None "
        "without such a constraint",
        read=lambda m: None,  # needs the study's latency bounds: filled in by tuner.objectives.judge
        label="goodput",
        fmt="{:,.2f}",
    ),
    Metric(
        name="slo_attainment",
        direction=_MAX,
        unit="",
        source=Source.BENCH,
        doc="requests within every per-request latency bound / requests sent (failed ones included); "
        "None without a TTFT/TPOT/E2E constraint",
        read=lambda m: None,
        label="SLO attainment",
        fmt="{:.3f}",
    ),
    Metric(
        name="capacity_request_rate",
        direction=_MAX,
        unit="req/s",
        source=Source.BENCH,
        doc="SLO capacity: the highest request rate the launch served within the capacity objective's SLOs",
        read=lambda m: None,  # measured by the load search over several runs, never by one load point
        label="SLO capacity",
        fmt="{:,.2f}",
    ),
    Metric(
        name="capacity_concurrency",
        direction=_MAX,
        unit="concurrent requests",
        source=Source.BENCH,
        doc="SLO capacity: the highest concurrency the launch served within the capacity objective's SLOs",
        read=lambda m: None,
        label="SLO capacity (concurrency)",
        fmt="{:,.0f}",
    ),
    Metric(
        name="output_throughput_per_gpu",
        direction=_MAX,
        unit="tok/s/GPU",
        source=Source.DERIVED,
        doc="output_throughput / number of the trial's GPUs",
    ),
    Metric(
        name="capacity_request_rate_per_gpu",
        direction=_MAX,
        unit="req/s/GPU",
        source=Source.DERIVED,
        doc="capacity_request_rate / number of the trial's GPUs: the SLO capacity a GPU buys",
        label="SLO capacity per GPU",
        fmt="{:,.2f}",
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
# SGLang bench_serving's names for the metrics above (its result JSON's keys), accepted wherever a
# metric is named (objectives, SLO constraints) and read as the registry's own name.
ALIASES: Mapping[str, str] = {
    "median_ttft_ms": "ttft_p50_ms",
    "p99_ttft_ms": "ttft_p99_ms",
    "median_tpot_ms": "tpot_p50_ms",
    "p99_tpot_ms": "tpot_p99_ms",
    "median_itl_ms": "itl_p50_ms",
    "p99_itl_ms": "itl_p99_ms",
    "median_e2e_latency_ms": "e2e_p50_ms",
    "p99_e2e_latency_ms": "e2e_p99_ms",
    "p90_ttft_ms": "ttft_p90_ms",
    "p95_ttft_ms": "ttft_p95_ms",
    "p90_tpot_ms": "tpot_p90_ms",
    "p95_tpot_ms": "tpot_p95_ms",
    "p90_itl_ms": "itl_p90_ms",
    "p95_itl_ms": "itl_p95_ms",
    "p90_e2e_latency_ms": "e2e_p90_ms",
    "p95_e2e_latency_ms": "e2e_p95_ms",
}


def canonical(name: str) -> str:
    """The registry's name of a metric given by its own name or a bench_serving alias."""
    return ALIASES.get(name, name)


DEFAULT_OBJECTIVES = ("output_throughput", "kv_tokens")
# What every summary shows beside the objectives (export and confirm lines, the trials table).
HEADLINE: tuple[str, ...] = tuple(m.name for m in _ALL if m.headline)
# What the export and `confirm` summarise as median and spread over repeated measurements.
SPREAD_METRICS = ("output_throughput", "total_throughput", "kv_tokens", "ttft_p99_ms", "tpot_p99_ms")


def heading(name: str) -> str:
    """The column or axis heading of a metric ("TTFT p99 (ms)"); an unknown name as it is."""
    metric = METRICS.get(name)
    return metric.heading if metric is not None else name


def formatted(name: str, value: float | None) -> str:
    """A metric's value as its format writes it, without unit; "-" when missing (None or NaN)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    metric = METRICS.get(name)
    try:
        return (metric.fmt if metric is not None else "{:,.1f}").format(float(value))
    except (TypeError, ValueError):
        return str(value)


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
    cap = values.get("capacity_request_rate")
    return {
        "capacity_request_rate_per_gpu": cap / n_gpus if cap is not None and n_gpus > 0 else None,
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
    out.update({k: v for k, v in result.stage_metrics.items() if k in METRICS})  # the load search's
    out.update(derived_values(out, len(result.gpus)))
    return out
