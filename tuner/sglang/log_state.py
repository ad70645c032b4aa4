"""What a server's log lines add up to: `LogState`, folded one event at a time (reference §4)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

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
    PrefillBatch,
    Ready,
    ServerArgs,
    SparseBackends,
    WeightLoadBegin,
    WeightLoadEnd,
)
from tuner.sglang.log_parse import parse_line
from tuner.sglang.log_prefix import strip_prefixes

# The launcher's report of its own warmup request failing (http_server._execute_server_warmup).
_WARMUP_FAILED = re.compile(r"Initialization failed\. warmup error")
_STAGES = ("start", "load", "kv", "capture", "warmup", "ready")


@dataclass(frozen=True, kw_only=True, slots=True)
class LogState:
    """What a server's log said about it so far; `apply` one event at a time.

    stage: 'start', 'load' (weights), 'kv' (KV pool), 'capture' (CUDA graphs), 'warmup'
    (after capture, before ready) or 'ready'. `serving` once a batch line shows requests
    being run (warmup's included). Lines come from every TP rank; all ranks report the
    same sizes, so the last one read wins.
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
    serving: bool = False
    last_decode: DecodeBatch | None = None
    retractions: int = 0
    deprecations: tuple[str, ...] = ()
    nan_lines: tuple[str, ...] = ()
    first_fatal: str | None = None
    _args_bs: tuple[int, ...] | None = None
    _capture_bs: tuple[int, ...] | None = None

    def _reached(self, stage: str) -> str:
        """The stage once the log proves the server got at least as far as `stage` (never back)."""
        return stage if _STAGES.index(self.stage) < _STAGES.index(stage) else self.stage

    @classmethod
    def from_lines(cls, lines: Iterable[str]) -> LogState:
        state = cls()
        for line in strip_prefixes(list(lines)):
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
        if isinstance(event, HttpUp):  # HTTP binds once every scheduler is initialised
            return replace(self, stage=self._reached("warmup"), http_up=True, port=event.port)
        if isinstance(event, CaptureProgress):
            return replace(self, stage=self._reached("capture"))
        if isinstance(event, HttpServed):  # a request answered: past load and capture
            return replace(self, stage=self._reached("warmup"))
        if isinstance(event, Ready):
            return replace(self, stage="ready", ready_seen=True)
        if isinstance(event, DecodeBatch):
            return replace(self, last_decode=event, serving=True)
        if isinstance(event, PrefillBatch):
            return replace(self, serving=True)
        if isinstance(event, KvRetraction):
            return replace(self, retractions=self.retractions + 1)
        if isinstance(event, Deprecation):
            return replace(self, deprecations=(*self.deprecations, event.message))
        if isinstance(event, FailureLine):
            nan = (*self.nan_lines, event.line) if event.kind is FailureKind.NAN else self.nan_lines
            fatal = self.first_fatal if self.first_fatal is not None or not event.fatal else event.line
            warmup = event.kind is FailureKind.INIT_FAILED and _WARMUP_FAILED.search(event.line)
            stage = self._reached("warmup") if warmup else self.stage
            return replace(self, nan_lines=nan, first_fatal=fatal, stage=stage)
        return self
