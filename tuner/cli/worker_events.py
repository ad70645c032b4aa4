"""What a worker of `run --parallel` tells its parent: its study hooks as JSON lines on stdout.

    @event {"kind": "start", "trial": 7, "done": 3}
    @event {"kind": "phase", "trial": 7, "phase": "bench", "detail": "c=4"}
    @event {"kind": "trial", "number": 7, "outcome": "ok", "values": [...], ...}   (a TrialEvent)

Lines without the prefix are not events (the parent shows them as they are).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO

from tuner.config import Outcome, Phase
from tuner.study.events import Hooks, TrialEvent

PREFIX = "@event "


@dataclass(frozen=True, kw_only=True, slots=True)
class TrialStarted:
    """A worker asked a trial."""

    trial: int
    done: int


@dataclass(frozen=True, kw_only=True, slots=True)
class PhaseChanged:
    """A worker's trial entered a phase."""

    trial: int
    phase: Phase
    detail: str


WorkerEvent = TrialStarted | PhaseChanged | TrialEvent


def event_hooks(out: IO[str]) -> Hooks:
    """Hooks that write every study event to `out` as one prefixed JSON line."""

    def emit(doc: dict[str, object]) -> None:
        out.write(PREFIX + json.dumps(doc) + "\n")
        out.flush()

    def on_trial(ev: TrialEvent) -> None:
        doc = dataclasses.asdict(ev)
        emit({**doc, "kind": "trial", "outcome": ev.outcome.value, "values": list(ev.values)})

    on_start: Callable[[int, int], None] = lambda trial, done: emit(  # noqa: E731
        {"kind": "start", "trial": trial, "done": done}
    )
    on_phase: Callable[[int, Phase, str], None] = lambda trial, phase, detail: emit(  # noqa: E731
        {"kind": "phase", "trial": trial, "phase": phase.value, "detail": detail}
    )
    return Hooks(on_trial=on_trial, on_phase=on_phase, on_start=on_start)


def parse_event(line: str) -> WorkerEvent | None:
    """The event on one line of a worker's stdout; None for any other line (or a malformed event)."""
    if not line.startswith(PREFIX):
        return None
    try:
        doc = json.loads(line[len(PREFIX) :])
        kind = doc.pop("kind")
        if kind == "start":
            return TrialStarted(trial=int(doc["trial"]), done=int(doc["done"]))
        if kind == "phase":
            return PhaseChanged(trial=int(doc["trial"]), phase=Phase(doc["phase"]), detail=str(doc["detail"]))
        if kind == "trial":
            doc["outcome"] = Outcome(doc["outcome"])
            doc["values"] = tuple(float(v) for v in doc["values"])
            return TrialEvent(**doc)
    except (ValueError, KeyError, TypeError):
        return None
    return None
