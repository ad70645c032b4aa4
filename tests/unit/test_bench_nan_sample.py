"""The benchmark's own responses, sampled, through NaN's signatures: a NaN only batched decode shows fails."""

from __future__ import annotations

import orjson

from tuner.bench.accumulate import SAMPLE_EVERY, StreamAccumulator
from tuner.bench.settings import Api, LoadPoint
from tuner.bench.types import BenchResult, LoadPointResult
from tuner.bench.workload import RequestSpec
from tuner.gate.garbage import nan_signature
from tuner.stage_verdicts import nan_under_load


def record(index: int, pieces: list[str]):  # type: ignore[no-untyped-def]
    acc = StreamAccumulator(Api.COMPLETIONS)
    for t, piece in enumerate(pieces):
        acc.add(orjson.dumps({"choices": [{"index": 0, "text": piece}]}), float(t))
    spec = RequestSpec(index=index, prompt=(1, 2), input_tokens=2, output_tokens=len(pieces))
    return acc.record(spec, label="c8", t_queued=0.0, t_sent=0.0, status=200, error=None)


def result(records: list) -> BenchResult:  # type: ignore[type-arg]
    """A benchmark result holding one load point of `records` (its metrics are not what is read)."""
    point = object.__new__(LoadPointResult)  # the fields the NaN check reads, no metrics needed
    object.__setattr__(point, "point", LoadPoint(concurrency=8, num_prompts=len(records)))
    object.__setattr__(point, "records", tuple(records))
    return BenchResult(points=(point,), client_cpu_share=0.1, loop_lag_p99_ms=None, duration_s=1.0)


def test_every_eighth_response_keeps_its_start_and_nan_s_signature_fails_the_trial() -> None:
    healthy = [record(i, ["the", " cat", " sat", " the", " cat"]) for i in range(16)]
    assert [r.text_sample is not None for r in healthy].count(True) == 16 // SAMPLE_EVERY
    assert healthy[0].text_sample == "the cat sat the cat" and healthy[1].text_sample is None
    assert nan_under_load(result(healthy)) is None  # a loop is what random prompts with ignore_eos give
    sick = [*healthy[:8], record(8, ["!"] * 12), *healthy[9:]]
    why = nan_under_load(result(sick))
    assert why is not None and "request #8" in why and "1 of 2 sampled responses" in why
    assert nan_signature("nan nan nan nan") is not None and nan_signature("a b a b a b") is None


def test_a_window_too_short_to_measure_is_marked_noisy() -> None:
    """Real SGLang: two identical launches measured over 0.3-0.6 s windows gave 2,302 vs 1,704 tok/s."""
    from dataclasses import replace

    from tuner.bench.runner import short_window
    from tuner.bench.types import BenchMetrics, LatencyStats

    def stats(median_ms: float) -> LatencyStats:
        return LatencyStats(mean_ms=median_ms, median_ms=median_ms, p99_ms=median_ms, count=32)

    zero = LatencyStats()
    metrics = BenchMetrics(
        duration_s=0.47, completed=32, failed=0, errors=(), total_input_tokens=4096,
        total_input_tokens_server=4096, total_output_tokens=1024, request_throughput=68.0,
        input_throughput=8697.0, input_throughput_server=8697.0, output_throughput=2174.0,
        total_throughput=10871.0, ttft=stats(16.5), tpot=stats(3.0), itl=zero, e2e=stats(106.7),
        max_itl_ms=18.3, queue=zero, concurrency=7.8, max_output_tokens_per_s=1024.0,
        max_concurrent_requests=32, steady_output_throughput=None, steady_window_s=None,
        tokens_per_content_event=1.0, zero_gap_fraction=0.0, output_tokens_source="usage",
    )  # fmt: skip
    point = object.__new__(LoadPointResult)
    object.__setattr__(point, "metrics", metrics)

    def bench(m: BenchMetrics) -> BenchResult:
        object.__setattr__(point, "metrics", m)
        return BenchResult(points=(point,), client_cpu_share=0.1, loop_lag_p99_ms=None, duration_s=1.0)

    why = short_window(bench(metrics))
    assert why is not None and why.startswith("noisy:") and "0.47 s" in why
    assert short_window(bench(replace(metrics, duration_s=8.5))) is None  # 8.5 s: measured
    slow = replace(metrics, duration_s=3.0, e2e=stats(1000.0))  # 3 s of 3 request latencies: repeatable
    assert short_window(bench(slow)) is None
    assert short_window(bench(replace(metrics, duration_s=1.9))) is not None
