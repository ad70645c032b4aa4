"""The Pareto front of a study, computed from the tuner's rows and cross-checked with Optuna's.

If the two disagree, the records contradict each other and `pareto_front` raises `ReportError`
rather than show a front that one of them denies (reference optuna.md §3).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import optuna
import pandas as pd
from optuna.trial import TrialState

from tuner.errors import ReportError
from tuner.report.frame import StudyData, measurements, trials_frame

log = logging.getLogger(__name__)


def _dominates(a: Sequence[float], b: Sequence[float], signs: Sequence[float]) -> bool:
    """a is at least as good as b everywhere and better somewhere (signs: +1 maximise, -1 minimise)."""
    better = False
    for x, y, s in zip(a, b, signs, strict=False):
        if s * x < s * y:
            return False
        if s * x > s * y:
            better = True
    return better


def non_dominated(points: Mapping[int, Sequence[float]], directions: Sequence[str]) -> tuple[int, ...]:
    """Keys of the points no other point dominates (equal points are all kept, as Optuna does)."""
    signs = [1.0 if d == "maximize" else -1.0 for d in directions]
    return tuple(
        sorted(
            k
            for k, p in points.items()
            if not any(_dominates(q, p, signs) for j, q in points.items() if j != k)
        )
    )


def pareto_front(data: StudyData, *, strict: bool = True) -> tuple[int, ...]:
    """Trial numbers on the Pareto front of the study's objectives among feasible trials.

    Computed from the tuner's rows (recorded feasibility and metrics; a reused
    result counts with its original's numbers) and compared with Optuna's
    best_trials. Disagreement raises ReportError (strict) or is logged as an error.
    """
    points: dict[int, tuple[float, ...]] = {}
    numbers = (
        [t.number for t in data.trials if t.state is TrialState.COMPLETE]
        if data.trials
        else [r.trial_number for r in data.rows if r.confirm_of is None and r.trial_number is not None]
    )
    missing = []
    for number in numbers:
        row = data.row_of(number)
        if row is None:
            missing.append(number)
            continue
        if not row.feasible:
            continue
        values = measurements(row)
        point = tuple(values.get(m) for m in data.metric_names)
        if any(v is None for v in point):
            missing.append(number)
            continue
        points[number] = point  # type: ignore[assignment]  # None excluded above
    ours = non_dominated(points, data.directions)
    theirs = data.best_numbers
    if theirs is not None and tuple(sorted(theirs)) != ours:
        detail = f"; trials without a usable record: {missing}" if missing else ""
        message = (
            f"study {data.name!r}: the Pareto front from the tuner's records is trials {list(ours)}, "
            f"Optuna's best_trials is {list(theirs)} (objectives {', '.join(data.metric_names)}){detail}; "
            f"the experiments database contradicts itself"
        )
        if strict:
            raise ReportError(message)
        log.error("%s", message)
    return ours


def pareto_numbers(study: optuna.Study) -> list[int]:
    """Optuna's Pareto front among feasible COMPLETE trials (its constraints honoured)."""
    return sorted(t.number for t in study.best_trials)


def front_frame(data: StudyData, front: Sequence[int] | None = None) -> pd.DataFrame:
    """The Pareto front as a table: trial, knobs and the objectives first, best first on objective 0."""
    numbers = pareto_front(data) if front is None else tuple(front)
    frame = trials_frame(data, numbers)
    frame = frame[frame["trial"].isin(numbers)]
    objectives = [m for m in data.metric_names if m in frame.columns]
    first = ["trial", "knobs", *objectives]
    rest = [
        c
        for c in (
            "kv_tokens",
            "output_throughput",
            "total_throughput",
            "ttft_p99_ms",
            "tpot_p99_ms",
            "min_free_vram_mib",
            "n_confirm",
        )
        if c not in first
    ]
    ascending = bool(data.directions and data.directions[0] == "minimize")
    if objectives:
        frame = frame.sort_values(objectives[0], ascending=ascending)
    return frame[[*first, *rest, *frame.attrs.get("params", [])]].reset_index(drop=True)
