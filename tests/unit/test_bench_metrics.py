"""Metric formulas of reference bench-metrics §7 on hand-built records."""

from __future__ import annotations

import numpy as np
import pytest

from tuner.bench.accumulate import StreamAccumulator
from tuner.bench.metrics import (
    compute_metrics,
    latency_stats,
    max_concurrent_requests,
    max_output_tokens_per_s,
    steady_window,
)
from tuner.bench.settings import Api
from tuner.bench.types import ErrorClass, OutputSource, RequestRecord
from tuner.bench.workload import RequestSpec
from tuner.metrics import bench_values


def make_record(
    *,
    index: int = 0,
    sent: float = 0.0,
    ttft: float = 0.1,
    gaps: tuple[float, ...] = (0.01, 0.01, 0.01),
    tail: float = 0.001,
    out: int | None = None,
    source: OutputSource = OutputSource.USAGE,
    success: bool = True,
    error: ErrorClass | None = None,
    declared: int = 100,
    server_in: int | None = 110,
    queued: float | None = None,
) -> RequestRecord:
    first = sent + ttft
    last = first + sum(gaps)
    return RequestRecord(
        load_point="c4",
        index=index,
        input_tokens_declared=declared,
        input_tokens_server=server_in,
        output_tokens_requested=len(gaps) + 1,
        output_tokens=len(gaps) + 1 if out is None else out,
        output_source=source,
        success=success,
        error=error,
        t_queued_s=sent if queued is None else queued,
        t_sent_s=sent,
        t_first_s=first,
        t_last_token_s=last,
        t_end_s=last + tail,
        itl_gaps_s=gaps,
        content_events=len(gaps) + 1,
    )


def test_latency_stats_match_numpy_linear_and_population_std() -> None:
    xs = [0.001, 0.002, 0.004, 0.010]
    s = latency_stats(xs)
    ms = np.array(xs) * 1000
    assert s.mean_ms == pytest.approx(ms.mean())
    assert s.median_ms == pytest.approx(3.0)
    assert s.std_ms == pytest.approx(np.std(ms, ddof=0))
    assert s.std_ms != pytest.approx(np.std(ms, ddof=1))
    assert s.p90_ms == pytest.approx(8.2)  # linear: 4 + 0.7·6
    assert s.p99_ms == pytest.approx(np.percentile(ms, 99))
    assert s.count == 4


def test_empty_list_reports_zero_with_count_zero() -> None:
    s = latency_stats([])
    assert (s.mean_ms, s.median_ms, s.p99_ms, s.count) == (0.0, 0.0, 0.0, 0)


def test_sglang_formulas_on_two_requests() -> None:
    a = make_record(index=0, sent=0.0, ttft=0.1, gaps=(0.01, 0.02, 0.03), tail=0.0, out=4)
    b = make_record(index=1, sent=0.5, ttft=0.2, gaps=(0.05,), tail=0.01, out=2, declared=50, server_in=60)
    m = compute_metrics([a, b], t0_s=0.0, t1_s=2.0, concurrency=2)
    assert m.duration_s == 2.0
    assert (m.completed, m.failed) == (2, 0)
    assert m.total_input_tokens == 150 and m.total_input_tokens_server == 170
    assert m.total_output_tokens == 6
    assert m.request_throughput == pytest.approx(1.0)
    assert m.input_throughput == pytest.approx(75.0)
    assert m.input_throughput_server == pytest.approx(85.0)
    assert m.output_throughput == pytest.approx(3.0)
    assert m.total_throughput == pytest.approx(78.0)
    assert m.ttft.mean_ms == pytest.approx(150.0)
    # TPOT per request: a (0.16-0.1)/3 = 20 ms; b (0.26-0.2)/1 = 60 ms; then aggregated
    assert m.tpot.mean_ms == pytest.approx(40.0)
    # ITL pooled over gaps, not averaged per request
    assert m.itl.mean_ms == pytest.approx(np.mean([10, 20, 30, 50]))
    assert m.max_itl_ms == pytest.approx(50.0)
    # E2E ends at the last SSE line (tail included)
    assert m.e2e.mean_ms == pytest.approx((160 + 260) / 2)
    assert m.concurrency == pytest.approx((0.16 + 0.26) / 2.0)
    assert m.tokens_per_content_event == pytest.approx(6 / 6)
    assert m.output_tokens_source == "usage"


def test_failed_requests_are_counted_but_excluded_from_sums_and_latencies() -> None:
    ok = make_record(index=0)
    bad = make_record(
        index=1, ttft=5.0, success=False, error=ErrorClass.IDLE_TIMEOUT, source=OutputSource.EVENTS
    )
    bad2 = make_record(index=2, success=False, error=ErrorClass.IDLE_TIMEOUT)
    m = compute_metrics([ok, bad, bad2], t0_s=0.0, t1_s=10.0)
    assert (m.completed, m.failed) == (1, 2)
    assert m.errors == (("idle_timeout", 2),)
    assert m.ttft.count == 1 and m.ttft.mean_ms == pytest.approx(100.0)
    assert m.total_output_tokens == ok.output_tokens


def test_one_token_outputs_have_no_tpot_and_no_gaps() -> None:
    r = make_record(gaps=(), out=1)
    m = compute_metrics([r], t0_s=0.0, t1_s=1.0)
    assert m.tpot.count == 0 and m.tpot.mean_ms == 0.0
    assert m.itl.count == 0 and m.max_itl_ms == 0.0
    assert m.zero_gap_fraction is None
    assert m.ttft.count == 1


def test_nothing_completed_gives_zero_latencies_and_none_diagnostics() -> None:
    bad = make_record(success=False, error=ErrorClass.HTTP_STATUS)
    m = compute_metrics([bad], t0_s=0.0, t1_s=1.0)
    assert m.completed == 0 and m.output_throughput == 0.0
    assert m.ttft.mean_ms == 0.0 and m.ttft.count == 0
    assert m.output_tokens_source is None
    assert m.tokens_per_content_event is None
    assert m.total_input_tokens_server is None
    assert m.max_output_tokens_per_s == 0.0 and m.max_concurrent_requests == 0


def test_duration_must_be_positive() -> None:
    with pytest.raises(ValueError):
        compute_metrics([], t0_s=1.0, t1_s=1.0)


def test_mixed_output_sources_are_flagged() -> None:
    a = make_record(index=0, source=OutputSource.USAGE)
    b = make_record(index=1, source=OutputSource.REQUESTED)
    assert compute_metrics([a, b], t0_s=0.0, t1_s=1.0).output_tokens_source == "mixed"
    assert compute_metrics([b], t0_s=0.0, t1_s=1.0).output_tokens_source == "requested"


def test_zero_gap_fraction_counts_gaps_below_50_us() -> None:
    r = make_record(gaps=(0.0, 0.00004, 0.00006, 0.01))
    assert compute_metrics([r], t0_s=0.0, t1_s=1.0).zero_gap_fraction == pytest.approx(0.5)


def test_queue_time_reported_separately_from_ttft() -> None:
    r = make_record(sent=1.0, queued=0.25, ttft=0.1)
    m = compute_metrics([r], t0_s=0.0, t1_s=2.0)
    assert m.queue.mean_ms == pytest.approx(750.0)
    assert m.ttft.mean_ms == pytest.approx(100.0)


def test_one_second_buckets() -> None:
    # events at 0.5, 0.9 (bucket 0) and 1.2 (bucket 1); 6 tokens over 3 events = 2 per event
    a = make_record(sent=0.4, ttft=0.1, gaps=(0.4, 0.3), out=6)
    b = make_record(index=1, sent=1.5, ttft=0.1, gaps=(0.1,), out=2)
    assert max_output_tokens_per_s([a, b], 0.0) == pytest.approx(4.0 + 0.0)
    # a spans buckets 0-1, b spans bucket 1 only
    assert max_concurrent_requests([a, b], 0.0) == 2


def test_steady_window_is_where_in_flight_reaches_ninety_percent_of_c() -> None:
    recs = [make_record(index=i, sent=float(i), ttft=0.1, gaps=(5.0,), tail=0.0) for i in range(4)]
    # in flight: 1 from 0, 2 from 1, 3 from 2, 4 from 3 until 5.1; C=4 → threshold 3.6
    assert steady_window(recs, 4) == pytest.approx((3.0, 5.1))
    assert steady_window(recs, 10) is None
    # rate-only point: C = peak in-flight (4)
    assert steady_window(recs, None) == pytest.approx((3.0, 5.1))
    m = compute_metrics(recs, t0_s=0.0, t1_s=9.0, concurrency=4)
    assert m.steady_window_s == pytest.approx(2.1)
    assert m.steady_output_throughput is not None and m.steady_output_throughput > 0


def spec(out: int = 8) -> RequestSpec:
    return RequestSpec(index=3, prompt=(1, 2, 3), input_tokens=3, output_tokens=out)


def test_usage_only_chunk_with_empty_choices_is_not_an_error() -> None:
    acc = StreamAccumulator(Api.CHAT)
    acc.add(b'{"choices":[{"delta":{"content":"a"}}]}', 1.0)
    acc.add(b'{"choices":[{"delta":{"content":"b"}}]}', 1.5)
    assert acc.add(b'{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":7}}', 1.6) is False
    acc.add(b"[DONE]", 1.7)
    rec = acc.record(spec(), label="c1", t_queued=0.0, t_sent=0.5, status=200, error=None)
    assert rec.success and rec.error is None
    assert (rec.output_tokens, rec.output_source) == (7, OutputSource.USAGE)
    assert rec.input_tokens_server == 3
    assert rec.ttft_s == pytest.approx(0.5)
    assert rec.e2e_s == pytest.approx(1.2)
    assert rec.t_last_token_s == 1.5 and rec.itl_gaps_s == (0.5,)
    assert rec.tpot_s == pytest.approx((1.2 - 0.5) / 6)


def test_missing_usage_falls_back_to_requested_and_is_flagged() -> None:
    acc = StreamAccumulator(Api.COMPLETIONS)
    acc.add(b'{"choices":[{"text":"x"}]}', 1.0)
    acc.add(b'{"choices":[{"text":""}]}', 1.1)  # empty text is not content
    rec = acc.record(spec(out=8), label="c1", t_queued=0.0, t_sent=0.0, status=200, error=None)
    assert (rec.output_tokens, rec.output_source) == (8, OutputSource.REQUESTED)
    assert rec.content_events == 1
    m = compute_metrics([rec], t0_s=0.0, t1_s=2.0)
    assert m.output_tokens_source == "requested"


def test_reasoning_is_content_and_tool_calls_are_counted_apart() -> None:
    acc = StreamAccumulator(Api.CHAT)
    assert acc.add(b'{"choices":[{"delta":{"reasoning_content":"think"}}]}', 1.0)
    assert not acc.add(b'{"choices":[{"delta":{"tool_calls":[{"id":"t"}]}}]}', 1.1)
    assert (acc.events, acc.tool_events) == (1, 1)


def test_stream_errors_and_empty_streams_become_failures() -> None:
    acc = StreamAccumulator(Api.CHAT)
    acc.add(b'{"choices":[{"delta":{"content":"a"}}]}', 1.0)
    acc.add(b'{"error":{"message":"out of memory","code":500}}', 1.1)
    rec = acc.record(spec(), label="c1", t_queued=0.0, t_sent=0.0, status=200, error=None)
    assert not rec.success and rec.error is ErrorClass.STREAM_ERROR and "out of memory" in rec.error_text
    assert rec.output_source is OutputSource.EVENTS and rec.output_tokens == 1

    empty = StreamAccumulator(Api.CHAT)
    empty.add(b"[DONE]", 1.0)
    rec = empty.record(spec(), label="c1", t_queued=0.0, t_sent=0.0, status=200, error=None)
    assert rec.error is ErrorClass.NO_CONTENT and rec.ttft_s is None

    bad = StreamAccumulator(Api.CHAT)
    bad.add(b'{"choices":[{"delta":{"content":"a"}}]}', 1.0)
    bad.add(b"{not json", 1.1)
    assert bad.record(spec(), label="c1", t_queued=0.0, t_sent=0.0, status=200, error=None).error is (
        ErrorClass.BAD_EVENT
    )


def test_registry_names_and_record_ms_views() -> None:
    a = make_record(index=0, ttft=0.1, gaps=(0.01, 0.03))
    m = compute_metrics([a], t0_s=0.0, t1_s=1.0)
    values = bench_values(m)
    assert values["ttft_p99_ms"] == m.ttft.p99_ms == pytest.approx(100.0)
    assert values["itl_p50_ms"] == m.itl.median_ms and values["e2e_p99_ms"] == m.e2e.p99_ms
    assert a.ttft_ms == pytest.approx(100.0) and a.input_tokens == a.input_tokens_declared
    assert a.e2e_ms == pytest.approx(141.0) and a.tpot_ms == pytest.approx(20.5)
