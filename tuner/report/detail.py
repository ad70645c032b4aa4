"""Second-level reports: failures with their log excerpts, parameter importances, per-request latencies.

Pure functions over store rows and Optuna FrozenTrials, except `requests_frame`
(reads the request records of chosen trials). Re-exported by tuner.report.frame.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields

import optuna
import pandas as pd
from optuna.trial import FrozenTrial, TrialState

from tuner.report.frame import EXCERPT_LINES, StudyData, compact_params, failure_class, measurements
from tuner.report.goodput import with_latencies
from tuner.report.why import reason, slos_of
from tuner.store.capacity import CapacityRecord
from tuner.store.protocol import ResultStore
from tuner.store.rows import StoredTrial

__all__ = [
    "MIN_IMPORTANCE_TRIALS",
    "capacity_frame",
    "Importances",
    "failures_by_class",
    "FailureView",
    "failure_views",
    "failures_frame",
    "param_importances",
    "requests_frame",
    "with_latencies",
]

# ----------------------------------------------------------------------------------- failures


def failures_by_class(rows: Sequence[StoredTrial]) -> Counter[str]:
    """How many launches ended in each failure class (SLO misses as slo_violation; pruned asks never
    launched, so they are not failures: tuner.study.asks counts them by rule)."""
    return Counter(
        c for r in rows if r.confirm_of is None and _launched(r) and (c := failure_class(r)) is not None
    )


def _launched(row: StoredTrial) -> bool:
    return row.outcome.kind.launched


@dataclass(frozen=True, kw_only=True, slots=True)
class FailureView:
    """One launch that is not ok, as every view prints it: every field a string or a number, never
    missing (no view formats a None or a pandas NaN). Built only by `failure_views`."""

    trial: int
    row_id: int  # 0: no row (the tuner died before recording the trial)
    confirm_of: int  # 0: not a re-measurement
    failure: str  # the failure class, slo_violation, or tuner_died
    phase: str  # "" where no stage is known
    message: str  # why, in one line (tuner.report.why)
    exit_code: str  # "" where the server did not exit
    params: str
    log_excerpt: str
    log_path: str

    @property
    def title(self) -> str:
        """`trial 8: slo_violation` or `trial 3: oom (launch)`."""
        return f"trial {self.trial}: {self.failure}" + (f" ({self.phase})" if self.phase else "")


def failure_views(
    source: StudyData | Sequence[StoredTrial], *, lines: int = EXCERPT_LINES
) -> tuple[FailureView, ...]:
    """Every launch that failed or missed a constraint, and every trial the tuner's own process died
    in (from the study's Optuna trials), each with its reason."""
    data = source if isinstance(source, StudyData) else None
    rows = data.rows if data is not None else tuple(source)  # type: ignore[arg-type]
    slos = slos_of(data.space_text) if data is not None else ()
    trials = {t.number: t for t in data.trials} if data is not None else {}
    out = []
    for r in rows:
        failure = failure_class(r)
        if failure is None or not _launched(r):
            continue
        trial = trials.get(r.trial_number) if r.trial_number is not None else None
        out.append(
            FailureView(
                trial=r.trial_number if r.trial_number is not None else -1,
                row_id=r.id,
                confirm_of=r.confirm_of or 0,
                failure=failure,
                phase=r.failure_phase.value if r.failure_phase else "",
                message=reason(r, trial, measurements(r), slos),
                exit_code="" if r.exit_code is None else str(r.exit_code),
                params=compact_params(r.params),
                log_excerpt="\n".join((r.log_excerpt or "").splitlines()[-lines:]),
                log_path=r.log_path or "",
            )
        )
    recorded = {r.trial_number for r in rows}
    retried = {int(t.user_attrs["retry_of"]): t.number for t in trials.values()
               if isinstance(t.user_attrs.get("retry_of"), int)}  # fmt: skip
    for number, t in sorted(trials.items()):
        if t.state is not TrialState.FAIL or number in recorded or t.user_attrs.get("outcome"):
            continue
        out.append(
            FailureView(
                trial=number,
                row_id=0,
                confirm_of=0,
                failure="tuner_died" if not t.user_attrs.get("failure_message") else "not_recorded",
                phase=str(t.user_attrs.get("phase") or ""),
                message=reason(None, t, {}, slos, retried_as=retried.get(number)),
                exit_code="",
                params=compact_params(t.params),
                log_excerpt="",
                log_path="",
            )
        )
    return tuple(out)


FAILURE_COLUMNS = tuple(f.name for f in fields(FailureView))


def failures_frame(source: StudyData | Sequence[StoredTrial], *, lines: int = EXCERPT_LINES) -> pd.DataFrame:
    """`failure_views` as a table (failures.csv, the notebook): one row per view, no missing cell."""
    views = failure_views(source, lines=lines)
    return pd.DataFrame.from_records([asdict(v) for v in views], columns=list(FAILURE_COLUMNS))


def capacity_frame(records: Sequence[CapacityRecord]) -> pd.DataFrame:
    """One row per load measured by `tuner capacity`: the trial, the SLOs, the load, pass or fail, why."""
    out = []
    for r in records:
        for p in r.points:
            medians = p.get("medians") or {}
            out.append(
                {
                    "trial": r.trial_number,
                    "row_id": r.row_id,
                    "knob": r.knob,
                    "slos": "; ".join(r.slos),
                    "capacity": r.capacity,
                    "bound_by": r.bound() if r.outcome == "ok" else r.outcome,
                    "load": p.get("load"),
                    "passed": p.get("passed"),
                    "runs": p.get("runs"),
                    **{f"median_{k}": v for k, v in medians.items()},
                    **{f"curve_{k}": v for k, v in (p.get("curve") or {}).items()},
                    "why": p.get("why"),
                    "limits": "; ".join(p.get("limits") or []),
                    "outcome": r.outcome,
                    "measured_at": r.created_at,
                }
            )
    return pd.DataFrame.from_records(out)


# -------------------------------------------------------------------------------- importances


@dataclass(frozen=True, kw_only=True, slots=True)
class Importances:
    """Parameter importance per objective (rows: params, columns: objectives), or why there is none."""

    table: pd.DataFrame
    note: str | None = None


MIN_IMPORTANCE_TRIALS = 4


def param_importances(
    trials: Sequence[FrozenTrial],
    directions: Sequence[str],
    metric_names: Sequence[str],
    *,
    feasible_only: bool = False,
) -> Importances:
    """Optuna's default evaluator (PED-ANOVA in 5.0) once per objective, through `target=`.

    PED-ANOVA scores what it takes to reach *low* target values, so maximised
    objectives are negated. Over all COMPLETE trials by default: measured ones (and
    an earlier release's failures, told with pessimistic values); `feasible_only`
    keeps only trials that met every constraint.
    """
    complete = [
        t
        for t in trials
        if t.state is TrialState.COMPLETE
        and t.values is not None
        and (not feasible_only or all(v <= 0 for v in t.constraints.values()))
    ]
    varied = {n for t in complete for n in t.params if len({repr(u.params.get(n)) for u in complete}) > 1}
    if len(complete) < MIN_IMPORTANCE_TRIALS or not varied:
        note = (
            f"parameter importance needs at least {MIN_IMPORTANCE_TRIALS} complete trials with a varied "
            f"parameter (got {len(complete)} complete, {len(varied)} varied parameter(s))"
        )
        return Importances(table=pd.DataFrame(), note=note)
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "new study created in memory" line
    try:
        study = optuna.create_study(directions=[optuna.study.StudyDirection[d.upper()] for d in directions])
    finally:
        optuna.logging.set_verbosity(verbosity)
    study.add_trials(complete)
    columns: dict[str, dict[str, float]] = {}
    notes = []
    for i, (metric, direction) in enumerate(zip(metric_names, directions, strict=False)):
        sign = -1.0 if direction == "maximize" else 1.0
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                columns[metric] = optuna.importance.get_param_importances(study, target=_target(i, sign))
        except (ValueError, RuntimeError, ZeroDivisionError) as exc:
            notes.append(f"{metric}: {exc}")
    table = pd.DataFrame(columns).fillna(0.0)
    if not table.empty:
        table = table.sort_values(list(table.columns)[0], ascending=False)
    return Importances(table=table, note="; ".join(notes) or None)


def _target(index: int, sign: float) -> Callable[[FrozenTrial], float]:
    def target(trial: FrozenTrial) -> float:
        return sign * float(trial.values[index])

    return target


# ------------------------------------------------------------------------------------ requests


def requests_frame(store: ResultStore, rows: Sequence[StoredTrial]) -> pd.DataFrame:
    """Every request record of the given trials, with trial, row_id and ttft_ms / tpot_ms / e2e_ms."""
    frames = []
    for row in rows:
        frame = store.requests(row.id)
        if frame.empty:
            continue
        frames.append(with_latencies(frame).assign(trial=row.trial_number, row_id=row.id))
    if not frames:
        return pd.DataFrame(columns=["trial", "row_id", "point_label", "ttft_ms", "tpot_ms", "e2e_ms"])
    return pd.concat(frames, ignore_index=True)
