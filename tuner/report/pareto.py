"""The Pareto front of a study, computed from the tuner's rows and cross-checked with Optuna's.

If the two disagree, the records contradict each other and `pareto_front` raises `ReportError`
rather than show a front that one of them denies (reference optuna.md §3).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import optuna
import pandas as pd
from optuna.trial import TrialState

from tuner.errors import ReportError
from tuner.front import non_dominated
from tuner.metrics import HEADLINE
from tuner.report.frame import StudyData, measurements, median_measurements, trials_frame

__all__ = ["front_frame", "non_dominated", "pareto_front", "pareto_numbers"]

log = logging.getLogger(__name__)


def pareto_front(data: StudyData, *, strict: bool = True) -> tuple[int, ...]:
    """Trial numbers on the Pareto front of the study's objectives among feasible trials.

    Computed from the tuner's rows (recorded feasibility and metrics; a reused result counts with
    its original's numbers) and compared with Optuna's best_trials, which see each re-measured trial's
    median (an earlier release's database: its first measurement): disagreement raises ReportError
    (strict) or is logged as an error. The front returned ranks re-measured trials (finalists,
    `confirm`) by their medians.
    """
    points: dict[int, tuple[float, ...]] = {}
    numbers = (
        [t.number for t in data.trials if t.state is TrialState.COMPLETE]
        if data.trials
        else [r.trial_number for r in data.rows if r.confirm_of is None and r.trial_number is not None]
    )
    medians: dict[int, tuple[float, ...]] = {}
    missing = []
    for number in numbers:
        row = data.row_of(number)
        if row is None:
            missing.append(number)
            continue
        if not row.feasible:
            continue
        first, median = measurements(row), median_measurements(data, row)
        point = tuple(first.get(m) for m in data.metric_names)
        if any(v is None for v in point):
            missing.append(number)
            continue
        points[number] = point  # type: ignore[assignment]  # None excluded above
        medians[number] = tuple(median.get(m) or point[i] for i, m in enumerate(data.metric_names))  # type: ignore[misc]
    by_median = non_dominated(medians, data.directions)
    told = {t.number: tuple(t.values) for t in data.trials if t.values is not None}
    # what Optuna holds of each trial: its median once amended (tuner.study.amend), else (a trial of an
    # earlier release, or one whose amendment failed) its first measurement
    ours = non_dominated(
        {n: medians[n] if _same(told.get(n), medians[n]) else p for n, p in points.items()}, data.directions
    )
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
    return by_median  # the front shown ranks every trial by the median of its measurements


def _same(told: tuple[float, ...] | None, values: tuple[float, ...]) -> bool:
    return told is not None and len(told) == len(values) and all(
        math.isclose(a, b, rel_tol=1e-9) for a, b in zip(told, values, strict=True)
    )


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
    rest = [c for c in (*HEADLINE, "n_confirm") if c not in first]  # the registry's headline metrics
    ascending = bool(data.directions and data.directions[0] == "minimize")
    if objectives:
        frame = frame.sort_values(objectives[0], ascending=ascending)
    return frame[[*first, *rest, *frame.attrs.get("params", [])]].reset_index(drop=True)
