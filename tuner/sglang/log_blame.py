"""What the tracebacks of a failed SGLang server prove: where it was, and which attention backend failed.

Pure functions over ANSI-stripped log lines. A traceback's frames tell the stage when the log
lines do not (a scheduler crash in its serving loop is "under load" even if no batch line was
printed; a crash in the CUDA-graph runner is "at capture"), and the frames and error message
of a failure name the attention backend it happened in, if any: only what the log shows,
never a guess.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from tuner.sglang.log_parse import has_prefix

TRACEBACK_START = re.compile(r"Traceback \(most recent call last\)|hit an exception|^Exception in \w+:")
_MAX_BLOCK = 400

# Scheduler frames that only run once the server serves (0.2 names last).
_SERVING_FRAME = re.compile(
    r"\bin (?:event_loop_\w+|run_event_loop|dispatch_event_loop|run_batch|forward_thread_func"
    r"|process_batch_result\w*|get_next_batch_to_run|update_running_batch|get_new_batch_prefill"
    r"|self_check_during_idle|on_idle|loop_for_forward|exposed_step|forward_step)\b"
    r"|managers/schedule_(?:batch|policy)\.py\""  # batches are built and admitted only while serving
    # the detokenizer only ever handles outputs
    r"|detokenizer_manager\.py\", line \d+,? in (?!run_detokenizer_process\b|__init__\b)\w+"
)
# A traceback's code line that calls the scheduler's event loop: initialisation is over, it serves.
_SERVING_CALL = re.compile(r"^\s+(?:[\w.]+\.)?(?:run_event_loop|dispatch_event_loop|event_loop_\w+)\(")
# Frames of CUDA-graph capture (decode graphs, prefill/piecewise graphs, their set-up).
_CAPTURE_FRAME = re.compile(
    r"\bin (?:capture|capture_one_batch_size|init_cuda_graphs|init_device_graphs|init_prefill_cuda_graph"
    r"|init_all_cuda_graphs)\b"
    r"|cuda_graph_runner\.py\", line \d+,? in __init__"
)

_FRAME = re.compile(r'File "(?P<path>[^"]+)", line \d+,? in (?P<func>[\w<>.]+)')
_PATH = re.compile(r"(?P<path>\S*sglang/srt/\S+?\.py)(?::\d+)?(?: in (?P<func>\w+))?")
_ATTENTION = re.compile(r"layers/attention/(?:[\w/]*/)?(?P<stem>\w+)\.py")
_CARET = re.compile(r"^\s*[~^]+\s*$")

# Backend names in attention file names and `_forward_<backend>` methods, most specific first.
_BACKEND_TOKENS = (
    ("trtllm", "trtllm"),
    ("flashmla_sparse", "flashmla_sparse"),
    ("flashmla_kv", "flashmla_kv"),
    ("flashmla_auto", "flashmla_auto"),
    ("flashmla", "flashmla"),
    ("flashattention", "fa3"),
    ("fa3", "fa3"),
    ("tilelang", "tilelang"),
    ("aiter", "aiter"),
    ("flashinfer", "flashinfer"),
    ("triton", "triton"),
    ("dsa_backend", "dsa"),
    ("nsa_backend", "dsa"),
)
_FORWARD_METHOD = re.compile(r"_forward_(\w+)")
# Kernel-library evidence in an error message or frame path that names one backend only.
_LIBRARY = (
    (re.compile(r"TllmGen|trtllm[/_]|fmhaRunner", re.I), "trtllm"),
    (re.compile(r"flash_mla|FlashMLA"), "flashmla"),
    (re.compile(r"include/flashinfer/attention/"), "flashinfer"),  # FlashInfer's attention kernel headers
)
_PREFILL_HINT = re.compile(r"prefill|extend|piecewise", re.I)
_DECODE_HINT = re.compile(r"decode|cuda_graph_runner|capture_one_batch_size", re.I)


@dataclass(frozen=True, kw_only=True, slots=True)
class Frame:
    """One traceback frame: the file, the function (if shown) and its code line (if shown)."""

    path: str
    func: str | None = None
    code: str | None = None


def block_bounds(lines: Sequence[str], i: int) -> tuple[int, int]:
    """[start, end) of the traceback around line i: back to its start, on until the next log record."""
    start = i
    for j in range(i, max(i - _MAX_BLOCK, -1), -1):
        start = j
        if TRACEBACK_START.search(lines[j]):
            break
        if j < i and has_prefix(lines[j]):
            start = j + 1
            break
    end = i + 1
    while end < len(lines) and end - i < _MAX_BLOCK and not has_prefix(lines[end]):
        end += 1
    return start, end


def frames(lines: Sequence[str]) -> list[Frame]:
    """The frames of the given lines, outermost first (as Python prints them)."""
    out: list[Frame] = []
    for j, line in enumerate(lines):
        if m := _FRAME.search(line):
            code = lines[j + 1].strip() if j + 1 < len(lines) else ""
            keep = code and not _FRAME.search(code) and not _CARET.match(code)
            out.append(Frame(path=m["path"], func=m["func"], code=code if keep else None))
        elif "File " not in line and (m := _PATH.search(line)):
            out.append(Frame(path=m["path"], func=m["func"]))
    return out


def frame_stage(lines: Sequence[str]) -> str | None:
    """'serving' or 'capture' when some traceback frame proves it, else None (serving wins)."""
    if any(_SERVING_FRAME.search(line) or _SERVING_CALL.match(line) for line in lines):
        return "serving"
    if any(_CAPTURE_FRAME.search(line) for line in lines):
        return "capture"
    return None


def blame_backend(
    lines: Sequence[str], i: int, backends: tuple[str, str] | None
) -> tuple[str | None, str | None]:
    """(backend, role) that the failure at line i happened in, from its message and traceback.

    The message first (a kernel library's own error), then the frames closest to the error:
    those before it innermost first, then those of a chained traceback after it. The role
    (prefill/decode) comes from the SGLang frames, or from the backends SGLang announced when
    only one role uses the blamed backend. (None, None) when no line names one.
    """
    start, end = block_bounds(lines, i)
    before = frames(lines[start:i])[::-1]
    after = frames(lines[i + 1 : end])[::-1]
    nearest = [*before, *after]
    backend = _library_backend(lines[i]) or next(filter(None, map(_frame_backend, nearest)), None)
    if backend is None:
        return None, None
    role = next(filter(None, map(_frame_role, nearest)), None)
    if backends is not None:
        roles = [r for r, b in zip(("prefill", "decode"), backends, strict=True) if _same(b, backend)]
        if role is None and len(roles) == 1:
            role = roles[0]
        if role is not None and role in roles:
            backend = backends[0 if role == "prefill" else 1]  # the exact variant SGLang announced
    return backend, role


def _library_backend(text: str) -> str | None:
    return next((name for pattern, name in _LIBRARY if pattern.search(text)), None)


def _frame_backend(frame: Frame) -> str | None:
    m = _ATTENTION.search(frame.path)
    if m is None:
        return _library_backend(frame.path)
    for text in (frame.func or "", frame.code or ""):
        if (method := _FORWARD_METHOD.search(text)) and (name := _token(method.group(1))):
            return name
    return _token(m["stem"])


def _token(text: str) -> str | None:
    return next((name for token, name in _BACKEND_TOKENS if token in text), None)


def _frame_role(frame: Frame) -> str | None:
    if "sglang" not in frame.path:
        return None
    text = f"{frame.path.rsplit('/', 1)[-1]} {frame.func or ''}"
    if _PREFILL_HINT.search(text):
        return "prefill"
    if _DECODE_HINT.search(text):
        return "decode"
    return None


def _same(announced: str, blamed: str) -> bool:
    return announced == blamed or announced.startswith(blamed + "_") or blamed.startswith(announced + "_")
