"""Builders of real gate and benchmark results (metrics through compute_metrics) for unit tests."""

from __future__ import annotations

from tuner.bench.metrics import compute_metrics
from tuner.bench.settings import LoadPoint
from tuner.bench.types import BenchResult, ErrorClass, LoadPointResult, OutputSource, RequestRecord
from tuner.gate.checks import GateAnswer, GateResult, GateRound, GateVerdict


def make_record(
    index: int,
    *,
    label: str = "c64",
    t_sent_s: float = 100.0,
    ttft_s: float = 0.05,
    e2e_s: float = 0.9,
    output_tokens: int = 256,
    itl_gaps_s: tuple[float, ...] = (0.010, 0.011, 0.012),
    success: bool = True,
) -> RequestRecord:
    """One request: a success with the given timings, or a failure by idle timeout."""
    if not success:
        return RequestRecord(
            load_point=label,
            index=index,
            input_tokens_declared=128,
            input_tokens_server=None,
            output_tokens_requested=output_tokens,
            output_tokens=0,
            output_source=OutputSource.EVENTS,
            success=False,
            error=ErrorClass.IDLE_TIMEOUT,
            error_text="read timeout",
            t_queued_s=t_sent_s,
            t_sent_s=t_sent_s,
            t_end_s=t_sent_s + e2e_s,
        )
    return RequestRecord(
        load_point=label,
        index=index,
        input_tokens_declared=128,
        input_tokens_server=128,
        output_tokens_requested=output_tokens,
        output_tokens=output_tokens,
        output_source=OutputSource.USAGE,
        success=True,
        t_queued_s=t_sent_s,
        t_sent_s=t_sent_s,
        t_first_s=t_sent_s + ttft_s,
        t_last_token_s=t_sent_s + e2e_s,
        t_end_s=t_sent_s + e2e_s,
        itl_gaps_s=itl_gaps_s,
        content_events=len(itl_gaps_s) + 1,
    )


def make_point(
    concurrency: int, n_records: int, *, duration_s: float = 10.0, fail_every: int = 0, ttft_s: float = 0.05
) -> LoadPointResult:
    """A load point of `n_records` requests over `duration_s`; every `fail_every`-th one fails."""
    label = LoadPoint(concurrency=concurrency).label
    records = tuple(
        make_record(
            i,
            label=label,
            t_sent_s=100.0 + i * 0.01,
            ttft_s=ttft_s,
            success=not (fail_every and i % fail_every == fail_every - 1),
        )
        for i in range(n_records)
    )
    metrics = compute_metrics(records, t0_s=100.0, t1_s=100.0 + duration_s, concurrency=concurrency)
    return LoadPointResult(
        point=LoadPoint(concurrency=concurrency),
        metrics=metrics,
        records=records,
        warmup_requests=0,
        flushed=True,
    )


def make_bench(*, n_records: int = 4, client_bound: bool = False, fail_every: int = 0) -> BenchResult:
    """Two load points (c8 with 2 requests, c64 with `n_records`), the last one the objective point."""
    return BenchResult(
        points=(make_point(8, 2, duration_s=40.0), make_point(64, n_records, fail_every=fail_every)),
        client_bound=client_bound,
        client_cpu_share=0.02,
        loop_lag_p99_ms=0.4,
        duration_s=60.0,
    )


def make_gate() -> GateResult:
    """A passed gate with two answers."""
    answers = (
        GateAnswer(
            prompt_name="capital",
            round=GateRound.SEQUENTIAL,
            index=0,
            text="Paris",
            finish_reason="stop",
            verdict=GateVerdict.PASSED,
        ),
        GateAnswer(
            prompt_name="arithmetic",
            round=GateRound.SEQUENTIAL,
            index=1,
            text="42",
            verdict=GateVerdict.PASSED,
        ),
    )
    return GateResult(verdict=GateVerdict.PASSED, reason=None, answers=answers, burst_size=16, duration_s=4.2)
