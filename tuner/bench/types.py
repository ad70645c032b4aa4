"""Values the benchmark stage produces: per-request records, aggregate metrics, results.

Units are in the names. Times of a record are `time.perf_counter()` seconds
(CLOCK_MONOTONIC, comparable across processes on one host). Missing is None
in our own fields; the SGLang-parity latency statistics follow SGLang's
convention of 0 for an empty list (reference bench-metrics §7) and say so.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from tuner.bench.settings import LoadPoint


class ErrorClass(str, Enum):
    """Why a request failed (a failure is data, never an exception)."""

    HTTP_STATUS = "http_status"  # the server answered with a status other than 200
    CONNECT_ERROR = "connect_error"  # refused, reset before the response, DNS
    CONNECT_TIMEOUT = "connect_timeout"
    FIRST_BYTE_TIMEOUT = "first_byte_timeout"  # no content event within timeouts.first_byte_s
    IDLE_TIMEOUT = "idle_timeout"  # no bytes for timeouts.idle_read_s once content flowed
    STREAM_ERROR = "stream_error"  # connection broke mid-stream, or an error object in the stream
    BAD_EVENT = "bad_event"  # an SSE data line that is not JSON
    NO_CONTENT = "no_content"  # a clean stream without a single content event
    SERVER_DIED = "server_died"  # cancelled because the server process died
    DEADLINE = "deadline"  # cancelled at the stage deadline
    INTERRUPTED = "interrupted"  # cancelled at a stop request (Ctrl-C, SIGTERM)
    CLIENT_ERROR = "client_error"  # anything else raised on our side (a bug; text has the repr)
    BAD_USAGE = "bad_usage"  # usage counts no server could mean (negative, absurdly large, not an integer)
    HANG = "hang"  # no progress on any open request for timeouts.idle_read_s: the server froze


class OutputSource(str, Enum):
    """Where a request's output token count came from."""

    USAGE = "usage"  # the server's usage.completion_tokens
    REQUESTED = "requested"  # no usage arrived: the requested max tokens (SGLang's fallback)
    EVENTS = "events"  # failed request without usage: the content events received (partial)


@dataclass(frozen=True, kw_only=True, slots=True)
class RequestRecord:
    """One request of a load point, success or failure, with its raw timings."""

    load_point: str
    index: int
    input_tokens_declared: int
    input_tokens_server: int | None  # usage.prompt_tokens; None when no usage arrived
    output_tokens_requested: int
    output_tokens: int  # usage.completion_tokens, else the requested count
    output_source: OutputSource
    success: bool
    error: ErrorClass | None = None
    error_text: str = ""
    status_code: int | None = None
    t_queued_s: float  # created, before the concurrency semaphore / arrival gap
    t_sent_s: float | None  # just before the HTTP request went out; None = never sent
    t_first_s: float | None = None  # first content event
    t_last_token_s: float | None = None  # last content event
    t_end_s: float | None = None  # last non-blank SSE line (usage and [DONE] included)
    itl_gaps_s: tuple[float, ...] = ()  # gaps between successive content events
    content_events: int = 0
    tool_call_events: int = 0  # tool-call-only deltas (not content, as in SGLang)
    text_sample: str | None = None  # the output's start, for a sample of the requests (the NaN check)

    @property
    def ttft_s(self) -> float | None:
        """t_first − t_sent."""
        if self.t_first_s is None or self.t_sent_s is None:
            return None
        return self.t_first_s - self.t_sent_s

    @property
    def e2e_s(self) -> float | None:
        """t_end − t_sent (SGLang's end point: the last SSE line)."""
        if self.t_end_s is None or self.t_sent_s is None:
            return None
        return self.t_end_s - self.t_sent_s

    @property
    def queue_s(self) -> float | None:
        """t_sent − t_queued: client-side queueing, kept out of TTFT (pitfall P8)."""
        if self.t_sent_s is None:
            return None
        return self.t_sent_s - self.t_queued_s

    @property
    def tpot_s(self) -> float | None:
        """(e2e − ttft) / (output_tokens − 1) when output_tokens > 1."""
        ttft, e2e = self.ttft_s, self.e2e_s
        if ttft is None or e2e is None or self.output_tokens <= 1:
            return None
        return (e2e - ttft) / (self.output_tokens - 1)

    @property
    def ttft_ms(self) -> float | None:
        """ttft_s in ms (the store's request column)."""
        return None if (v := self.ttft_s) is None else v * 1000.0

    @property
    def tpot_ms(self) -> float | None:
        """tpot_s in ms."""
        return None if (v := self.tpot_s) is None else v * 1000.0

    @property
    def e2e_ms(self) -> float | None:
        """e2e_s in ms."""
        return None if (v := self.e2e_s) is None else v * 1000.0

    @property
    def input_tokens(self) -> int:
        """The declared input length (what SGLang counts)."""
        return self.input_tokens_declared


@dataclass(frozen=True, kw_only=True, slots=True)
class LatencyStats:
    """mean / median / std (ddof=0) / p90 / p95 / p99 in ms; all 0 for an empty list (SGLang)."""

    mean_ms: float = 0.0
    median_ms: float = 0.0
    std_ms: float = 0.0
    p90_ms: float = 0.0
    p95_ms: float = 0.0
    p99_ms: float = 0.0
    count: int = 0  # how many values the statistics are over; 0 tells an empty list from a real 0


@dataclass(frozen=True, kw_only=True, slots=True)
class BenchMetrics:
    """The aggregate of one load point: SGLang bench_serving's fields plus diagnostics (§7)."""

    duration_s: float
    completed: int
    failed: int
    errors: tuple[tuple[str, int], ...]  # (ErrorClass value, count), sorted by class
    total_input_tokens: int  # declared (dataset) lengths of successful requests, as SGLang
    total_input_tokens_server: int | None  # Σ usage.prompt_tokens; None if no request had usage
    total_output_tokens: int
    request_throughput: float  # completed / duration
    input_throughput: float  # Σ declared input / duration
    input_throughput_server: float | None
    output_throughput: float  # Σ output tokens / duration
    total_throughput: float  # (Σ declared input + Σ output) / duration
    ttft: LatencyStats
    tpot: LatencyStats
    itl: LatencyStats  # per content event (chunk), pooled: SGLang's and vLLM's ITL
    e2e: LatencyStats
    max_itl_ms: float  # 0 when there are no gaps (SGLang)
    queue: LatencyStats  # client queueing, not in SGLang
    concurrency: float  # Σ e2e / duration
    max_output_tokens_per_s: float  # highest 1-second bucket (0 if nothing completed)
    max_concurrent_requests: int  # highest 1-second bucket (0 if nothing completed)
    steady_output_throughput: float | None  # tokens / s while in-flight ≥ 0.9·C; None without such a window
    steady_window_s: float | None
    tokens_per_content_event: float | None
    zero_gap_fraction: float | None  # share of ITL gaps < 50 µs; None without gaps
    output_tokens_source: str | None  # "usage" | "requested" | "mixed"; None if nothing completed




@dataclass(frozen=True, kw_only=True, slots=True)
class LoadPointResult:
    """One load point: what was asked, what was measured, and the raw records."""

    point: LoadPoint
    metrics: BenchMetrics
    records: tuple[RequestRecord, ...]
    warmup_requests: int  # warmup requests sent before T0 (0 = none)
    flushed: bool  # /flush_cache answered 200 before this point
    client_cpu_s: float | None = None  # client process CPU seconds over T0..T1 (µs per event = this / events)


@dataclass(frozen=True, kw_only=True, slots=True)
class BenchResult:
    """The whole benchmark stage of one trial."""

    points: tuple[LoadPointResult, ...]
    objective_point: int = -1  # index into points (settings.objective_point)
    model: str = ""
    crashed: bool = False  # the server died during the stage; results are partial
    deadline_hit: bool = False  # the stage deadline ended it; results are partial
    hung: bool = False  # no progress on any open request for the idle timeout ended it (a frozen server)
    client_bound: bool = False  # the client, not the server, may have been the bottleneck
    client_cpu_share: float  # client process CPU time / wall time of the stage
    loop_lag_p99_ms: float | None  # event-loop overshoot of a 10 ms sleep, p99; None if unsampled
    starved: bool = False  # other processes kept the client off the CPU: figures are noisy, not wrong
    run_queue_wait_share: float | None = None  # the loop's run-queue wait / runnable time; None: unknown
    duration_s: float

    @property
    def objective_metrics(self) -> BenchMetrics | None:
        """The metrics of the load point that feeds the objectives; None if it never ran."""
        if not self.points:
            return None
        try:
            return self.points[self.objective_point].metrics
        except IndexError:
            return None
