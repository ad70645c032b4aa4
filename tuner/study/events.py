"""What a running study tells its caller: an event per trial, the summary of a run, the hooks."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from tuner.config import Outcome, Phase
from tuner.result import TrialResult
from tuner.session import TrialContext


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


def trial_event(
    number: int,
    outcome: Outcome,
    values: tuple[float, ...],
    feasible: bool,
    reused: int | None,
    message: str,
    t0: float,
    asked_at: float,
    result: TrialResult | None = None,
) -> TrialEvent:
    """The event of a finished trial; its overhead is the time since the ask not spent on the server."""
    now = time.monotonic()
    overhead = None
    if result is not None:
        t = result.timings
        waited = t.wait_gpus_s + t.launch_s + t.gate_s + t.bench_s + t.teardown_s
        overhead = max(0.0, now - asked_at - waited)
    return TrialEvent(
        number=number,
        outcome=outcome,
        values=values,
        feasible=feasible,
        reused_from=reused,
        message=message,
        duration_s=now - t0,
        overhead_s=overhead,
        launched=result is not None,
    )


def with_phase_hook(ctx: TrialContext, number: int, hooks: Hooks) -> TrialContext:
    """The trial context whose phase callback reports this trial's number to the hooks."""
    if hooks.on_phase is None:
        return ctx
    on_phase = hooks.on_phase
    return replace(ctx, on_phase=lambda phase, detail: on_phase(number, phase, detail))
