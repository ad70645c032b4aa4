"""From the failure a log proves to the trial's outcome, its stage and its one-line message.

Pure functions. The stage comes from the same evidence as the class: a failure whose kind only
happens in one stage (a capture failure, an allocator running out under load, no room for the
KV cache) is in that stage unless the log proves the server was already serving; otherwise the
log lines, then the traceback's frames, then the tuner's phase decide. A death by signal is the
machine's doing only when the log holds no sign that the server crashed itself.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence

from tuner.config import Outcome, Phase
from tuner.sglang.log_devices import HOST_RAM, SELF_ABORT, SELF_SIGNALS, device_name, environment_cause
from tuner.sglang.log_events import FailureKind, FailureLine, FailureVerdict
from tuner.sglang.log_excerpt import exit_text as _exit_text
from tuner.sglang.log_excerpt import one_line as _one_line

# The stage phrases of the messages -> the stage names a failure carries.
STAGE_NAMES = {"at load": "load", "at capture": "capture", "at warmup": "warmup", "under load": "serving"}
# The allocators run, and the scheduler watchdog watches, only in the serving loop.
_UNDER_LOAD_ONLY = frozenset(
    {FailureKind.KV_EXHAUSTED, FailureKind.REQ_SLOTS_EXHAUSTED, FailureKind.WATCHDOG}
)
# Kinds that say their own stage: a graph capture, the KV pool's sizing after the weights loaded.
_KIND_STAGE = {FailureKind.CAPTURE_FAILED: "at capture", FailureKind.NOT_ENOUGH_MEMORY: "at load"}


def stage_of(
    *, serving: bool, log_stage: str, phase: Phase, frames_say: str | None, kind: FailureKind | None
) -> str:
    """'under load', 'at capture', 'at warmup' or 'at load': by the failure, the log, the frames, the phase.

    serving: the log showed the server ready or running batches before the failure.
    """
    if serving or phase in (Phase.GATE, Phase.BENCH):
        return "under load"
    if frames_say == "serving" or kind in _UNDER_LOAD_ONLY:
        return "under load"
    if kind in _KIND_STAGE:
        return _KIND_STAGE[kind]
    if frames_say == "capture":
        return "at capture"
    return {"capture": "at capture", "warmup": "at warmup"}.get(log_stage, "at load")


def verdict(
    event: FailureLine, stage: str, exit_code: int | None, *, before_load: bool = False
) -> tuple[Outcome, str]:
    """Outcome and message of a failure line whose kind (and flags) the whole message decided."""
    kind, detail = event.kind, event.detail
    if kind is FailureKind.ENVIRONMENT or (not kind.is_root_cause and environment_cause(detail)):
        cause = environment_cause(detail) or "the machine"
        if cause != HOST_RAM or before_load:
            return Outcome.ENVIRONMENT, f"the environment, not the configuration: {cause} {stage}: {detail}"
        return Outcome.CRASHED, f"server {_exit_text(exit_code)} {stage}: host out of memory: {detail}"
    # argparse's `prog: error: ...` and status 2; SGLang's diffusion ServerArgs raises SystemExit with the
    # bare `error: unrecognized arguments: ...`, which Python prints and ends with status 1
    bare = exit_code == 1 and event.line.strip().startswith("error: unrecognized arguments: ")
    if kind is FailureKind.BAD_ARGS and (exit_code in (2, None) or bare):
        return Outcome.BAD_FLAG, f"SGLang rejected the arguments: {detail}"
    if kind is FailureKind.NOT_ENOUGH_MEMORY:
        return Outcome.NOT_ENOUGH_MEMORY, f"no room for the KV cache {stage}: {detail}"
    device = device_name(f"{detail} {event.line}")
    if kind is FailureKind.CAPTURE_FAILED and stage != "under load":
        if event.unsupported:
            return Outcome.UNSUPPORTED, f"kernel not built for this GPU at capture: {detail}"
        if event.oom:
            return Outcome.OOM, f"{device} out of memory at capture: {detail}"
        return Outcome.CAPTURE_FAILED, f"CUDA-graph capture failed: {detail}"
    if kind is FailureKind.CUDA_OOM:
        return Outcome.OOM, f"{device} out of memory {stage}: {detail}"
    if kind is FailureKind.KV_EXHAUSTED:
        return Outcome.OOM, f"KV cache exhausted {stage}: {detail}"
    if kind is FailureKind.REQ_SLOTS_EXHAUSTED:
        return Outcome.OOM, f"request slots exhausted {stage}: {detail}"
    if kind is FailureKind.UNSUPPORTED_ARCH or (event.unsupported and not kind.is_teardown):
        return Outcome.UNSUPPORTED, f"kernel not built for this GPU {stage}: {detail}"
    if kind is FailureKind.NAN:
        return Outcome.NAN, f"NaN in the model's output {stage}: {detail}"
    if kind in (FailureKind.WATCHDOG, FailureKind.HEALTH_CHECK_FAILED):
        return Outcome.HANG, f"server hung {stage}: {detail}"
    if kind is FailureKind.COLLECTIVE_TIMEOUT:
        return Outcome.HANG, f"server hung {stage}: a collective never completed: {detail}"
    if kind is FailureKind.MEMORY_IMBALANCE:
        return Outcome.INFRA_ERROR, f"another process holds GPU memory: {detail}"
    if event.oom and not kind.is_teardown and not event.fault:
        return Outcome.OOM, f"{device} out of memory {stage}: {detail}"
    if stage == "at capture" and not kind.is_teardown and not event.fault:
        return Outcome.CAPTURE_FAILED, f"CUDA-graph capture failed: {detail}"
    return Outcome.CRASHED, f"server {_exit_text(exit_code)} {stage}: {detail}"


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


def self_abort(lines: Sequence[str], exit_code: int | None) -> str | None:
    """The evidence that the server crashed itself (its own abort or fault), if any.

    A signal it sends itself (SIGABRT, SIGSEGV, SIGBUS, SIGILL, SIGFPE) as the exit status, or a
    line of Python's fault handler, the C runtime, the HSA queue callback or a child's exit code.
    """
    sig = killed_by_signal(exit_code)
    if sig in SELF_SIGNALS:
        return f"{sig.name} (exit code {exit_code})" if sig is not None else None
    for line in reversed(lines):
        if (m := SELF_ABORT.search(line)) is not None:
            return m.group(0).strip()
    return None


def crashed_itself(clean: Sequence[str], exit_code: int | None, evidence: str, stage: str) -> FailureVerdict:
    """A server that aborted or faulted with no error line of its own: a crash, never an outside kill."""
    return FailureVerdict(
        outcome=Outcome.CRASHED,
        message=_one_line(f"server {_exit_text(exit_code)} {stage}: it crashed itself ({evidence})"),
        excerpt="\n".join(clean[-20:]),
        stage=STAGE_NAMES[stage],
    )


def killed_from_outside(clean: Sequence[str], exit_code: int | None, what: str) -> FailureVerdict:
    """A death by signal that the log does not explain: the machine's doing until proven otherwise.

    An out-of-memory, a fatal error, a failed capture, NaN or the server's own abort would have
    left its line; without one the configuration is not blamed (an operator's kill, the host's OOM
    killer, a node going down), and the trial is retried once.
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
