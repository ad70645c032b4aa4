"""`python -m tuner status` and the table after a run: trials, failures by class, the Pareto front."""

from __future__ import annotations

import os
import re
import statistics
import sys
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

import optuna
from optuna.trial import TrialState
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from tuner.errors import ReportError
from tuner.host import host_name, pid_alive
from tuner.metrics import METRICS, Source
from tuner.report.context import defines_slo
from tuner.report.frame import (
    StudyData,
    study_data_from,
    trial_figures,
    trials_frame,
)
from tuner.report.knobs import param_legend
from tuner.report.pareto import pareto_front
from tuner.store.capacity import bind_rows, latest_by_row
from tuner.store.protocol import ResultStore
from tuner.study.asks import Ask, Fate, classify, tally, tally_lines


def study_data(store: ResultStore, study_name: str, study: optuna.Study | None) -> StudyData:
    """StudyData from an open store and, when the caller has one, its Optuna study."""
    if study is None:
        return study_data_from(store, study_name)
    directions = tuple(d.name.lower() for d in study.directions)
    best = tuple(sorted(t.number for t in study.best_trials)) if len(directions) > 1 else None
    rows = store.trials(study_name)
    return StudyData(
        name=study_name,
        url=store.url,
        rows=rows,
        trials=tuple(study.get_trials(deepcopy=False)),
        metric_names=tuple(study.metric_names or ()),
        directions=directions,
        best_numbers=best,
        space_text=text if isinstance(text := study.user_attrs.get("space_text"), str) else None,
        capacity=bind_rows(store.capacity(study_name), rows),
    )


# The metric columns every status table shows (short headers), then the study's other objectives.
STATUS_METRICS = {"output_throughput": "out tok/s", "kv_tokens": "KV tokens", "min_free_vram_mib": "free MiB"}
NOISY_MARK = "~"


def _metric_columns(data: StudyData) -> dict[str, str]:
    columns = dict(STATUS_METRICS)
    for name in data.metric_names:
        if name not in columns and name in METRICS:
            unit = METRICS[name].unit
            columns[name] = name.removesuffix(f"_{unit}").replace("_", " ") + (f" {unit}" if unit else "")
    return columns


def status_table(data: StudyData, front: Sequence[int], *, has_slo: bool = False) -> Table:
    """One row per launch (and per reused or running ask): #, status, every metric, knobs and why.

    The number, status and metric columns never wrap or shrink; the knobs (with the reason on a
    line of its own) wrap, so the table reads at any width from 80 columns up and when piped.
    """
    frame = trials_frame(data, front)
    asks = {a.number: a for a in classify(data.trials, data.rows)}
    metrics = _metric_columns(data)
    shown = [r for r in frame.to_dict("records") if _in_table(asks.get(int(r["trial"])))]
    dead = dead_trials(data)
    title = f"study {data.name}: {len(shown)} of {len(frame)} asks shown (launches, reused, running)"
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, expand=False)
    table.add_column("#", justify="right", no_wrap=True, min_width=3)
    table.add_column("status", no_wrap=True)
    for header in metrics.values():
        table.add_column(header, justify="right", no_wrap=True)
    table.add_column("knobs, and why", overflow="fold", min_width=12)  # the one column that wraps
    for rec in shown:
        number = int(rec["trial"])
        ask = asks.get(number)
        values, spread = _with_repeats(data, number, rec)
        label, style = _status_label(ask, rec, has_slo)
        if ask is not None and ask.fate in (Fate.FAILED, Fate.RETRIED):
            values = _without_benchmark(values)  # a failed launch's benchmark measured nothing to trust
        reused = f"same launch as #{int(rec['reused_from'])}" if _present(rec["reused_from"]) else ""
        message = str(rec["why"]) if _present(rec["why"]) else ""
        if ask is not None and ask.fate is Fate.RUNNING and number in dead:
            label, style, message = "dead", "red", dead[number]
        table.add_row(
            f"{number}{'*' if rec['pareto'] else ''}",
            f"[{style}]{label}[/{style}]",
            *(_num(values.get(name)) for name in metrics),
            _knobs_and_why(str(rec["knobs"]), _joined(spread, reused, _first_line(message))),
        )
    return table


def _joined(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def _first_line(message: str, limit: int = 200) -> str:
    line = (message.splitlines() or [""])[0]
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _knobs_and_why(knobs: str, why: str) -> Text:
    text = Text(knobs)
    if why:
        text.append("\n" + why, style="dim")
    return text


def _in_table(ask: Ask | None) -> bool:
    return ask is None or ask.fate.launched or ask.fate in (Fate.REUSED, Fate.RUNNING, Fate.RETRIED)


def _status_label(ask: Ask | None, rec: dict[str, Any], has_slo: bool) -> tuple[str, str]:
    if ask is None:
        return str(rec["status"]), "dim"
    noisy = NOISY_MARK if ask.noisy else ""
    if ask.fate is Fate.OK:
        return f"ok{noisy}", "green"
    if ask.fate is Fate.CONSTRAINT_MISSED:
        return f"{'SLO' if has_slo else 'constraint'} missed{noisy}", "yellow"
    if ask.fate in (Fate.FAILED, Fate.RETRIED):
        return str(ask.failure or "failed"), "red"
    if ask.fate is Fate.REUSED:
        return "reused", "dim"
    return ask.fate.value, "cyan"


def print_status(
    store: ResultStore, study_name: str, study: optuna.Study | None, console: Any = None
) -> None:
    """The launches table, what became of every ask, the pruned asks by rule, and the Pareto front."""
    piped = not sys.stdout.isatty() and "COLUMNS" not in os.environ  # rich reads COLUMNS itself
    console = console or Console(width=160 if piped else None)
    data = study_data(store, study_name, study)
    try:
        front = pareto_front(data)
        trouble = None
    except ReportError as exc:
        front = pareto_front(data, strict=False)
        trouble = str(exc)
    has_slo = defines_slo(data)
    console.print(status_table(data, front, has_slo=has_slo))
    legend = param_legend(trials_frame(data, front).attrs.get("params", []))
    if legend:
        console.print(f"[dim]knobs: {legend}[/dim]")
    asks = classify(data.trials, data.rows)
    counts, dead = tally(asks), dead_trials(data)
    for line in tally_lines(replace(counts, running=counts.running - len(dead)), has_slo=has_slo):
        console.print(line)
    if dead:
        console.print(f"{len(dead)} dead: their worker on this host is gone (the next run retries them)")
    for line in pruned_lines(asks):
        console.print(line)
    for line in noisy_lines(asks):
        console.print(f"[dim]{line}[/dim]")
    console.print(f"Pareto front (* above) over {', '.join(data.metric_names)}: trials {list(front) or '-'}")
    for line in capacity_lines(data):
        console.print(line)
    for line in running_lines(data):
        console.print(line)
    search = search_summary(data)
    if search:
        console.print(search)
    if trouble:
        console.print(f"[bold red]warning:[/bold red] {trouble}")


def noisy_lines(asks: Sequence[Ask]) -> list[str]:
    """`~ marked noisy: other processes kept ...: #0 (lag p99 9.1 ms), #6 (...)`: one line per reason."""
    groups: dict[str, list[str]] = {}
    for ask in asks:
        if ask.noisy and ask.fate.measured:
            head, _, detail = ask.noisy.partition(" (")
            lag = re.search(r"lag p99 ([^,)]+)", detail)
            groups.setdefault(head, []).append(
                f"#{ask.number}" + (f" (lag p99 {lag.group(1)})" if lag else "")
            )
    return [f"{NOISY_MARK} marked {head}: {', '.join(items)}" for head, items in groups.items()]


def pruned_lines(asks: Sequence[Ask], limit: int = 12) -> list[str]:
    """`pruned by nan_pair (3): #4, #7, #9`: the asks pruned without a launch, grouped by rule."""
    groups: dict[str, list[int]] = {}
    for ask in asks:
        if ask.fate in (Fate.PRUNED_RULE, Fate.PRUNED_MEMORY):
            groups.setdefault(ask.rule or ask.fate.value, []).append(ask.number)
    lines = []
    for rule, numbers in groups.items():
        shown = ", ".join(f"#{n}" for n in numbers[:limit]) + (
            f", +{len(numbers) - limit} more" if len(numbers) > limit else ""
        )
        lines.append(f"  pruned by {rule.replace('_', ' ')} ({len(numbers)}): {shown}")
    return lines


def capacity_lines(data: StudyData) -> list[str]:
    """`capacity under SLO: #13: 10.4 req/s within ttft_p99_ms<=2000 (...)`, the latest run per trial."""
    latest = latest_by_row(data.capacity)
    return [f"capacity under SLO: {record.line()}" for record in latest.values()]


def dead_trials(data: StudyData, host: str | None = None) -> dict[int, str]:
    """The RUNNING trials whose worker ran on this host and whose pid is gone: dead, not running
    (the next `run` on this host fails and retries them). Other hosts' trials are left to their
    heartbeat: a pid means nothing here."""
    here = host or host_name()
    out = {}
    for t in data.trials:
        a = t.user_attrs
        if t.state is not TrialState.RUNNING or a.get("host") != here or not isinstance(a.get("pid"), int):
            continue
        if a["pid"] != os.getpid() and not pid_alive(a["pid"]):
            out[t.number] = (
                f"its worker (pid {a['pid']} on {here}) is gone: the tuner died during this trial; "
                "run the same command again to retry it"
            )
    return out


def running_lines(data: StudyData, now: datetime | None = None) -> list[str]:
    """One line per trial running now (several with `run --parallel`): its worker, GPUs and age; a
    trial whose worker on this host is gone is said to be dead."""
    now = now or datetime.now()
    dead = dead_trials(data)
    lines = []
    for t in data.trials:
        if t.state is not TrialState.RUNNING:
            continue
        if t.number in dead:
            lines.append(f"dead: trial {t.number}: {dead[t.number]}")
            continue
        a = t.user_attrs
        gpus = a.get("gpus")
        where = f"GPUs {','.join(map(str, gpus))}" if isinstance(gpus, list) and gpus else "all GPUs"
        age = "" if t.datetime_start is None else f", for {(now - t.datetime_start).total_seconds():.0f} s"
        worker = f"{a.get('host', '?')} pid {a.get('pid', '?')}"
        lines.append(f"running: trial {t.number} on {worker}, {where}{age}")
    return lines


def search_summary(data: StudyData) -> str:
    """Re-measurements and how well the memory model predicted KV tokens and free VRAM."""
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
    parts = [f"{repeats} re-measurements"] if repeats else []
    if kv_err:
        parts.append(
            f"memory model: KV tokens within {statistics.median(kv_err):.1f}% (median of {len(kv_err)})"
        )
    if free_err:
        parts.append(f"free VRAM within {statistics.median(free_err):,.0f} MiB (median of {len(free_err)})")
    return "search: " + "; ".join(parts) if parts else ""


def _with_repeats(data: StudyData, number: int, rec: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """A trial's values as every view shows them (tuner.report.figures) and, re-measured, their spread."""
    row = data.row_of(number)
    if row is None:
        return rec, ""
    figures = trial_figures(data, row)
    return {**rec, **figures.values}, figures.spread()


def _without_benchmark(values: dict[str, Any]) -> dict[str, Any]:
    """The values of a failed launch: what the server reported at start (KV tokens, free VRAM) stays."""
    return {k: None if k in METRICS and METRICS[k].source is Source.BENCH else v for k, v in values.items()}


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
