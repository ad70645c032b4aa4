"""The live display's best so far covers the whole study (trials before a resume too) in the
objectives' own directions."""

from __future__ import annotations

import io

from rich.console import Console

from tuner.cli.display import RunDisplay
from tuner.config import Outcome
from tuner.study.events import TrialEvent


def _event(number: int, values: tuple[float, ...]) -> TrialEvent:
    return TrialEvent(
        number=number,
        outcome=Outcome.OK,
        values=values,
        feasible=True,
        reused_from=None,
        message="",
        duration_s=1.0,
    )


def test_best_so_far_starts_from_the_study_and_follows_each_direction() -> None:
    console = Console(file=io.StringIO(), width=120, color_system=None)
    display = RunDisplay(
        budget=4,
        metric_names=("output_throughput", "ttft_p99_ms"),
        directions=("maximize", "minimize"),
        best={"output_throughput": (900.0, 2), "ttft_p99_ms": (150.0, 3)},  # from before the resume
        console=console,
    )
    with display:
        display.on_trial(_event(7, (800.0, 400.0)))  # worse on both: the earlier trials stay best
        assert display.best == {"output_throughput": (900.0, 2), "ttft_p99_ms": (150.0, 3)}
        display.on_trial(_event(8, (950.0, 120.0)))  # better on both: higher throughput, lower TTFT
    assert display.best == {"output_throughput": (950.0, 8), "ttft_p99_ms": (120.0, 8)}
