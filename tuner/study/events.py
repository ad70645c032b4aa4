"""What a running study tells its caller: an event per trial, the summary of a run, the hooks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tuner.config import Outcome, Phase


@dataclass(frozen=True, kw_only=True, slots=True)
class TrialEvent:
    """What the live display hears after each trial."""

    number: int
    outcome: Outcome
    values: tuple[float, ...]
    feasible: bool
    reused_from: int | None
    message: str
    duration_s: float
    overhead_s: float | None = None  # the tuner's own time: everything but waiting on the server
    launched: bool = True


@dataclass(frozen=True, kw_only=True, slots=True)
class RunSummary:
    """How a `run` ended."""

    study_name: str
    completed: int  # launches counted in the budget (finalist repeats included)
    budget: int | None  # None: no trial cap (time budget or Ctrl-C ends the run)
    interrupted: bool
    ran: int
    exhausted: str | None = None  # why the search stopped before its budget, if it did


class Hooks:
    """Callbacks for the CLI's live display (all optional)."""

    def __init__(
        self,
        *,
        on_phase: Callable[[int, Phase, str], None] | None = None,
        on_trial: Callable[[TrialEvent], None] | None = None,
        on_start: Callable[[int, int], None] | None = None,
    ) -> None:
        self.on_phase = on_phase
        self.on_trial = on_trial
        self.on_start = on_start
