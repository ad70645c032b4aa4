"""`python -m tuner status` and the table after a run: trials, failures by class, the Pareto front."""

from __future__ import annotations

import statistics
import sys
from datetime import datetime
from typing import Any

import optuna
from optuna.trial import TrialState
from rich.console import Console
from rich.table import Table

from tuner.config import Outcome
from tuner.errors import ReportError
from tuner.metrics import heading
from tuner.report.detail import failures_by_class
from tuner.report.frame import (
    StudyData,
    load_study_data,
    measurements,
    median_measurements,
    param_legend,
    trials_frame,
)
from tuner.report.pareto import pareto_front
from tuner.store.protocol import ResultStore

_COLUMNS = ("kv_tokens", "output_throughput", "min_free_vram_mib")  # headings from tuner.metrics
_STATUS_STYLE = {"feasible": "green", "infeasible": "yellow", "failed": "red", "pruned": "cyan"}


def study_data(store: ResultStore, study_name: str, study: optuna.Study | None) -> StudyData:
    """StudyData from an open store and, when the caller has one, its Optuna study."""
    if study is None:
        return load_study_data(store.url, study_name)
    directions = tuple(d.name.lower() for d in study.directions)
    best = tuple(sorted(t.number for t in study.best_trials)) if len(directions) > 1 else None
    return StudyData(
        name=study_name,
        url=store.url,
        rows=store.trials(study_name),
        trials=tuple(study.get_trials(deepcopy=False)),
        metric_names=tuple(study.metric_names or ()),
        directions=directions,
        best_numbers=best,
    )


def print_status(
    store: ResultStore, study_name: str, study: optuna.Study | None, console: Any = None
) -> None:
    """Trials (knobs in one compact column), failures by class and the Pareto front, as tables."""
    console = console or Console(width=None if sys.stdout.isatty() else 200)
    data = study_data(store, study_name, study)
    try:
        front = pareto_front(data)
        trouble = None
    except ReportError as exc:
        front = pareto_front(data, strict=False)
        trouble = str(exc)
    frame = trials_frame(data, front)
    table = Table(title=f"study {data.name}: {len(frame)} trials asked", title_justify="left")
    table.add_column("#", justify="right", no_wrap=True, min_width=3)
    table.add_column("status", no_wrap=True, min_width=8)
    table.add_column("knobs", no_wrap=True, overflow="ellipsis", min_width=24)
    for metric in _COLUMNS:
        table.add_column(heading(metric), justify="right", no_wrap=True, min_width=7)
    table.add_column("why", overflow="ellipsis", no_wrap=True, max_width=60)
    forbidden = {t.number for t in data.trials if t.user_attrs.get("forbidden")}
    for rec in frame.to_dict("records"):
        if rec["trial"] in forbidden:
            continue  # asks the space forbids (e.g. a backend pair not among its choices): counted below
        failure = rec["failure"] if _present(rec["failure"]) else None
        status = rec["status"] if failure in (None, "slo_violation") else str(failure)
        style = _STATUS_STYLE.get(rec["status"], "dim")
        mark = "*" if rec["pareto"] else ""
        reused = f"same launch as #{int(rec['reused_from'])}" if _present(rec["reused_from"]) else ""
        message = str(rec["failure_message"]) if _present(rec["failure_message"]) else ""
        values, spread = _with_repeats(data, int(rec["trial"]), rec)
        table.add_row(
            f"{rec['trial']}{mark}",
            f"[{style}]{status}[/{style}]",
            rec["knobs"],
            *(_num(values.get(metric)) for metric in _COLUMNS),
            spread or reused or (message.splitlines() or [""])[0][:120],
        )
    console.print(table)
    legend = param_legend(frame.attrs.get("params", []))
    if legend:
        console.print(f"[dim]knobs: {legend}[/dim]")
    fails = failures_by_class(data.rows)
    if fails:
        console.print("failures by class: " + ", ".join(f"{k}={v}" for k, v in fails.most_common()))
    waiting = sum(1 for t in data.trials if t.state is TrialState.WAITING)
    reused_n = int(frame["reused_from"].notna().sum()) if len(frame) else 0
    console.print(
        f"Pareto front (* above) over {', '.join(data.metric_names)}: trials {list(front) or '-'}; "
        f"{reused_n} suggestions reused an earlier measurement; {waiting} waiting"
    )
    for line in running_lines(data):
        console.print(line)
    search = search_summary(data)
    if search:
        console.print(search)
    if trouble:
        console.print(f"[bold red]warning:[/bold red] {trouble}")


def running_lines(data: StudyData, now: datetime | None = None) -> list[str]:
    """One line per trial running now (several with `run --parallel`): its worker, GPUs and age."""
    now = now or datetime.now()
    lines = []
    for t in data.trials:
        if t.state is not TrialState.RUNNING:
            continue
        a = t.user_attrs
        gpus = a.get("gpus")
        where = f"GPUs {','.join(map(str, gpus))}" if isinstance(gpus, list) and gpus else "all GPUs"
        age = "" if t.datetime_start is None else f", for {(now - t.datetime_start).total_seconds():.0f} s"
        worker = f"{a.get('host', '?')} pid {a.get('pid', '?')}"
        lines.append(f"running: trial {t.number} on {worker}, {where}{age}")
    return lines


def search_summary(data: StudyData) -> str:
    """Launches, suggestions pruned without a launch, and how well the memory model predicted."""
    forbidden = sum(1 for t in data.trials if t.user_attrs.get("forbidden"))
    pruned = sum(1 for r in data.rows if r.outcome is Outcome.PRUNED) - forbidden
    launched = sum(1 for r in data.rows if r.launch is not None and r.confirm_of is None)
    repeats = sum(1 for r in data.rows if r.confirm_of is not None)
    kv_err: list[float] = []
    free_err: list[float] = []
    for t in data.trials:
        a = t.user_attrs
        if isinstance(a.get("pred_kv_tokens"), (int, float)) and isinstance(a.get("kv_tokens"), (int, float)):
            kv_err.append(abs(a["pred_kv_tokens"] - a["kv_tokens"]) / max(1.0, abs(a["kv_tokens"])) * 100)
        if isinstance(a.get("pred_min_free_mib"), (int, float)) and isinstance(
            a.get("min_free_vram_mib"), (int, float)
        ):
            free_err.append(abs(a["pred_min_free_mib"] - a["min_free_vram_mib"]))
    parts = [
        f"{launched} launches",
        f"{repeats} re-measurements",
        f"{pruned} suggestions pruned without a launch",
    ]
    if kv_err:
        parts.append(
            f"memory model: KV tokens within {statistics.median(kv_err):.1f}% (median of {len(kv_err)})"
        )
    if free_err:
        parts.append(f"free VRAM within {statistics.median(free_err):,.0f} MiB (median of {len(free_err)})")
    return "search: " + "; ".join(parts) if (pruned or repeats or kv_err) else ""


def _with_repeats(data: StudyData, number: int, rec: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """A trial's values, as medians when it was re-measured, and its throughput spread."""
    row = data.row_of(number)
    repeats = [r for r in data.rows if row is not None and r.confirm_of == row.id and r.outcome.measured]
    if row is None or not repeats:
        return rec, ""
    runs = [measurements(r) for r in (row, *repeats) if r.outcome.measured]
    tput = [v for m in runs if (v := m.get("output_throughput")) is not None]
    spread = f"median of {len(runs)} runs; out tok/s {min(tput):,.1f}–{max(tput):,.1f}" if tput else ""
    return median_measurements(data, row), spread


def _present(value: object) -> bool:
    """Not None and not the NaN pandas puts where a value is missing."""
    return value is not None and not (isinstance(value, float) and value != value)


def _num(value: object) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    if isinstance(value, float) and abs(value) >= 1e6:
        return f"{value / 1e6:.2f}M"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.1f}"
    return f"{value:,}" if isinstance(value, int) else str(value)
