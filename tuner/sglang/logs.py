"""SGLang log lines: what state they add up to, and why a server died.

Pure functions over text (reference/sglang.md §4): `parse_line` (log_parse.py) turns one
line into an event (log_events.py), `LogState.apply` folds events into what the server
reported about itself, `classify_failure` names the first root cause among a dead
server's lines (with the stage and attention backend its tracebacks prove, log_blame.py),
`is_fatal` tells a line after which the server will die.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from tuner.config import Outcome, Phase
from tuner.sglang.log_blame import TRACEBACK_START, blame_backend, block_bounds
from tuner.sglang.log_events import (
    CaptureBegin,
    CaptureEnd,
    DecodeBatch,
    Deprecation,
    FailureKind,
    FailureLine,
    FailureVerdict,
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
from tuner.sglang.log_excerpt import MAX_EXCERPT as _MAX_EXCERPT
from tuner.sglang.log_excerpt import excerpt as _excerpt
from tuner.sglang.log_excerpt import exit_text as _exit_text
from tuner.sglang.log_excerpt import one_line as _one_line
from tuner.sglang.log_parse import clean_line, has_prefix, parse_line, strip_ansi
from tuner.sglang.log_sites import (
    SITE_KIND,
    by_site,
    continues_traceback,
    failing_block,
    failure_site,
    is_frame_line,
    where,
)


def is_fatal(line: str) -> bool:
    """True for a line after which the server will die (record the crash before the process exits)."""
    event = parse_line(line)
    return isinstance(event, FailureLine) and event.fatal


KV_CANARY_MARK = "kv_canary violation"  # SGLang 0.5.13+ with `--kv-canary log`: one line per violation


def nan_lines(lines: Iterable[str]) -> list[str]:
    """The lines reporting NaN/inf in logits or probabilities, or a KV-cache canary violation, ANSI-stripped.

    The canary (`--kv-canary log`, with `--kv-canary-real-data partial|all` also hashing the real KV
    bytes) is SGLang's own detector of KV-cache corruption; the gate reads its lines as garbage.
    """
    out = []
    for line in lines:
        event = parse_line(line)
        if (isinstance(event, FailureLine) and event.kind is FailureKind.NAN) or KV_CANARY_MARK in line:
            out.append(strip_ansi(line).rstrip())
    return out


# --------------------------------------------------------------------------- state


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
        if isinstance(event, HttpUp):  # HTTP binds once every scheduler is initialised
            stage = "warmup" if self.stage in ("start", "load", "kv", "capture") else self.stage
            return replace(self, stage=stage, http_up=True, port=event.port)
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
            return replace(self, nan_lines=nan, first_fatal=fatal)
        return self


# --------------------------------------------------------------------------- classification

_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)\b:? ?(.*)$")


def classify_failure(lines: Sequence[str], *, exit_code: int | None, phase: Phase) -> FailureVerdict:
    """Outcome, one-line message, excerpt of the proving lines and blamed backend of a failed server.

    The first root cause wins over the generic lines (a CUDA error, an exception with no
    known signature, the "hit an exception" wrapper; of these the last error line), and
    those over the teardown lines (sigquit, rank dead, initialization failed). The stage is what the log
    lines and, where they say more, the traceback frames prove.
    """
    clean = [clean_line(line) for line in lines]
    state = LogState()
    best: tuple[int, int, FailureLine, LogState] | None = None
    traceback: tuple[int, LogState] | None = None
    for i, line in enumerate(clean):
        event = parse_line(line)
        if isinstance(event, FailureLine):
            rank = _priority(event)
            if best is None or rank < best[0] or (rank == best[0] == 2 and _is_error_line(event)):
                best = (rank, i, event, state)
        elif TRACEBACK_START.search(line) or (is_frame_line(line) and not continues_traceback(clean, i)):
            traceback = (i, state)  # a traceback posted without its header still counts by its frames
        state = state.apply(event)
    if best is None and traceback is not None:
        best = _by_its_site(clean, traceback)  # no error line: the site the traceback stops in may say
    if best is None:
        site = failure_site(failing_block(clean, traceback[0])) if traceback is not None else None
        return _unrecognised(clean, traceback, where(clean, site), state, exit_code, phase)
    _, i, event, before = best
    site = failure_site(failing_block(clean, i))
    frames_say = where(clean, site)
    if event.kind.is_teardown and traceback is None and killed_by_signal(exit_code) is not None:
        return _killed_from_outside(clean, exit_code, f"only teardown lines: {event.line.strip()}")
    if event.kind is FailureKind.CHILD_EXCEPTION:  # the traceback's last line says what broke
        if (j := _exception_after(clean, i)) is not None:
            i, event = j, replace(event, detail=clean[j].strip())
        else:
            event = replace(event, detail=_cut_traceback(clean, i))
    elif not event.kind.is_root_cause and not event.kind.is_teardown:
        event = replace(event, detail=event.line.strip())  # all of `torch.AcceleratorError: CUDA error: ...`
    event = by_site(event, site)  # a generic error: its mined wording, else its site, may say more
    stage = _stage(before, phase, frames_say, event.kind)
    outcome, message = _verdict(event, stage, exit_code)
    # A bad flag's line lists the choices it had: naming one of them blames no backend.
    backend, role = (
        (None, None) if event.kind is FailureKind.BAD_ARGS else blame_backend(clean, i, state.backends)
    )
    return FailureVerdict(
        outcome=outcome,
        message=_one_line(message),
        excerpt=_excerpt(clean, i),
        backend=backend,
        role=role,
        stage=STAGE_NAMES[stage],
    )


def _by_its_site(
    clean: Sequence[str], traceback: tuple[int, LogState]
) -> tuple[int, int, FailureLine, LogState] | None:
    """A traceback cut before its error line, as the failure its innermost known site means (if any)."""
    t, before = traceback
    kind = SITE_KIND.get(site) if (site := failure_site(failing_block(clean, t))) is not None else None
    if kind is None:
        return None
    event = FailureLine(kind=kind, fatal=True, detail=_cut_traceback(clean, t), line=clean[t])
    return 0, t, event, before


def _unrecognised(
    clean: Sequence[str],
    traceback: tuple[int, LogState] | None,
    frames_say: str | None,
    state: LogState,
    exit_code: int | None,
    phase: Phase,
) -> FailureVerdict:
    """No line with a signature: a traceback cut before its error line, or nothing at all."""
    if traceback is None and killed_by_signal(exit_code) is not None:
        return _killed_from_outside(clean, exit_code, "no error in its log")
    if traceback is None:
        return FailureVerdict(
            outcome=Outcome.CRASHED,
            message=f"server {_exit_text(exit_code)} with no recognised error in its log",
            excerpt="\n".join(clean[-20:]),
        )
    t, before = traceback
    stage = _stage(before, phase, frames_say, None)
    _, end = block_bounds(clean, t)
    detail = _cut_traceback(clean, t)
    if stage == "at capture":
        outcome, message = Outcome.CAPTURE_FAILED, f"CUDA-graph capture failed: {detail}"
    else:
        outcome, message = Outcome.CRASHED, f"server {_exit_text(exit_code)} {stage}: {detail}"
    backend, role = blame_backend(clean, t, state.backends)
    return FailureVerdict(
        outcome=outcome,
        message=_one_line(message),
        excerpt=_excerpt(clean, min(end - 1, t + _MAX_EXCERPT - 4)),
        backend=backend,
        role=role,
        stage=STAGE_NAMES[stage],
    )


def killed_by_signal(exit_code: int | None) -> signal.Signals | None:
    """The signal that ended the server (-N, or 128+N from a shell), if any."""
    if exit_code is None:
        return None
    number = -exit_code if exit_code < 0 else exit_code - 128 if 128 < exit_code < 160 else None
    if number is None:
        return None
    try:
        return signal.Signals(number)
    except ValueError:
        return None


def _killed_from_outside(clean: Sequence[str], exit_code: int | None, what: str) -> FailureVerdict:
    """A death by signal that the log does not explain: the machine's doing until proven otherwise.

    An out-of-memory, a fatal error, a failed capture or NaN would have left its line; without one
    the configuration is not blamed (an operator's kill, the host's OOM killer, a node going down),
    and the trial is retried once.
    """
    sig = killed_by_signal(exit_code)
    name = sig.name if sig is not None else "a signal"
    return FailureVerdict(
        outcome=Outcome.INFRA_ERROR,
        message=_one_line(
            f"server killed by {name} from outside ({what}): not blamed on the configuration, retried"
        ),
        excerpt="\n".join(clean[-20:]),
    )


def _cut_traceback(lines: Sequence[str], t: int) -> str:
    """What a traceback starting at line t shows when the log stops before its error line."""
    _, end = block_bounds(lines, t)
    last = next((line.strip() for line in reversed(lines[t + 1 : end]) if line.strip()), "")
    return f"traceback with no error line, last: {last}" if last else lines[t].strip()


def _is_error_line(event: FailureLine) -> bool:
    """A generic error line (not the wrapper): among these the last one, the one the log ended on, wins."""
    return event.kind is not FailureKind.CHILD_EXCEPTION


def _priority(event: FailureLine) -> int:
    if event.kind.is_root_cause:
        return 0 if event.fatal or event.kind is FailureKind.NAN else 1
    return 3 if event.kind.is_teardown else 2


_PORT_TAKEN = re.compile(r"address already in use|Errno 98\b", re.I)


def _verdict(event: FailureLine, stage: str, exit_code: int | None) -> tuple[Outcome, str]:
    kind, detail = event.kind, event.detail
    if not kind.is_root_cause and _PORT_TAKEN.search(detail):
        return Outcome.INFRA_ERROR, f"the server's port was taken by another process: {detail}"
    if kind is FailureKind.BAD_ARGS and exit_code in (2, None):
        return Outcome.BAD_FLAG, f"SGLang rejected the arguments: {detail}"
    if kind is FailureKind.NOT_ENOUGH_MEMORY:
        return Outcome.NOT_ENOUGH_MEMORY, f"no room for the KV cache {stage}: {detail}"
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
    if kind is FailureKind.REQ_SLOTS_EXHAUSTED:
        return Outcome.OOM, f"request slots exhausted {stage}: {detail}"
    if kind is FailureKind.UNSUPPORTED_ARCH:
        return Outcome.UNSUPPORTED, f"kernel not built for this GPU {stage}: {detail}"
    if kind is FailureKind.NAN:
        return Outcome.NAN, f"NaN in the model's output {stage}: {detail}"
    if kind in (FailureKind.WATCHDOG, FailureKind.HEALTH_CHECK_FAILED):
        return Outcome.HANG, f"server hung {stage}: {detail}"
    if kind is FailureKind.MEMORY_IMBALANCE:
        return Outcome.INFRA_ERROR, f"another process holds GPU memory: {detail}"
    if stage == "at capture" and not kind.is_teardown:
        return Outcome.CAPTURE_FAILED, f"CUDA-graph capture failed: {detail}"
    return Outcome.CRASHED, f"server {_exit_text(exit_code)} {stage}: {detail}"


# The stage phrases of the messages -> the stage names a failure carries.
STAGE_NAMES = {"at load": "load", "at capture": "capture", "at warmup": "warmup", "under load": "serving"}
# The allocators run, and the scheduler watchdog watches, only in the serving loop.
_UNDER_LOAD_ONLY = frozenset(
    {FailureKind.KV_EXHAUSTED, FailureKind.REQ_SLOTS_EXHAUSTED, FailureKind.WATCHDOG}
)


def _stage(state: LogState, phase: Phase, frames_say: str | None, kind: FailureKind | None) -> str:
    """'under load', 'at capture', 'at warmup' or 'at load': by the log lines, the frames, the phase."""
    if state.ready_seen or state.serving or phase in (Phase.GATE, Phase.BENCH):
        return "under load"
    if frames_say == "serving" or kind in _UNDER_LOAD_ONLY:
        return "under load"
    if frames_say == "capture":
        return "at capture"
    return {"capture": "at capture", "warmup": "at warmup"}.get(state.stage, "at load")


def _exception_after(lines: Sequence[str], i: int) -> int | None:
    """Index of the `SomeError: message` line that ends the traceback starting at line i."""
    for j in range(i + 1, min(i + 400, len(lines))):
        if has_prefix(lines[j]):
            break
        if _EXCEPTION_LINE.match(lines[j].strip()):
            return j
    return None
