"""SGLang log events: the typed values `parse_line` turns one log line into.

One frozen dataclass per kind of line that matters (reference/sglang.md §4), the
failure signatures' `FailureKind`, and `LogEvent`, the union of them all.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TypeAlias

from tuner.config import Outcome


@dataclass(frozen=True, kw_only=True, slots=True)
class ServerArgs:
    """`server_args=ServerArgs(...)`: the resolved launch settings that matter to tuning."""

    cuda_graph_bs: tuple[int, ...] | None = None
    cuda_graph_max_bs: int | None = None
    disable_cuda_graph: bool | None = None
    mem_fraction_static: float | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class SparseBackends:
    """The NSA/DSA attention backends SGLang settled on."""

    prefill: str
    decode: str
    kv: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class WeightLoadBegin:
    avail_mem_gb: float | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class WeightLoadEnd:
    elapsed_s: float | None = None
    avail_mem_gb: float | None = None
    mem_usage_gb: float | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class KvCacheAllocated:
    """KV pool size; `label` for extra pools (draft, SWA), `post_capture` for the post-capture resize."""

    tokens: int
    dtype: str | None = None
    label: str | None = None
    post_capture: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryPoolEnd:
    avail_mem_gb: float | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class CaptureBegin:
    """CUDA-graph capture starts; graph is 'decode', 'prefill' or 'verify'."""

    graph: str
    draft: bool = False
    bs: tuple[int, ...] | None = None
    avail_mem_gb: float | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class CaptureEnd:
    graph: str
    draft: bool = False
    bs: tuple[int, ...] | None = None
    elapsed_s: float | None = None
    mem_usage_gb: float | None = None
    avail_mem_gb: float | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class KvSummary:
    """The scheduler's `max_total_num_tokens=..., available_gpu_mem=... GB` line."""

    max_total_num_tokens: int
    chunked_prefill_size: int | None = None
    max_prefill_tokens: int | None = None
    max_running_requests: int | None = None
    context_len: int | None = None
    available_gpu_mem_gb: float | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class HttpUp:
    host: str
    port: int


@dataclass(frozen=True, kw_only=True, slots=True)
class HttpServed:
    """An HTTP access line (`"GET /model_info HTTP/1.1" 200`): the HTTP server is up and answering."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CaptureProgress:
    """The graph runner's progress bar (`Capturing batches (bs=32 avail_mem=10.30 GB)`): a capture runs."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Ready:
    """`The server is fired up and ready to roll!`"""


@dataclass(frozen=True, kw_only=True, slots=True)
class DecodeBatch:
    """One decode log line (per DP rank, every 40 steps); fields it lacks are None."""

    running_req: int | None = None
    num_tokens: int | None = None
    token_usage: float | None = None
    cuda_graph: bool | None = None
    gen_throughput_tok_s: float | None = None
    queue_req: int | None = None
    rank: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class PrefillBatch:
    new_seq: int | None = None
    new_token: int | None = None
    cached_token: int | None = None
    token_usage: float | None = None
    running_req: int | None = None
    queue_req: int | None = None
    input_throughput_tok_s: float | None = None
    cuda_graph: bool | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class KvRetraction:
    """`KV cache pool is full. Retract requests.`: preemption, a throughput warning, not a crash."""

    retracted_reqs: int | None = None
    new_tokens_gained: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Deprecation:
    message: str


class FailureKind(str, Enum):
    """Failure signatures of §4.3, old and new versions."""

    BAD_ARGS = "bad_args"
    NOT_ENOUGH_MEMORY = "not_enough_memory"
    CUDA_OOM = "cuda_oom"
    CAPTURE_FAILED = "capture_failed"
    KV_EXHAUSTED = "kv_exhausted"
    REQ_SLOTS_EXHAUSTED = "req_slots_exhausted"
    MEMORY_IMBALANCE = "memory_imbalance"
    UNSUPPORTED_ARCH = "unsupported_arch"
    NAN = "nan"
    WATCHDOG = "watchdog"
    NCCL_ERROR = "nccl_error"
    COLLECTIVE_TIMEOUT = "collective_timeout"  # torch's process-group watchdog: a collective never completed
    CUDA_ERROR = "cuda_error"
    EXCEPTION = "exception"
    CHILD_EXCEPTION = "child_exception"
    SUBPROCESS_CRASHED = "subprocess_crashed"
    RANK_DEAD = "rank_dead"
    INIT_FAILED = "init_failed"
    SIGQUIT = "sigquit"
    HEALTH_CHECK_FAILED = "health_check_failed"
    ENVIRONMENT = "environment"  # the machine, its network, another process: no launch flag causes it

    @property
    def is_root_cause(self) -> bool:
        """False for the generic and teardown lines that follow (or wrap) the real error."""
        return self not in _GENERIC and self not in _TEARDOWN

    @property
    def is_teardown(self) -> bool:
        """True for the lines of the tree going down after a child failed: they say nothing of why."""
        return self in _TEARDOWN


_GENERIC = frozenset({FailureKind.CUDA_ERROR, FailureKind.CHILD_EXCEPTION, FailureKind.EXCEPTION})
_TEARDOWN = frozenset(
    {
        FailureKind.SUBPROCESS_CRASHED,
        FailureKind.RANK_DEAD,
        FailureKind.INIT_FAILED,
        FailureKind.SIGQUIT,
        FailureKind.HEALTH_CHECK_FAILED,
    }
)


@dataclass(frozen=True, kw_only=True, slots=True)
class FailureLine:
    """A line matching a failure signature; `fatal` when the server dies after it."""

    kind: FailureKind
    fatal: bool
    detail: str
    line: str
    oom: bool = False
    unsupported: bool = False
    fault: bool = False  # an asynchronous device fault: reported wherever the device next synchronised


@dataclass(frozen=True, kw_only=True, slots=True)
class FailureVerdict:
    """Why a server failed, as its log proves it.

    backend: the attention backend the failing frames or error message name (`trtllm`,
    `flashmla_kv`, `fa3`, `tilelang`, `aiter`, `flashinfer`, `triton`, `dsa` when only the
    DSA backend itself is named), None when the log names none; role: `prefill` or `decode`
    when the frames, or SGLang's announced backends, say which role failed.
    """

    outcome: Outcome
    message: str
    excerpt: str
    backend: str | None = None
    role: str | None = None
    stage: str | None = None  # load, capture, warmup or serving: where it failed, as the log proves


LogEvent: TypeAlias = (
    ServerArgs
    | SparseBackends
    | WeightLoadBegin
    | WeightLoadEnd
    | KvCacheAllocated
    | MemoryPoolEnd
    | CaptureBegin
    | CaptureEnd
    | KvSummary
    | HttpUp
    | HttpServed
    | CaptureProgress
    | Ready
    | DecodeBatch
    | PrefillBatch
    | KvRetraction
    | Deprecation
    | FailureLine
)
