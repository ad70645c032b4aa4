"""Why a server died, as its log proves it: `classify_failure`.

Pure functions over text. The lines are first freed of their log collector's prefix (one format
per log, log_prefix.py); then the first root cause wins over the generic lines (a device error,
an exception with no known signature, the "hit an exception" wrapper; of these the last error
line), and those over the teardown lines (sigquit, rank dead, initialization failed). A failure is
read over its whole message (an exception's continuation lines), classed by the site it was
raised in only when the error is not an asynchronous device fault, and given the stage of the
same evidence (log_verdict.py). A death by signal is blamed on the machine only when nothing in
the log says the server crashed itself.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from tuner.config import Outcome, Phase
from tuner.sglang.log_blame import TRACEBACK_START, blame_backend, block_bounds, frames
from tuner.sglang.log_devices import CAPTURE_PROTOCOL, DEVICE_FAULT, OOM, UNSUPPORTED
from tuner.sglang.log_events import FailureKind, FailureLine, FailureVerdict
from tuner.sglang.log_excerpt import MAX_EXCERPT as _MAX_EXCERPT
from tuner.sglang.log_excerpt import excerpt as _excerpt
from tuner.sglang.log_excerpt import exit_text as _exit_text
from tuner.sglang.log_excerpt import one_line as _one_line
from tuner.sglang.log_parse import clean_line, has_prefix, parse_line, strip_ansi
from tuner.sglang.log_prefix import strip_prefixes
from tuner.sglang.log_sites import (
    SITE_KIND,
    by_site,
    failing_block,
    failure_site,
    is_frame_line,
    raised_at,
    where,
)
from tuner.sglang.log_state import LogState
from tuner.sglang.log_verdict import (
    STAGE_NAMES,
    crashed_itself,
    killed_by_signal,
    killed_from_outside,
    self_abort,
    stage_of,
    verdict,
)

_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)\b:? ?(.*)$")
_MAX_MESSAGE = 20  # continuation lines read as part of one exception's message
# argparse's banner, and the error line it ends with (`launch_server.py: error: ...`).
_USAGE = re.compile(r"^usage: \S+")
_ARGPARSE_ERROR = re.compile(r"^\S+: error: (.+)$")
# A kernel library that cannot be imported: its backend cannot run on this install.
_IMPORT_FAILURE = re.compile(
    r"^(?:[\w.]+\.)?(?:ImportError|ModuleNotFoundError)\b|Can ?not import|cannot import name|No module named"
)
# A kernel library's JIT build that failed on this machine (FlashInfer's, torch cpp_extension's ninja runs).
_JIT_BUILD_FAILED = re.compile(
    r"Ninja build failed|Error building extension '|ninja: build stopped: subcommand failed"
    r"|CalledProcessError: Command '\['ninja',"
)
_ATTENTION_BUILD = re.compile(
    r"layers/attention/|attention_registry\.py|attention_backend_setup\.py"
    r"|\bin (?:init_attention_backends?|_get_attention_backend\w*|create_\w+_backend)\b"
)


def classify_failure(lines: Sequence[str], *, exit_code: int | None, phase: Phase) -> FailureVerdict:
    """Outcome, one-line message, excerpt of the proving lines and blamed backend of a failed server."""
    clean = [clean_line(line) for line in strip_prefixes([strip_ansi(line) for line in lines])]
    best, traceback, state = _scan(clean)
    if (banner := _rejected_command_line(clean, exit_code, best)) is not None:
        return banner
    if best is None and traceback is not None:
        best = _by_its_site(clean, traceback)  # no error line: the site the traceback stops in may say
    if best is None:
        site = failure_site(failing_block(clean, traceback[0])) if traceback is not None else None
        return _unrecognised(clean, traceback, where(clean, site), state, exit_code, phase)
    _, i, event, before = best
    site = failure_site(failing_block(clean, i))
    frames_say = where(clean, site)
    if event.kind.is_teardown and traceback is None:
        if (evidence := self_abort(clean, exit_code)) is not None:
            stage = _stage(before, phase, frames_say, None)
            return crashed_itself(clean, exit_code, evidence, stage)
        if killed_by_signal(exit_code) is not None:
            return killed_from_outside(clean, exit_code, f"only teardown lines: {event.line.strip()}")
    if event.kind is FailureKind.CHILD_EXCEPTION:  # the traceback's last line says what broke
        if (j := _exception_after(clean, i)) is not None:
            i, event = j, replace(event, detail=clean[j].strip())
        else:
            event = replace(event, detail=_cut_traceback(clean, i))
    elif not event.kind.is_root_cause and not event.kind.is_teardown:
        event = replace(event, detail=event.line.strip())  # all of `torch.AcceleratorError: CUDA error: ...`
    event = _whole_message(event, clean, i)
    # Only an error raised at a site directly is classed by it; a fault is reported where the device synced.
    start, end = block_bounds(clean, i)
    cut = event.kind is FailureKind.CHILD_EXCEPTION  # no error line: the traceback stops in the raiser
    direct = raised_at(clean[start:end] if cut else clean[start : i + 1])
    event = by_site(event, None if event.fault else direct)
    if frames_say != "serving" and any(CAPTURE_PROTOCOL.search(line) for line in clean[start:end]):
        frames_say = "capture"  # the runtime refused an operation because a graph capture was under way
    stage = _stage(before, phase, frames_say, event.kind)
    outcome, message = verdict(event, stage, exit_code, before_load=before.stage == "start")
    # A bad flag's line lists the choices it had: naming one of them blames no backend.
    backend, role = (
        (None, None) if event.kind is FailureKind.BAD_ARGS else blame_backend(clean, i, state.backends)
    )
    if outcome is Outcome.CRASHED and _backend_cannot_be_built(clean, i, event):
        name = backend or "attention"
        outcome = Outcome.UNSUPPORTED
        message = f"the {name} backend cannot be built here {stage}: {event.detail}"
    elif outcome in (Outcome.CRASHED, Outcome.CAPTURE_FAILED) and _JIT_BUILD_FAILED.search(event.detail):
        outcome = Outcome.UNSUPPORTED  # the kernel the configuration needs cannot be compiled on this install
        message = f"a kernel could not be built here {stage}: {event.detail}"
    return FailureVerdict(
        outcome=outcome,
        message=_one_line(message),
        excerpt=_excerpt(clean, i),
        backend=backend,
        role=role,
        stage=STAGE_NAMES[stage],
    )


_Best = tuple[int, int, FailureLine, LogState]  # (priority, line index, the line, the state before it)


def _scan(clean: Sequence[str]) -> tuple[_Best | None, tuple[int, LogState] | None, LogState]:
    """The failure line that best explains the log, the last traceback's start, and the final state."""
    state = LogState()
    best: _Best | None = None
    traceback: tuple[int, LogState] | None = None
    record = -1  # the last line that starts a log record (SGLang's prefix): it ends any traceback above
    for i, line in enumerate(clean):
        event = parse_line(line)
        record = i if has_prefix(line) else record
        if isinstance(event, FailureLine):
            rank = _priority(event)
            if best is None or rank < best[0] or (rank == best[0] == 2 and _is_error_line(event)):
                best = (rank, i, event, state)
        elif TRACEBACK_START.search(line) or (is_frame_line(line) and _no_traceback_open(traceback, record)):
            traceback = (i, state)  # a traceback posted without its header still counts by its frames
        state = state.apply(event)
    return best, traceback, state


def _no_traceback_open(traceback: tuple[int, LogState] | None, record: int) -> bool:
    """True when no traceback is open: none began yet, or a log record came after the last one.

    A post that starts inside a traceback (its code lines, then its frames) opens it at its first frame.
    """
    return traceback is None or record > traceback[0]


def _stage(state: LogState, phase: Phase, frames_say: str | None, kind: FailureKind | None) -> str:
    serving = state.ready_seen or state.serving
    return stage_of(serving=serving, log_stage=state.stage, phase=phase, frames_say=frames_say, kind=kind)


def _whole_message(event: FailureLine, clean: Sequence[str], i: int) -> FailureLine:
    """The failure as its whole message reads: the error line and the lines that continue it.

    ptxas naming an unknown `sm_...` on the line after `Capture cuda graph failed`, the allocator's
    sizes after `torch.OutOfMemoryError:`: the flags of the class come from all of it.
    """
    text = "\n".join([event.line, event.detail, *_continuation(clean, i)])
    return replace(
        event,
        oom=bool(OOM.search(text)),
        unsupported=bool(UNSUPPORTED.search(text)),
        fault=bool(DEVICE_FAULT.search(text)),
    )


def _continuation(clean: Sequence[str], i: int) -> list[str]:
    """The lines after line i that belong to its message (until a record, a frame or a blank line)."""
    out: list[str] = []
    for line in clean[i + 1 : i + 1 + _MAX_MESSAGE]:
        if not line.strip() or has_prefix(line) or TRACEBACK_START.search(line) or is_frame_line(line):
            break
        if line.lstrip().startswith('File "') or line.startswith("The above exception"):
            break
        out.append(line)
    return out


def _rejected_command_line(
    clean: Sequence[str], exit_code: int | None, best: tuple[int, int, FailureLine, LogState] | None
) -> FailureVerdict | None:
    """argparse's `usage:` banner and exit status 2: a rejected command line, even if its error is cut."""
    if exit_code != 2 or (best is not None and best[2].kind.is_root_cause):
        return None
    usage = next((j for j, line in enumerate(clean) if _USAGE.match(line.strip())), None)
    if usage is None:
        return None
    error = next((m[1] for line in clean[usage:] if (m := _ARGPARSE_ERROR.match(line.strip()))), None)
    detail = error or "argparse printed its usage banner and exited with status 2"
    return FailureVerdict(
        outcome=Outcome.BAD_FLAG,
        message=_one_line(f"SGLang rejected the arguments: {detail}"),
        excerpt=_excerpt(clean, usage),
    )


def _backend_cannot_be_built(clean: Sequence[str], i: int, event: FailureLine) -> bool:
    """A kernel library failing to import while an attention backend is constructed."""
    if not _IMPORT_FAILURE.search(event.detail):
        return False
    start, end = block_bounds(clean, i)
    return any(_ATTENTION_BUILD.search(f"{f.path} in {f.func}") for f in frames(clean[start:end]))


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
    if traceback is None:
        if (evidence := self_abort(clean, exit_code)) is not None:
            return crashed_itself(clean, exit_code, evidence, _stage(state, phase, frames_say, None))
        if killed_by_signal(exit_code) is not None:
            return killed_from_outside(clean, exit_code, "no error in its log")
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


def _exception_after(lines: Sequence[str], i: int) -> int | None:
    """Index of the `SomeError: message` line that ends the traceback starting at line i."""
    for j in range(i + 1, min(i + 400, len(lines))):
        if has_prefix(lines[j]):
            break
        if _EXCEPTION_LINE.match(lines[j].strip()):
            return j
    return None
