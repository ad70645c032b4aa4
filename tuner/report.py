"""Reports over a study: trials table, failures by class, the Pareto front (pure over store rows)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import optuna
import pandas as pd
from optuna.trial import TrialState
from rich.console import Console
from rich.table import Table

from tuner.store import SqlStore
from tuner.store_rows import StoredTrial


def trials_frame(rows: Sequence[StoredTrial]) -> pd.DataFrame:
    """One row per recorded trial: number, outcome, feasibility, knobs, KV tokens and throughput."""
    records: list[dict[str, Any]] = []
    for row in rows:
        rec: dict[str, Any] = {
            "trial": row.trial_number,
            "outcome": row.outcome.value,
            "feasible": row.feasible,
            "phase": row.failure_phase.value if row.failure_phase else None,
        }
        rec.update({f"param.{k}": v for k, v in sorted(row.params.items())})
        rec.update(
            {
                "kv_tokens": row.kv_tokens,
                "output_throughput": row.metrics.get("output_throughput") if row.metrics else None,
                "total_throughput": row.metrics.get("total_throughput") if row.metrics else None,
                "min_free_mib": row.min_free_mib,
                "startup_s": row.startup_s,
                "failure": row.failure_message,
            }
        )
        records.append(rec)
    return pd.DataFrame.from_records(records)


def failures_by_class(rows: Sequence[StoredTrial]) -> Counter[str]:
    """How many recorded trials ended in each failure class."""
    return Counter(r.outcome.value for r in rows if r.outcome.value != "ok")


def pareto_numbers(study: optuna.Study) -> list[int]:
    """Optuna's Pareto front among feasible COMPLETE trials (its constraints honoured)."""
    return sorted(t.number for t in study.best_trials)


def print_status(store: SqlStore, study_name: str, study: optuna.Study | None, console: Console | None = None) -> None:
    """Trials, failures by class and the Pareto front, as tables."""
    console = console or Console()
    rows = store.trials(study_name)
    if study is None:
        try:
            study = optuna.load_study(study_name=study_name, storage=store.url)
        except KeyError:
            study = None
    table = Table(title=f"study {study_name}: {len(rows)} recorded trials")
    for col in ("#", "outcome", "params", "kv tokens", "out tok/s", "total tok/s", "min free MiB", "why"):
        table.add_column(col)
    front = set(pareto_numbers(study)) if study is not None else set()
    for row in rows:
        params = " ".join(f"{k}={v}" for k, v in sorted(row.params.items()))
        m = row.metrics or {}
        mark = "*" if row.trial_number in front else ""
        table.add_row(
            f"{row.trial_number}{mark}",
            row.outcome.value + ("" if row.feasible or row.outcome.value != "ok" else " (SLO)"),
            params,
            _num(row.kv_tokens),
            _num(m.get("output_throughput")),
            _num(m.get("total_throughput")),
            _num(row.min_free_mib),
            (row.failure_message or "")[:70],
        )
    console.print(table)
    fails = failures_by_class(rows)
    if fails:
        console.print("failures by class: " + ", ".join(f"{k}={v}" for k, v in fails.most_common()))
    if study is not None:
        reused = sum(1 for t in study.trials if "dedup_of" in t.user_attrs)
        waiting = sum(1 for t in study.trials if t.state is TrialState.WAITING)
        console.print(
            f"Pareto front (* above): trials {sorted(front) or '-'}; "
            f"{reused} suggestions reused an earlier measurement; {waiting} waiting"
        )


def _num(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return f"{value:,}" if isinstance(value, int) else str(value)
