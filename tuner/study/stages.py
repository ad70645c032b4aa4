"""What a study runs, as stages of one loop.

Inside the ask/tell loop (tuner/study/runner.py) every job is one step: a search launch (an ask
screened, claimed, launched or reused, told) or a finalist's repeat; each returns a `Step`. After
the loop, once the whole study's budget is spent, the `AfterStage`s run in order (the finalists'
capacity: tuner/capacity/stage.py), by the same `run_after` whether one worker ran the study or
`run --parallel` did (its parent runs them once every worker is done).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from tuner.config import Outcome
from tuner.interrupts import INTERRUPTS
from tuner.space.loader import SearchSpace
from tuner.store.factory import open_store
from tuner.store.protocol import StoreOpener


class Stop(enum.Enum):
    """Why the ask/tell loop ended (its one exit)."""

    ASKED = "a stop was asked"  # the stop event (tests, the display)
    INTERRUPTED = "interrupted"  # SIGINT / SIGTERM, or a trial ended by one
    TIME = "time budget spent"
    BUDGET = "launch budget spent"
    EXHAUSTED = "search space exhausted"


@dataclass(frozen=True, kw_only=True, slots=True)
class Step:
    """One job of the loop done: what became of it, and whether it launched a server."""

    outcome: Outcome
    launched: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class StudyEnd:
    """A study whose launches are done, as the stages after it see it."""

    space: SearchSpace
    db_url: str
    study: str
    interrupted: bool
    stores: StoreOpener = open_store


class AfterStage(Protocol):
    """A step after the study's launches (it may launch servers of its own)."""

    name: str

    def wanted(self, end: StudyEnd) -> bool:
        """Whether this study asks for the stage (its space's settings)."""
        ...

    def run(self, end: StudyEnd) -> list[str]:
        """Run it; the lines to print."""
        ...


def run_after(stages: Sequence[AfterStage], end: StudyEnd) -> list[str]:
    """Each wanted stage in order, none after a stop (an interrupted study resumes first)."""
    lines: list[str] = []
    for stage in stages:
        if end.interrupted or INTERRUPTS.requested:
            break
        if stage.wanted(end):
            lines.extend(stage.run(end))
    return lines
