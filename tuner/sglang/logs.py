"""SGLang log lines: what they say, what state they add up to, and why a server died.

Pure functions over text (reference/sglang.md §4): `parse_line` turns one line into an
event, `LogState.apply` folds events into what the server reported about itself,
`classify_failure` names the first root cause among a dead server's lines, `is_fatal`
tells a line after which the server will die. Formats of 0.5.5 to 0.5.23 are read;
fields are read by key where their order changed between versions.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import TypeAlias

from tuner.config import Outcome, Phase

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?(?: (?P<rank>[A-Z0-9 ]+?))?\] ?")
_NUM = r"-?\d+(?:\.\d+)?"


def strip_ansi(line: str) -> str:
    """The line without terminal colour codes (deprecation warnings are yellow from 0.5.10)."""
    return _ANSI.sub("", line)


# --------------------------------------------------------------------------- events


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
    MEMORY_IMBALANCE = "memory_imbalance"
    UNSUPPORTED_ARCH = "unsupported_arch"
    NAN = "nan"
    WATCHDOG = "watchdog"
    CUDA_ERROR = "cuda_error"
    CHILD_EXCEPTION = "child_exception"
    SUBPROCESS_CRASHED = "subprocess_crashed"
    RANK_DEAD = "rank_dead"
    INIT_FAILED = "init_failed"
    SIGQUIT = "sigquit"
    HEALTH_CHECK_FAILED = "health_check_failed"

    @property
    def is_root_cause(self) -> bool:
        """False for the generic and teardown lines that follow (or wrap) the real error."""
        return self not in _SECONDARY


_SECONDARY = frozenset(
    {
        FailureKind.CUDA_ERROR,
        FailureKind.CHILD_EXCEPTION,
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
    | Ready
    | DecodeBatch
    | PrefillBatch
    | KvRetraction
    | Deprecation
    | FailureLine
)


# --------------------------------------------------------------------------- parsing

_SM = (
    r"(?:Unsupported architecture|not supported on \.target '?sm_\d+"
    r"|ptxas fatal\s*: Value '?sm_\d+'? is not defined)"
)
_OOM_TEXT = re.compile(r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory", re.I)
_UNSUPPORTED_TEXT = re.compile(_SM)


def _signature(
    kind: FailureKind, fatal: bool, *alternatives: str
) -> tuple[FailureKind, re.Pattern[str], bool]:
    """One failure signature; group 1 of the pattern is the detail worth reporting."""
    return kind, re.compile("(" + "|".join(alternatives) + ")"), fatal


# Order matters: the first signature a line matches names it (a capture failure that is an OOM is a capture).
_FAILURES = (
    _signature(
        FailureKind.BAD_ARGS,
        True,
        r"(?<=error: )(?:unrecognized arguments|ambiguous option|the following arguments are required).*",
        r"(?<=error: )argument \S+: (?:invalid|expected).*",
    ),
    _signature(FailureKind.CAPTURE_FAILED, True, r"Capture [\w ]*?(?:cuda|CUDA) graph failed.*"),
    _signature(
        FailureKind.NOT_ENOUGH_MEMORY, True, r"Not enough memory\. Please try to increase --mem-fraction.*"
    ),
    _signature(
        FailureKind.KV_EXHAUSTED,
        True,
        r"(?:Prefill|Decode) out of memory\. Try to lower your batch size.*",
        r"Out of memory even after retracting.*",
    ),
    _signature(
        FailureKind.CUDA_OOM,
        True,
        r"(?:torch\.(?:cuda\.)?OutOfMemoryError: )?CUDA out of memory.*",
        r"torch\.(?:cuda\.)?OutOfMemoryError.*",
        r"CUDA error: out of memory.*",
    ),
    _signature(FailureKind.UNSUPPORTED_ARCH, True, r".*" + _SM + r".*"),
    _signature(FailureKind.MEMORY_IMBALANCE, True, r"The memory capacity is unbalanced.*"),
    _signature(
        FailureKind.NAN, False, r"Detected errors during sampling! NaN in the logits.*", r"NaN detected in .*"
    ),
    _signature(
        FailureKind.NAN,
        True,
        r"NaN detected!.*",
        r".*probability tensor contains either `?inf`?, `?nan`? or element < 0.*",
    ),
    _signature(
        FailureKind.WATCHDOG,
        True,
        r"\S+ watchdog timeout \(self\.watchdog_timeout=[^,]*, self\.soft=False\).*",
    ),
    _signature(FailureKind.WATCHDOG, False, r"\S+ watchdog timeout \(.*"),
    _signature(FailureKind.CUDA_ERROR, True, r"CUDA error: .*", r".*device-side assert triggered.*"),
    _signature(
        FailureKind.CHILD_EXCEPTION,
        True,
        r"(?:Scheduler|DetokenizerManager|DataParallelController|TokenizerManager) hit an exception.*",
    ),
    _signature(FailureKind.SUBPROCESS_CRASHED, True, r"Subprocess \S+ \(pid=\d+\) crashed with exit code.*"),
    _signature(FailureKind.RANK_DEAD, True, r"Rank \d+ scheduler (?:is dead|died during initialization).*"),
    _signature(FailureKind.INIT_FAILED, True, r"Initialization failed\..*"),
    _signature(
        FailureKind.SIGQUIT, True, r"Received sigquit from a child process.*", r"SIGQUIT received\..*"
    ),
    _signature(FailureKind.HEALTH_CHECK_FAILED, False, r"Health check failed\..*"),
)

_SERVER_ARGS = re.compile(r"server_args=ServerArgs\(")
_ARG = {
    "bs": re.compile(r"(?<!\w)cuda_graph_bs(?:_decode)?=(None|\[[^\]]*\])"),
    "max_bs": re.compile(r"(?<!\w)cuda_graph_max_bs(?:_decode)?=(None|\d+)"),
    "disable": re.compile(r"(?<!\w)disable_cuda_graph=(True|False)"),
    "mem": re.compile(r"(?<!\w)mem_fraction_static=(None|[\d.]+)"),
}
_BACKENDS = re.compile(r"Set (?:NSA|DSA) backends for (.+?): prefill=(\w+), decode=(\w+)")
_BACKENDS_OLD = re.compile(
    r"Setting (?:NSA|DSA) backend to (\w+) for prefill and (\w+) for decode(?: for (.+?))?\.?$"
)
_LOAD_BEGIN = re.compile(r"Load weight begin\.")
_LOAD_END = re.compile(r"Load weight end\.")
_KV_ALLOC = re.compile(r"^(.*?)KV [Cc]ache (?:is )?allocated\. (?:dtype: (\S+), )?#tokens: (\d+)")
_POOL_END = re.compile(r"Memory pool end\.")
_CAPTURE = re.compile(r"Capture (.*?)(?:cuda|CUDA) graph (begin|end)\.(.*)$")
_SUMMARY = re.compile(r"max_total_num_tokens=(\d+)")
_UVICORN = re.compile(r"Uvicorn running on https?://(\[[^\]]+\]|[^\s:/]+):(\d+)")
_READY = re.compile(r"The server is fired up and ready to roll!")
_DECODE = re.compile(r"Decode batch\b[^,#]*,?\s*(.*)$")
_PREFILL = re.compile(r"Prefill batch\b[^,#]*,?\s*(.*)$")
_RETRACT = re.compile(r"KV cache pool is full\. Retract requests\.(.*)$")
_DEPRECATED = re.compile(r"\bdeprecated\b", re.I)
_PAIRS = re.compile(r"([#A-Za-z](?:[^:,=.]|\.(?!\s))*?)(?::\s*|=)(\[[^\]]*\]|[^,]+?)(?=,|\.?\s*$|\.\s)")


def _split_prefix(line: str) -> tuple[str | None, str]:
    m = _PREFIX.match(line)
    if m is None:
        return None, line.strip()
    return m.group("rank"), line[m.end() :].strip()


def _fields(text: str) -> dict[str, str]:
    """`key: value, key=value GB, ...` -> {key: value}, keys and values stripped of units."""
    out: dict[str, str] = {}
    for key, value in _PAIRS.findall(text):
        out.setdefault(key.strip().lower(), value.strip())
    return out


def _num(fields: dict[str, str], *keys: str) -> float | None:
    for key in keys:
        if key in fields:
            m = re.match(_NUM, fields[key])
            if m:
                return float(m.group())
    return None


def _int(fields: dict[str, str], *keys: str) -> int | None:
    value = _num(fields, *keys)
    return None if value is None else int(value)


def _bool(fields: dict[str, str], key: str) -> bool | None:
    value = fields.get(key)
    return None if value is None else value.startswith("True")


def _ints(text: str | None) -> tuple[int, ...] | None:
    if text is None or not text.startswith("["):
        return None
    return tuple(int(x) for x in re.findall(r"-?\d+", text))


def _failure(message: str) -> FailureLine | None:
    for kind, pattern, fatal in _FAILURES:
        m = pattern.search(message)
        if m:
            detail = m.group(1).strip()
            return FailureLine(
                kind=kind,
                fatal=fatal,
                detail=detail,
                line=message,
                oom=bool(_OOM_TEXT.search(message)),
                unsupported=bool(_UNSUPPORTED_TEXT.search(message)),
            )
    return None


def parse_line(line: str) -> LogEvent | None:
    """The event one log line reports, or None for lines that matter to nobody."""
    rank, msg = _split_prefix(strip_ansi(line))
    if not msg:
        return None
    if _SERVER_ARGS.search(msg):
        found = {key: p.search(msg) for key, p in _ARG.items()}
        bs, max_bs, disable, mem = (m.group(1) if m else None for m in found.values())
        return ServerArgs(
            cuda_graph_bs=_ints(bs),
            cuda_graph_max_bs=int(max_bs) if max_bs not in (None, "None") else None,
            disable_cuda_graph=None if disable is None else disable == "True",
            mem_fraction_static=float(mem) if mem not in (None, "None") else None,
        )
    failure = _failure(msg)
    if failure is not None:
        return failure
    if m := _BACKENDS.search(msg):
        return SparseBackends(kv=m.group(1), prefill=m.group(2), decode=m.group(3))
    if m := _BACKENDS_OLD.search(msg):
        return SparseBackends(prefill=m.group(1), decode=m.group(2), kv=m.group(3))
    if m := _CAPTURE.search(msg):
        words, stage, rest = m.group(1).lower(), m.group(2), m.group(3)
        f = _fields(rest)
        graph = (
            "prefill"
            if ("prefill" in words or "piecewise" in words)
            else "verify"
            if "verify" in words
            else "decode"
        )
        common = {
            "graph": graph,
            "draft": "draft" in words,
            "bs": _ints(f.get("bs")),
            "avail_mem_gb": _num(f, "avail mem"),
        }
        if stage == "begin":
            return CaptureBegin(**common)  # type: ignore[arg-type]
        elapsed = _num(f, "elapsed") if "elapsed" in f else _num(f, "time elapsed")
        return CaptureEnd(elapsed_s=elapsed, mem_usage_gb=_num(f, "mem usage"), **common)  # type: ignore[arg-type]
    if m := _KV_ALLOC.search(msg):
        label = m.group(1).strip() or None
        post = label is not None and label.lower().startswith("post-capture")
        return KvCacheAllocated(tokens=int(m.group(3)), dtype=m.group(2), label=None if post else label,
                                post_capture=post)  # fmt: skip
    if _SUMMARY.search(msg):
        f = _fields(msg)
        return KvSummary(
            max_total_num_tokens=int(f["max_total_num_tokens"]),
            chunked_prefill_size=_int(f, "chunked_prefill_size"),
            max_prefill_tokens=_int(f, "max_prefill_tokens"),
            max_running_requests=_int(f, "max_running_requests"),
            context_len=_int(f, "context_len"),
            available_gpu_mem_gb=_num(f, "available_gpu_mem"),
        )
    if m := _DECODE.search(msg):
        f = _fields(m.group(1))
        return DecodeBatch(
            running_req=_int(f, "#running-req"),
            num_tokens=_int(f, "#token"),
            token_usage=_num(f, "token usage"),
            cuda_graph=_bool(f, "cuda graph"),
            gen_throughput_tok_s=_num(f, "gen throughput (token/s)"),
            queue_req=_int(f, "#queue-req"),
            rank=rank,
        )
    if m := _PREFILL.search(msg):
        f = _fields(m.group(1))
        return PrefillBatch(
            new_seq=_int(f, "#new-seq"),
            new_token=_int(f, "#new-token"),
            cached_token=_int(f, "#cached-token"),
            token_usage=_num(f, "token usage"),
            running_req=_int(f, "#running-req"),
            queue_req=_int(f, "#queue-req"),
            input_throughput_tok_s=_num(f, "input throughput (token/s)"),
            cuda_graph=_bool(f, "cuda graph"),
        )
    if _LOAD_BEGIN.search(msg):
        return WeightLoadBegin(avail_mem_gb=_num(_fields(msg), "avail mem"))
    if _LOAD_END.search(msg):
        f = _fields(msg)
        return WeightLoadEnd(elapsed_s=_num(f, "elapsed"), avail_mem_gb=_num(f, "avail mem"),
                             mem_usage_gb=_num(f, "mem usage"))  # fmt: skip
    if _POOL_END.search(msg):
        return MemoryPoolEnd(avail_mem_gb=_num(_fields(msg), "avail mem"))
    if m := _UVICORN.search(msg):
        return HttpUp(host=m.group(1).strip("[]"), port=int(m.group(2)))
    if _READY.search(msg):
        return Ready()
    if m := _RETRACT.search(msg):
        f = _fields(m.group(1))
        return KvRetraction(
            retracted_reqs=_int(f, "#retracted_reqs"), new_tokens_gained=_int(f, "#new_tokens_gained")
        )
    if _DEPRECATED.search(msg):
        return Deprecation(message=msg)
    return None


def is_fatal(line: str) -> bool:
    """True for a line after which the server will die (record the crash before the process exits)."""
    event = parse_line(line)
    return isinstance(event, FailureLine) and event.fatal


def nan_lines(lines: Iterable[str]) -> list[str]:
    """The lines reporting NaN/inf in logits or probabilities, ANSI-stripped."""
    out = []
    for line in lines:
        event = parse_line(line)
        if isinstance(event, FailureLine) and event.kind is FailureKind.NAN:
            out.append(strip_ansi(line).rstrip())
    return out


# --------------------------------------------------------------------------- state


@dataclass(frozen=True, kw_only=True, slots=True)
class LogState:
    """What a server's log said about it so far; `apply` one event at a time.

    stage: 'start', 'load' (weights), 'kv' (KV pool), 'capture' (CUDA graphs), 'warmup'
    (after capture, before ready) or 'ready'. Lines come from every TP rank; all ranks
    report the same sizes, so the last one read wins.
    """

    stage: str = "start"
    mem_fraction_static: float | None = None
    kv_tokens_log: int | None = None
    max_total_num_tokens: int | None = None
    available_gpu_mem_gb: float | None = None
    captured_bs: tuple[int, ...] | None = None
    cuda_graph: bool | None = None
    backends: tuple[str, str] | None = None
    weights_gb: float | None = None
    http_up: bool = False
    port: int | None = None
    ready_seen: bool = False
    last_decode: DecodeBatch | None = None
    retractions: int = 0
    deprecations: tuple[str, ...] = ()
    nan_lines: tuple[str, ...] = ()
    first_fatal: str | None = None
    _args_bs: tuple[int, ...] | None = None
    _capture_bs: tuple[int, ...] | None = None

    @classmethod
    def from_lines(cls, lines: Iterable[str]) -> LogState:
        state = cls()
        for line in lines:
            state = state.apply(parse_line(line))
        return state

    def apply(self, event: LogEvent | None) -> LogState:
        """The state after one more event (None, for an unknown line, changes nothing)."""
        if event is None:
            return self
        if isinstance(event, ServerArgs):
            return replace(
                self,
                mem_fraction_static=event.mem_fraction_static,
                cuda_graph=False if event.disable_cuda_graph else self.cuda_graph,
                _args_bs=event.cuda_graph_bs,
            )
        if isinstance(event, SparseBackends):
            return replace(self, backends=(event.prefill, event.decode))
        if isinstance(event, WeightLoadBegin):
            return replace(self, stage="load")
        if isinstance(event, WeightLoadEnd):
            return replace(self, stage="kv", weights_gb=event.mem_usage_gb)
        if isinstance(event, KvCacheAllocated):
            take = event.label is None or self.kv_tokens_log is None
            return replace(self, stage="kv", kv_tokens_log=event.tokens if take else self.kv_tokens_log)
        if isinstance(event, CaptureBegin):
            keep = event.graph != "decode" or event.draft
            return replace(self, stage="capture", _capture_bs=self._capture_bs if keep else event.bs)
        if isinstance(event, CaptureEnd):
            if event.graph != "decode" or event.draft:
                return replace(self, stage="warmup")
            bs = event.bs or self._capture_bs or self._args_bs
            return replace(self, stage="warmup", cuda_graph=True, captured_bs=bs)
        if isinstance(event, KvSummary):
            return replace(
                self,
                stage="warmup" if self.stage in ("start", "load", "kv") else self.stage,
                max_total_num_tokens=event.max_total_num_tokens,
                available_gpu_mem_gb=event.available_gpu_mem_gb,
            )
        if isinstance(event, HttpUp):
            return replace(self, http_up=True, port=event.port)
        if isinstance(event, Ready):
            return replace(self, stage="ready", ready_seen=True)
        if isinstance(event, DecodeBatch):
            return replace(self, last_decode=event)
        if isinstance(event, KvRetraction):
            return replace(self, retractions=self.retractions + 1)
        if isinstance(event, Deprecation):
            return replace(self, deprecations=(*self.deprecations, event.message))
        if isinstance(event, FailureLine):
            nan = (*self.nan_lines, event.line) if event.kind is FailureKind.NAN else self.nan_lines
            fatal = self.first_fatal if self.first_fatal is not None or not event.fatal else event.line
            return replace(self, nan_lines=nan, first_fatal=fatal)
        return self


# --------------------------------------------------------------------------- classification

_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)\b:? ?(.*)$")
_TRACEBACK_START = re.compile(r"Traceback \(most recent call last\)|hit an exception")
_MAX_EXCERPT = 40


def classify_failure(
    lines: Sequence[str], *, exit_code: int | None, phase: Phase
) -> tuple[Outcome, str, str]:
    """(outcome, one-line message, excerpt of the proving lines) for a server that failed.

    The first root cause wins over the teardown lines that follow it (sigquit, rank
    dead, initialization failed) and over the generic "hit an exception" wrapper.
    """
    clean = [strip_ansi(line).rstrip("\r\n") for line in lines]
    state = LogState()
    best: tuple[int, int, FailureLine, LogState] | None = None
    for i, line in enumerate(clean):
        event = parse_line(line)
        if isinstance(event, FailureLine):
            rank = _priority(event)
            if best is None or rank < best[0]:
                best = (rank, i, event, state)
        state = state.apply(event)
    if best is None:
        tail = clean[-20:]
        return (
            Outcome.CRASHED,
            f"server {_exit_text(exit_code)} with no recognised error in its log",
            "\n".join(tail),
        )
    _, i, event, before = best
    if event.kind is FailureKind.CHILD_EXCEPTION and (j := _exception_after(clean, i)) is not None:
        i, event = j, replace(event, detail=clean[j].strip())  # the traceback's last line says what broke
    outcome, message = _verdict(event, before, exit_code, phase)
    return outcome, _one_line(message), _excerpt(clean, i)


def _priority(event: FailureLine) -> int:
    if event.kind.is_root_cause and (event.fatal or event.kind is FailureKind.NAN):
        return 0
    return 1 if event.kind.is_root_cause else 2


def _verdict(
    event: FailureLine, before: LogState, exit_code: int | None, phase: Phase
) -> tuple[Outcome, str]:
    kind, detail = event.kind, event.detail
    stage = _stage(before, phase)
    if kind is FailureKind.BAD_ARGS and exit_code in (2, None):
        return Outcome.BAD_FLAG, f"SGLang rejected the arguments: {detail}"
    if kind is FailureKind.NOT_ENOUGH_MEMORY:
        return Outcome.NOT_ENOUGH_MEMORY, f"no room for the KV cache: {detail}"
    if kind is FailureKind.CAPTURE_FAILED:
        if event.unsupported:
            return Outcome.UNSUPPORTED, f"kernel not built for this GPU at capture: {detail}"
        if event.oom:
            return Outcome.OOM, f"CUDA out of memory at capture: {detail}"
        return Outcome.CAPTURE_FAILED, f"CUDA-graph capture failed: {detail}"
    if kind is FailureKind.CUDA_OOM:
        return Outcome.OOM, f"CUDA out of memory {stage}: {detail}"
    if kind is FailureKind.KV_EXHAUSTED:
        return Outcome.OOM, f"KV cache exhausted {stage}: {detail}"
    if kind is FailureKind.UNSUPPORTED_ARCH:
        return Outcome.UNSUPPORTED, f"kernel not built for this GPU {stage}: {detail}"
    if kind is FailureKind.NAN:
        return Outcome.NAN, f"NaN in the model's output {stage}: {detail}"
    if kind in (FailureKind.WATCHDOG, FailureKind.HEALTH_CHECK_FAILED):
        return Outcome.HANG, f"server hung {stage}: {detail}"
    if kind is FailureKind.MEMORY_IMBALANCE:
        return Outcome.INFRA_ERROR, f"another process holds GPU memory: {detail}"
    return Outcome.CRASHED, f"server {_exit_text(exit_code)} {stage}: {detail}"


def _stage(state: LogState, phase: Phase) -> str:
    if state.ready_seen or phase in (Phase.GATE, Phase.BENCH):
        return "under load"
    return {"capture": "at capture", "warmup": "at warmup"}.get(state.stage, "at load")


def _exception_after(lines: Sequence[str], i: int) -> int | None:
    """Index of the `SomeError: message` line that ends the traceback starting at line i."""
    for j in range(i + 1, min(i + 400, len(lines))):
        if _PREFIX.match(lines[j]):
            break
        if _EXCEPTION_LINE.match(lines[j].strip()):
            return j
    return None


def _exit_text(exit_code: int | None) -> str:
    if exit_code is None:
        return "failed (still running)"
    if exit_code == -9:
        return (
            "exited with code -9 (SIGKILL: SGLang kills its own tree after a child fails, or the OOM killer)"
        )
    return f"exited with code {exit_code}"


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _excerpt(lines: Sequence[str], i: int) -> str:
    """The proving line with the traceback it ends (if any) and a few lines around it, at most 40."""
    start = max(i - 3, 0)
    for j in range(i, max(i - 500, -1), -1):
        if _TRACEBACK_START.search(lines[j]):
            start = max(j - 1, 0)
            break
    end = min(i + 4, len(lines))
    window = list(lines[start:end])
    if len(window) > _MAX_EXCERPT:
        keep_tail = _MAX_EXCERPT - 6
        window = [
            *window[:5],
            f"... ({len(window) - _MAX_EXCERPT + 1} lines left out) ...",
            *window[-keep_tail:],
        ]
    return "\n".join(window)
