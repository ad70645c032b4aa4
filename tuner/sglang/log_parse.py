"""SGLang log lines -> events: the patterns of every line that matters, and `parse_line`.

Pure functions over text (reference/sglang.md §4). Formats of 0.5.5 to 0.5.23 are read;
fields are read by key where their order changed between versions.
"""

from __future__ import annotations

import re

from tuner.sglang.log_devices import DEVICE_ERROR_LINE, DEVICE_FAULT, ENVIRONMENT_LINE, OOM, UNSUPPORTED
from tuner.sglang.log_events import (
    CaptureBegin,
    CaptureEnd,
    CaptureProgress,
    DecodeBatch,
    Deprecation,
    FailureKind,
    FailureLine,
    HttpServed,
    HttpUp,
    KvCacheAllocated,
    KvRetraction,
    KvSummary,
    LogEvent,
    MemoryPoolEnd,
    PrefillBatch,
    Ready,
    ServerArgs,
    SparseBackends,
    WeightLoadBegin,
    WeightLoadEnd,
)

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# Containers and Ray put their own prefix in front of SGLang's (`svc  | `, `(SGLangEngine pid=1) `).
_OUTER = re.compile(r"^(?:[\w.-]+\s+\| ?|\((?:\w+ )?pid=\d+(?:, ip=[\d.]+)?\) ?)")
# Date since 0.4, time only in 0.3 (`[23:17:01 TP7]`).
_PREFIX = re.compile(r"^\[(?:\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d(?:\.\d+)?(?: (?P<rank>[A-Z0-9 ]+?))?\] ?")
_NUM = r"-?\d+(?:\.\d+)?"


def strip_ansi(line: str) -> str:
    """The line without terminal colour codes (deprecation warnings are yellow from 0.5.10)."""
    return _ANSI.sub("", line)


# A full-width colon (U+FF1A), as CJK input writes `RuntimeError：...`: read as the ASCII one.
_WIDE_COLON = re.compile("\uff1a ?")


def clean_line(line: str) -> str:
    """The line as SGLang wrote it: no colour codes, no container or Ray prefix, no line end."""
    return _WIDE_COLON.sub(": ", _OUTER.sub("", strip_ansi(line), count=1).rstrip("\r\n"))


def has_prefix(line: str) -> bool:
    """True for a line that starts with SGLang's `[timestamp rank]` prefix (a new log record)."""
    return _PREFIX.match(line) is not None


_OOM_TEXT = OOM
_UNSUPPORTED_TEXT = UNSUPPORTED


_ANYWHERE = re.compile(r"^\^?\.\*(.*?)(?:\.\*)?$", re.S)


def _signature(
    kind: FailureKind, fatal: bool, *alternatives: str, flags: int = 0
) -> tuple[FailureKind, re.Pattern[str], bool]:
    """One failure signature; group 1 of the pattern is the detail worth reporting.

    An alternative written `.*X.*` (X anywhere on the line) is searched as X alone, in group
    `anywhere`, and its detail is the whole line: a leading `.*` would make every search quadratic.
    """
    specific = [a for a in alternatives if not _ANYWHERE.match(a)]
    anywhere = [m.group(1) for a in alternatives if (m := _ANYWHERE.match(a))]
    parts = [f"({'|'.join(specific)})"] if specific else ["()(?!)"]
    if anywhere:
        parts.append(f"(?P<anywhere>{'|'.join(anywhere)})")
    return kind, re.compile("|".join(parts), flags), fatal


# Order matters: the first signature a line matches names it (a capture failure that is an OOM is a capture).
_FAILURES = (
    _signature(
        FailureKind.BAD_ARGS,
        True,
        r"(?<=error: )(?:unrecognized arguments|ambiguous option|the following arguments are required).*",
        r"(?<=error: )argument \S+: (?:invalid|expected).*",
    ),
    _signature(
        FailureKind.CAPTURE_FAILED,
        True,
        r"Capture [\w ]*?(?:cuda|CUDA) graph failed.*",
        # 0.5.1x's piecewise runner, around its capture and its replays alike (the stage says which)
        r"Piecewise CUDA Graph failed with error.*",
    ),
    _signature(
        FailureKind.NOT_ENOUGH_MEMORY,
        True,
        r"Not enough memory\. Please try to increase --mem-fraction.*",
        r"Loaded weights leave no GPU memory for the KV cache.*",  # 2026 wording of the same guard
    ),
    _signature(
        FailureKind.KV_EXHAUSTED,
        True,
        r"(?:Prefill|Decode) out of memory\. Try to lower your batch size.*",
        r"Out of memory even after retracting.*",
    ),
    _signature(FailureKind.REQ_SLOTS_EXHAUSTED, True, r"alloc_req_slots runs out of memory.*"),
    _signature(
        FailureKind.CUDA_OOM,
        True,
        r"(?:torch\.(?:\w+\.)?OutOfMemoryError: )?(?:CUDA|HIP|NPU|XPU|MUSA|MPS) out of memory.*",
        r"torch\.(?:\w+\.)?OutOfMemoryError.*",
        r"(?:CUDA|HIP|MUSA|XPU) error: out of memory.*",
        r".*\b(?:hipErrorOutOfMemory|UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY)\b.*",
    ),
    _signature(FailureKind.UNSUPPORTED_ARCH, True, r".*(?:" + UNSUPPORTED.pattern + r").*"),
    _signature(
        FailureKind.NCCL_ERROR,
        True,
        r"^(?:[\w.]+(?:Error|Exception): )?NCCL error: .*",  # not the `raise` line above it
        r"\bnccl(?:InternalError|UnhandledCudaError|SystemError)\b.*",
        # NVSHMEM (DeepEP's transport): `.../nvshmem/src/...:N: non-zero status: 7 connect EPS failed`
        r".*nvshmem/src/\S+: non-zero status: \d+ .*failed.*",
        r".*\bnvshmem initialization failed.*",
    ),
    # ProcessGroupNCCL's watchdog (torch_npu's HCCL one copies it): a rank waited out a collective's
    # timeout; the watchdog then takes the process down. A hang: some rank never joined the collective.
    _signature(FailureKind.COLLECTIVE_TIMEOUT, True, r"(Watchdog caught collective operation timeout\b.*)"),
    # 0.4's profiler: the KV budget it measured is negative, and `Not enough memory` is raised next
    _signature(
        FailureKind.NOT_ENOUGH_MEMORY,
        True,
        r"(max_total_tokens=\d+ is larger than the profiled value -\d+.*)",
    ),
    _signature(FailureKind.MEMORY_IMBALANCE, True, r"The memory capacity is unbalanced.*"),
    _signature(FailureKind.ENVIRONMENT, True, *(f".*(?:{p}).*" for p in ENVIRONMENT_LINE)),
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
    # Before `soft` existed the watchdog always killed the server:
    # `Watchdog timeout (self.watchdog_timeout=300)` (0.5.6 and before).
    _signature(
        FailureKind.WATCHDOG, True, r"(?:^|\S+ )[Ww]atchdog timeout \(self\.watchdog_timeout=[^,()]*\).*"
    ),
    _signature(FailureKind.WATCHDOG, False, r"\S+ watchdog timeout \(.*"),
    # the watchdog's py-spy dump of the stuck process, printed before its `watchdog timeout` line
    _signature(FailureKind.WATCHDOG, False, r"(Pyspy dump for PID \d+.*)"),
    _signature(FailureKind.CUDA_ERROR, True, *DEVICE_ERROR_LINE),
    _signature(
        FailureKind.CHILD_EXCEPTION,
        True,
        r"(?:Scheduler|DetokenizerManager|DataParallelController|TokenizerManager) hit an exception.*",
    ),
    _signature(FailureKind.SUBPROCESS_CRASHED, True, r"Subprocess \S+ \(pid=\d+\) crashed with exit code.*"),
    _signature(FailureKind.RANK_DEAD, True, r"Rank \d+ scheduler (?:is dead|died during initialization).*"),
    _signature(FailureKind.INIT_FAILED, True, r"Initialization failed\..*"),
    _signature(FailureKind.SIGQUIT, True, r"Received sigquit from a child proces.*", r"SIGQUIT received\..*"),
    _signature(FailureKind.HEALTH_CHECK_FAILED, False, r"Health check failed\..*"),
    # libstdc++'s report of an uncaught C++ exception (`terminate called after throwing ...`, then
    # ` what():  <its message>`): the message says what broke
    _signature(FailureKind.EXCEPTION, False, r"^what\(\):\s+(.+)$"),
    # The last line of a traceback whose error has no signature above: what broke, for the message.
    _signature(
        FailureKind.EXCEPTION,
        False,
        r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt)(?::(?: .*)?)?$",
    ),
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
_ACCESS = re.compile(r'"(?:GET|POST|PUT|DELETE|HEAD) /\S* HTTP/[\d.]+" \d{3}\b')  # uvicorn's access log
_CAPTURING = re.compile(r"Capturing batches \(bs=\d+")  # the graph runner's tqdm description
_BATCH = re.compile(r"(?:Decode|Prefill) batch\b")
_DECODE = re.compile(r"Decode batch\b[^,#]*,?\s*(.*)$")
_PREFILL = re.compile(r"Prefill batch\b[^,#]*,?\s*(.*)$")
# 0.5: `KV cache pool is full. Retract requests. #retracted_reqs: ..`;
# 0.4: `Decode out of memory happened. #retracted_reqs: ..`
_RETRACT = re.compile(r"(?:KV cache pool is full\. Retract requests|Decode out of memory happened)\.(.*)$")
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
            detail = (message if m.group(1) is None else m.group(1)).strip()
            return FailureLine(
                kind=kind,
                fatal=fatal,
                detail=detail,
                line=message,
                oom=bool(_OOM_TEXT.search(message)),
                unsupported=bool(_UNSUPPORTED_TEXT.search(message)),
                fault=bool(DEVICE_FAULT.search(message)),
            )
    return None


def _server_args(msg: str) -> ServerArgs:
    found = {key: p.search(msg) for key, p in _ARG.items()}
    bs, max_bs, disable, mem = (m.group(1) if m else None for m in found.values())
    return ServerArgs(
        cuda_graph_bs=_ints(bs),
        cuda_graph_max_bs=int(max_bs) if max_bs not in (None, "None") else None,
        disable_cuda_graph=None if disable is None else disable == "True",
        mem_fraction_static=float(mem) if mem not in (None, "None") else None,
    )


def _capture(m: re.Match[str]) -> LogEvent:
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


def _summary(msg: str, m: re.Match[str]) -> KvSummary:
    f = _fields(msg)
    return KvSummary(
        max_total_num_tokens=int(m.group(1)),  # by the pattern: whatever precedes it on the line
        chunked_prefill_size=_int(f, "chunked_prefill_size"),
        max_prefill_tokens=_int(f, "max_prefill_tokens"),
        max_running_requests=_int(f, "max_running_requests"),
        context_len=_int(f, "context_len"),
        available_gpu_mem_gb=_num(f, "available_gpu_mem"),
    )


def _decode(m: re.Match[str], rank: str | None) -> DecodeBatch:
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


def _prefill(m: re.Match[str]) -> PrefillBatch:
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


def _kv_alloc(m: re.Match[str]) -> KvCacheAllocated:
    label = m.group(1).strip() or None
    post = label is not None and label.lower().startswith("post-capture")
    return KvCacheAllocated(
        tokens=int(m.group(3)), dtype=m.group(2), label=None if post else label, post_capture=post
    )


def parse_line(line: str) -> LogEvent | None:
    """The event one log line reports, or None for lines that matter to nobody."""
    rank, msg = _split_prefix(clean_line(line))
    if not msg:
        return None
    if _SERVER_ARGS.search(msg):
        return _server_args(msg)
    if _BATCH.match(msg):  # the serving loop's batch lines, most of a log: never a failure
        if m := _DECODE.match(msg):
            return _decode(m, rank)
        return _prefill(m) if (m := _PREFILL.match(msg)) else None
    failure = _failure(msg)
    if failure is not None:
        return failure
    if m := _BACKENDS.search(msg):
        return SparseBackends(kv=m.group(1), prefill=m.group(2), decode=m.group(3))
    if m := _BACKENDS_OLD.search(msg):
        return SparseBackends(prefill=m.group(1), decode=m.group(2), kv=m.group(3))
    if m := _CAPTURE.search(msg):
        return _capture(m)
    if m := _KV_ALLOC.search(msg):
        return _kv_alloc(m)
    if m := _SUMMARY.search(msg):
        return _summary(msg, m)
    if m := _DECODE.search(msg):
        return _decode(m, rank)
    if m := _PREFILL.search(msg):
        return _prefill(m)
    return _lifecycle(msg)


def _lifecycle(msg: str) -> LogEvent | None:
    """Load, pool, HTTP and readiness lines, retractions and deprecations."""
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
    if _ACCESS.search(msg):
        return HttpServed()
    if _CAPTURING.search(msg):
        return CaptureProgress()
    if m := _RETRACT.search(msg):
        f = _fields(m.group(1))
        return KvRetraction(
            retracted_reqs=_int(f, "#retracted_reqs"), new_tokens_gained=_int(f, "#new_tokens_gained")
        )
    if _DEPRECATED.search(msg):
        return Deprecation(message=msg)
    return None
