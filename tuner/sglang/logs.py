"""SGLang log lines: what state they add up to, and why a server died.

Pure functions over text (reference/sglang.md §4): `parse_line` (log_parse.py) turns one
line into an event (log_events.py), `LogState.apply` folds events into what the server
reported about itself, `classify_failure` names the first root cause among a dead
server's lines (with the stage and attention backend its tracebacks prove, log_blame.py),
`is_fatal` tells a line after which the server will die. The state lives in log_state.py, the
classification in log_classify.py (its device vocabularies in log_devices.py, the collectors'
prefixes in log_prefix.py, outcome and stage in log_verdict.py).
"""

from __future__ import annotations

from collections.abc import Iterable

from tuner.sglang.log_classify import classify_failure
from tuner.sglang.log_events import FailureKind, FailureLine
from tuner.sglang.log_parse import parse_line, strip_ansi
from tuner.sglang.log_state import LogState
from tuner.sglang.log_verdict import STAGE_NAMES, killed_by_signal

__all__ = ["KV_CANARY_MARK", "STAGE_NAMES", "LogState", "classify_failure", "is_fatal", "killed_by_signal",
           "nan_lines"]  # fmt: skip


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
