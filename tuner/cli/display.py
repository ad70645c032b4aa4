"""The live view of a running study (rich), and one-line summaries of trial results."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from tuner.config import Outcome, Phase
from tuner.names import one_line
from tuner.result import TrialResult
from tuner.store.protocol import StoreOpener
from tuner.study.events import TrialEvent


def study_best(
    url: str, study: str, metric_names: Sequence[str], directions: Sequence[str],
    stores: StoreOpener | None = None,
) -> dict[str, tuple[float, int]]:  # fmt: skip
    """The best feasible figure of each objective over every trial the study holds (what the live
    display starts from on a resume), each trial's figure as every view shows it (its median)."""
    from tuner.errors import TunerError
    from tuner.report.frame import load_study_data, trial_figures

    try:
        data = load_study_data(url, study) if stores is None else load_study_data(url, study, stores=stores)
    except TunerError:  # a new study: nothing recorded yet
        return {}
    best: dict[str, tuple[float, int]] = {}
    for row in data.rows:
        if row.confirm_of is not None or row.trial_number is None or not row.feasible:
            continue
        figures = trial_figures(data, row)
        for name, direction in zip(metric_names, directions, strict=False):
            value = figures.get(name)
            kept = best.get(name)
            if value is not None and (
                kept is None or (value < kept[0] if direction == "minimize" else value > kept[0])
            ):
                best[name] = (value, row.trial_number)
    return best


def result_line(result: TrialResult) -> str:
    """One line: outcome, KV tokens, throughput, why it failed."""
    parts = [result.outcome.value]
    if result.server is not None:
        parts.append(f"kv={result.server.kv_tokens}")
        parts.append(f"startup={result.server.startup_s:.1f}s")
    m = result.bench.objective_metrics if result.bench is not None else None
    if m is not None:
        parts.append(f"out={m.output_throughput:.1f} tok/s total={m.total_throughput:.1f} tok/s")
    if result.min_free_mib:
        parts.append(f"min_free={min(result.min_free_mib)} MiB")
    parts += [f"{name}={value:g}" for name, value in result.stage_metrics.items() if value is not None]
    if result.failure is not None:
        parts.append(f"[{result.failure.phase.value}] {result.failure.message}")
    return one_line("  ".join(parts))  # a server's words (its log, its errors) escaped on one line


class RunDisplay:
    """Trial k/N, phase, elapsed and ETA, best so far, last failure."""

    def __init__(
        self,
        *,
        budget: int | None,
        metric_names: Sequence[str],
        console: Console | None = None,
        parallel: int = 1,
        directions: Sequence[str] = (),
        best: Mapping[str, tuple[float, int]] | None = None,
    ) -> None:
        self.console = console or Console(stderr=True)
        self.budget = budget
        self.metric_names = tuple(metric_names)
        self.parallel = max(1, parallel)
        self.started = time.monotonic()
        self.done = 0
        self.running: dict[int, _Running] = {}  # every trial running now (several with --parallel)
        self.durations: list[float] = []
        self.directions = tuple(directions) or ("maximize",) * len(self.metric_names)
        # the best feasible value of each objective over the whole study: trials before a resume too
        self.best: dict[str, tuple[float, int]] = dict(best or {})
        self.last_failure = "-"
        self.history: list[TrialEvent] = []
        self._live = Live(self._render(), console=self.console, refresh_per_second=4, transient=False)

    def __enter__(self) -> RunDisplay:
        self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._live.update(self._render())
        self._live.__exit__(None, None, None)

    # hooks
    def on_start(self, number: int, done: int) -> None:
        self.running[number] = _Running(started=time.monotonic())
        self.done = max(self.done, done)
        self._live.update(self._render())

    def on_phase(self, number: int, phase: Phase, detail: str) -> None:
        trial = self.running.setdefault(number, _Running(started=time.monotonic()))
        trial.phase, trial.detail = phase.value, detail
        self._live.update(self._render())

    def set_where(self, number: int, where: str) -> None:
        """Say where a running trial runs (its worker's GPUs, with --parallel)."""
        self.running.setdefault(number, _Running(started=time.monotonic())).where = where
        self._live.update(self._render())

    def on_trial(self, event: TrialEvent) -> None:
        self.history.append(event)
        if event.reused_from is None:
            self.durations.append(event.duration_s)
        if not event.outcome.retryable:  # retried: the budget still owes this launch
            self.done += 1
        if event.feasible:
            for name, value, direction in zip(self.metric_names, event.values, self.directions, strict=False):
                best = self.best.get(name)
                if best is None or (value < best[0] if direction == "minimize" else value > best[0]):
                    self.best[name] = (value, event.number)
        elif not event.outcome.measured:
            self.last_failure = f"#{event.number} {event.outcome.value}: {event.message[:90]}"
        self.running.pop(event.number, None)
        self._live.update(self._render())

    def _render(self) -> Group:
        now = time.monotonic()
        eta = "-"
        if self.durations and self.budget is not None:
            mean = sum(self.durations) / len(self.durations)
            eta = _fmt(mean * max(0, self.budget - self.done) / self.parallel)
        head = Table.grid(padding=(0, 2))
        head.add_row(
            Text(f"trial {self.done + len(self.running)}/{self.budget or '∞'}", style="bold"),
            f"{len(self.running)} running" if self.parallel > 1 else "",
            f"elapsed {_fmt(now - self.started)}",
            f"ETA {eta}",
        )
        for number, trial in sorted(self.running.items()):
            head.add_row(
                f"  #{number}",
                trial.where,
                Text(trial.phase, style="cyan"),
                trial.detail,
                _fmt(now - trial.started),
            )
        best = ", ".join(f"{k}={v:.1f} (#{n})" for k, (v, n) in self.best.items()) or "-"
        info = Table.grid(padding=(0, 2))
        info.add_row("best so far:", best)
        info.add_row("last failure:", self.last_failure)
        recent = Table(box=None, show_header=True, header_style="dim")
        for col in ("#", "outcome", *self.metric_names, "s", "note"):
            recent.add_column(col)
        for ev in self.history[-8:]:
            measured = ev.outcome.measured and ev.values
            vals = [f"{v:,.1f}" for v in ev.values] if measured else ["-"] * len(self.metric_names)
            note = f"reused #{ev.reused_from}" if ev.reused_from is not None else ev.message[:60]
            style = "green" if ev.feasible else ("yellow" if ev.outcome is Outcome.OK else "red")
            recent.add_row(
                str(ev.number), Text(ev.outcome.value, style=style), *vals, f"{ev.duration_s:.1f}", note
            )
        return Group(head, info, recent)


@dataclass(eq=False, slots=True)
class _Running:
    """A trial running now, as the display shows it."""

    started: float
    phase: str = "asking"
    detail: str = ""
    where: str = ""


def _fmt(seconds: float) -> str:
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"
