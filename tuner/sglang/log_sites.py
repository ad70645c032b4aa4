"""Where a failed SGLang server failed: the site its traceback's frames name, and what that site means.

Pure functions over ANSI-stripped log lines. A traceback's SGLang frames are read innermost
first; the first one that is a known site decides: memory profiling in the model runner (no
room for the KV cache), CUDA-graph capture, the KV and request-slot allocators (out of KV under
load), the watchdog (a hang), NCCL, the scheduler's serving loop. Known sites are the ones
mined from SGLang's source per release (failure_sites.json, scripts/mine_failure_sites.py)
and the few structural ones below that every release shares. A traceback posted without its
`Traceback` header still counts by its frames.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum
from functools import cache
from importlib import resources

from tuner.sglang.log_blame import block_bounds, frame_stage
from tuner.sglang.log_events import FailureKind, FailureLine


class Site(str, Enum):
    """The kind of place in SGLang a traceback ended in."""

    MEMORY_PROFILE = "memory_profile"  # sizing the KV pool after the weights loaded
    CAPTURE = "capture"  # CUDA-graph capture (decode, prefill/piecewise, draft)
    KV_ALLOC = "kv_alloc"  # the KV-token and request-slot allocators while serving
    WATCHDOG = "watchdog"  # the scheduler watchdog
    NCCL = "nccl"  # collective communication
    SERVING = "serving"  # the scheduler's event loop and batch processing
    LOAD = "load"  # building the model and loading its weights


# What a site means for the class of a failure whose error line has no signature of its own.
SITE_KIND = {
    Site.MEMORY_PROFILE: FailureKind.NOT_ENOUGH_MEMORY,
    Site.CAPTURE: FailureKind.CAPTURE_FAILED,
    Site.KV_ALLOC: FailureKind.KV_EXHAUSTED,
    Site.WATCHDOG: FailureKind.WATCHDOG,
    Site.NCCL: FailureKind.NCCL_ERROR,
}
# Where each site sits in a server's life: the stage names of FailureVerdict.
SITE_STAGE = {
    Site.MEMORY_PROFILE: "load",
    Site.CAPTURE: "capture",
    Site.KV_ALLOC: "serving",
    Site.WATCHDOG: "serving",
    Site.SERVING: "serving",
    Site.LOAD: "load",
}
# Mined classes (failure_sites.json) -> the site they are.
_CLASS_SITE = {
    "not_enough_memory": Site.MEMORY_PROFILE,
    "capture_failed": Site.CAPTURE,
    "oom": Site.KV_ALLOC,
    "hang": Site.WATCHDOG,
}

# Structural sites every release shares: (file pattern, function pattern), searched in a frame.
_STRUCTURAL = (
    (Site.CAPTURE, r"(?:cuda|device|cpu|npu|piecewise\w*)_graph_runner\.py|graph_runner\w*\.py",
     r"(?!replay|can_run)\w+"),  # a graph runner fails outside replay only while it captures
    (Site.MEMORY_PROFILE, r"model_runner\w*\.py",
     r"\w*profile\w*|init_memory_pool|_?configure_kv\w*|\w*kv_cache_budget\w*"),
    (Site.KV_ALLOC, r"mem_cache/[\w/]+\.py", r"alloc\w*|\w*_alloc"),
    (Site.WATCHDOG, r"\w+\.py", r"watchdog\w*"),
    (Site.NCCL, r"(?:pynccl|nccl)\w*\.py|parallel_state\.py|communication_op\.py", r"\w+"),
    (Site.SERVING,
     r"scheduler\w*\.py|tp_worker\w*\.py|disaggregation/\w+\.py|model_executor/model_runner\.py",
     r"event_loop\w*|run_event_loop|dispatch_event_loop|run_batch|forward_batch_generation"
     r"|forward_thread_func\w*|process_batch_result\w*|get_next_batch_to_run|update_running_batch"
     r"|get_new_batch_prefill|self_check_during_idle|on_idle|pop_and_process|resolve_last_batch_result"
     r"|process_input_requests"),
    # Building and admitting batches (ScheduleBatch, the scheduling policy) only happens while serving.
    (Site.SERVING, r"managers/schedule_(?:batch|policy)\.py", r"\w+"),
    (Site.LOAD, r"model_loader/\w+\.py|model_runner\.py", r"load_model|load_weights\w*|_load_\w+"),
)  # fmt: skip
_STRUCTURAL_RE = tuple((site, re.compile(f), re.compile(g)) for site, f, g in _STRUCTURAL)

# A traceback frame as Python prints it, and the bare `path:line in func` form some loggers use.
_FRAME = re.compile(r'File "(?P<path>[^"]+)", line \d+,? in (?P<func>[\w<>.]+)')
_BARE = re.compile(r"(?P<path>\S*sglang/srt/\S+?\.py):\d+ in (?P<func>\w+)")
# SGLang's own files: under sglang/srt/, or a path a poster shortened to `.../`.
_SRT = re.compile(r"sglang/srt/(?P<rel>.+)$|^\.\.\./(?:sglang/srt/)?(?P<short>.+)$")


@dataclass(frozen=True, kw_only=True, slots=True)
class SiteFrame:
    """One SGLang frame: its path under `sglang/srt/` and its function."""

    rel: str
    func: str


def sglang_frames(lines: Sequence[str]) -> list[SiteFrame]:
    """The SGLang frames of the given lines, outermost first."""
    out: list[SiteFrame] = []
    for line in lines:
        m = _FRAME.search(line) or _BARE.search(line)
        if m is None:
            continue
        rel = _SRT.search(m["path"])
        if rel is not None:
            out.append(SiteFrame(rel=rel["rel"] or rel["short"], func=m["func"]))
    return out


def is_frame_line(line: str) -> bool:
    """True for a traceback frame line of SGLang's own code (a traceback even without its header)."""
    m = _FRAME.search(line)
    return m is not None and _SRT.search(m["path"]) is not None


@cache
def mined_sites() -> dict[tuple[str, str], str]:
    """(path under sglang/srt, function) -> failure class, over every release of failure_sites.json."""
    text = resources.files("tuner.sglang").joinpath("failure_sites.json").read_text(encoding="utf-8")
    table = json.loads(text)
    fields: list[str] = table["fields"]
    out: dict[tuple[str, str], str] = {}
    for row in table["sites"]:
        site = dict(zip(fields, row, strict=True))
        out[(site["file"], site["function"])] = site["class"]
    return out


@cache
def mined_templates() -> tuple[tuple[re.Pattern[str], str], ...]:
    """Each mined message template as a pattern over an error line, with its class."""
    text = resources.files("tuner.sglang").joinpath("failure_sites.json").read_text(encoding="utf-8")
    table = json.loads(text)
    fields: list[str] = table["fields"]
    found: dict[str, str] = {}
    for row in table["sites"]:
        site = dict(zip(fields, row, strict=True))
        if template_pattern(site["template"]) is not None:
            found.setdefault(site["template"], site["class"])
    return tuple((p, c) for t, c in found.items() if (p := template_pattern(t)) is not None)


_HOLE = "\x00"
_HOLES = re.compile(r"\{\}|%[sdrf]|%\.\d+f")  # f-string values and %-style arguments


def template_pattern(template: str) -> re.Pattern[str] | None:
    """A message template (`{}` for each interpolated value) as a pattern; None when too vague to match."""
    literal = _HOLES.sub(_HOLE, template.split("\n", 1)[0].strip())
    if len(literal.replace(_HOLE, "")) < 16:
        return None
    parts = [re.escape(p) for p in literal.split(_HOLE)]
    return re.compile(r".{0,200}?".join(parts))


def site_of(frame: SiteFrame) -> Site | None:
    """The site one frame is, by the mined table first, then by structure."""
    mined = mined_sites()
    cls = mined.get((frame.rel, frame.func))
    if cls in _CLASS_SITE:
        return _CLASS_SITE[cls]
    for site, file_re, func_re in _STRUCTURAL_RE:
        if file_re.search(frame.rel) and func_re.fullmatch(frame.func):
            return site
    return None


def raised_at(lines: Sequence[str]) -> Site | None:
    """The site the error was raised in directly: the traceback's innermost frame, if it is a known site.

    An error raised deeper (in torch, a kernel library, a helper) is reported through the site's
    frame, not raised by it: the site says nothing of its class.
    """
    last = None
    for line in lines:
        if (m := _FRAME.search(line) or _BARE.search(line)) is not None:
            last = m
    if last is None or (rel := _SRT.search(last["path"])) is None:
        return None
    return site_of(SiteFrame(rel=rel["rel"] or rel["short"], func=last["func"]))


def failure_site(lines: Sequence[str]) -> Site | None:
    """The site of the innermost SGLang frame of these lines that is a known site, if any."""
    for frame in reversed(sglang_frames(lines)):
        if (site := site_of(frame)) is not None:
            return site
    return None


def template_kind(message: str) -> FailureKind | None:
    """The failure kind a mined message template proves for an error line, if any."""
    for pattern, cls in mined_templates():
        if pattern.search(message):
            site = _CLASS_SITE.get(cls)
            return SITE_KIND.get(site) if site is not None else _OTHER_CLASS_KIND.get(cls)
    return None


_OTHER_CLASS_KIND = {
    "unsupported": FailureKind.UNSUPPORTED_ARCH,
    "nan": FailureKind.NAN,
}


def failing_block(lines: Sequence[str], i: int) -> Sequence[str]:
    """The lines of the traceback around line i."""
    start, end = block_bounds(lines, i)
    return lines[start:end]


def where(lines: Sequence[str], site: Site | None) -> str | None:
    """'serving', 'capture' or 'load' by the failing traceback's site, else by any frame of the log."""
    return SITE_STAGE.get(site) if site is not None else frame_stage(lines)


def by_site(event: FailureLine, site: Site | None) -> FailureLine:
    """A generic error line (no signature of its own) classed by its mined wording or the site it was raised.

    An out-of-memory or an unbuilt kernel keeps its own class whatever the site.
    """
    if event.kind.is_root_cause or event.kind.is_teardown or event.oom or event.unsupported:
        return event
    kind = template_kind(event.detail) or template_kind(event.line)
    if kind is None and site is not None:
        kind = SITE_KIND.get(site)
    if kind is None:
        return event
    return replace(event, kind=kind, fatal=True)
