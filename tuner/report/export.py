"""Launch profiles: pick a trial (by number, or from the feasible Pareto front by a preference) and
describe it as a `Profile` (knobs, exact argv, measurements with their spread, provenance).

Pure functions over `tuner.report.frame.StudyData`; rendering to a shell script,
an SGLang `--config` YAML or JSON is in tuner.report.profile, reading the
database in tuner.report.frame.load_study_data and the CLI.

`--best` preferences, among feasible Pareto-front trials whose lowest free
VRAM during the run was at least `min_free_mib`:

- throughput: the highest output throughput (ties: more KV-cache tokens);
- kv: the most KV-cache tokens (ties: higher output throughput);
- balanced: the point closest to the utopia point. Output throughput and KV
  tokens are each divided by the best value among the candidates (1 = the
  best, 0.8 = 20 % short of it), and the candidate with the smallest
  Euclidean distance to (1, 1) wins (ties: higher throughput). Scaling by
  the best rather than min–max keeps a two-point front from tying: what
  counts is the relative loss on each axis.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from tuner import front as front_module
from tuner.errors import ProfileError
from tuner.metrics import DEFAULT_OBJECTIVES, METRICS, SPREAD_METRICS
from tuner.report.frame import StudyData, compact_params, launch_gpu_count, measurements, trial_figures
from tuner.report.pareto import pareto_front
from tuner.report.verify import verify_lines
from tuner.store.rows import StoredTrial

__all__ = [
    "PREFERENCES",
    "Choice",
    "Profile",
    "ProfileError",
    "Spread",
    "build_profile",
    "choose_best",
    "select",
    "spreads",
]

PREFERENCES = ("throughput", "kv", "balanced")


@dataclass(frozen=True, kw_only=True, slots=True)
class Spread:
    """median, min and max of one metric over n measurements of one configuration."""

    median: float
    low: float
    high: float
    n: int

    @property
    def rel_range(self) -> float | None:
        """(max − min) / median; None when the median is 0."""
        return (self.high - self.low) / self.median if self.median else None


@dataclass(frozen=True, kw_only=True, slots=True)
class Choice:
    """The row chosen for export or confirmation and, for --best, why (one line)."""

    row: StoredTrial
    reason: str = ""
    warning: str = ""  # the pick rests on one noisy measurement: `confirm` it (shown, never silent)


@dataclass(frozen=True, kw_only=True, slots=True)
class Profile:
    """One trial's launch, measurements and provenance: what every export format is rendered from."""

    study: str
    trial: int | None
    row_id: int
    config_hash: str
    feasible: bool
    outcome: str
    params: dict[str, Any]
    config: dict[str, Any]
    argv: tuple[str, ...]
    env: dict[str, str]
    host: str | None
    port: int | None
    gpus: tuple[int, ...]
    sglang_version: str
    gpu_names: tuple[str, ...]
    driver: str
    measured: dict[str, float | None]
    gate_verdict: str | None
    gate_reason: str | None
    measured_at: datetime
    exported_at: datetime
    confirmations: dict[str, Spread] = field(default_factory=dict)
    n_confirm: int = 0
    failed_confirms: tuple[str, ...] = ()
    reason: str = ""
    launch_gpus: int = 0  # the GPUs the launch used (tp x pp x dp, or those it was given)
    runs: int = 1  # measurements `measured` is the median of (the trial and its re-measurements)
    warning: str = ""  # the pick rests on one noisy measurement (see Choice.warning)
    notes: tuple[str, ...] = ()  # what a re-rendering for another release changed, shown with the provenance
    context: tuple[str, ...] = ()  # workload, constraints, the other front points with their trade-offs


# ------------------------------------------------------------------------------------ choosing


def _trial_numbers(data: StudyData) -> list[int]:
    return sorted(
        {r.trial_number for r in data.rows if r.trial_number is not None and r.confirm_of is None}
        | {t.number for t in data.trials}
    )


def select(
    data: StudyData,
    *,
    trial: int | None = None,
    prefer: str = "balanced",
    min_free_mib: int | None = None,
    allow_infeasible: bool = False,
) -> Choice:
    """Trial `trial`, or with None the best of the feasible Pareto front by `prefer`; ProfileError if none."""
    if trial is None:
        return choose_best(data, prefer=prefer, min_free_mib=min_free_mib)
    row = data.row_of(trial)
    if row is None:
        known = _trial_numbers(data)
        raise ProfileError(
            f"trial {trial}: no recorded measurement in study {data.name!r} "
            f"(expected one of {_ranges(known) or 'none'})"
        )
    if row.argv is None:
        raise ProfileError(
            f"trial {trial} of study {data.name!r}: never launched ({row.outcome.value}: "
            f"{row.failure_message or 'no launch command'}); expected a trial with a recorded launch"
        )
    if not row.feasible and not allow_infeasible:
        why = row.outcome.value if not row.outcome.measured else "missed an SLO constraint"
        raise ProfileError(
            f"trial {trial} of study {data.name!r} is not feasible ({why}); expected a feasible trial "
            f"(pass --allow-infeasible to export it anyway)"
        )
    reused = next((t.user_attrs.get("dedup_of") for t in data.trials if t.number == trial), None)
    note = f"trial {trial} reused the measurement of trial {reused}" if isinstance(reused, int) else ""
    return Choice(row=row, reason=note)


def _ranges(numbers: Sequence[int]) -> str:
    if len(numbers) > 12:
        return f"{numbers[0]}–{numbers[-1]}"
    return ", ".join(str(n) for n in numbers)


def _objectives(data: StudyData) -> tuple[tuple[str, ...], tuple[str, ...]]:
    names = tuple(data.metric_names) or DEFAULT_OBJECTIVES
    directions = tuple(data.directions) if len(data.directions) == len(names) else ("maximize",) * len(names)
    return names, directions


def preference_metric(data: StudyData, prefer: str) -> str | None:
    """The objective a preference ranks by (None: balanced). `throughput` and `kv` name output
    throughput and KV tokens where the study optimises them, else its first and second objective;
    any objective of the study may be named as it is."""
    names, _ = _objectives(data)
    if prefer == "balanced":
        return None
    if prefer in names:
        return prefer
    legacy = {"throughput": ("output_throughput", 0), "kv": ("kv_tokens", 1)}
    if prefer in legacy:
        metric, index = legacy[prefer]
        return metric if metric in names else names[min(index, len(names) - 1)]
    raise ProfileError(
        f"--prefer: expected one of balanced, throughput, kv or the study's objectives "
        f"({', '.join(names)}) (got {prefer!r})"
    )


def _candidates(data: StudyData, min_free_mib: int | None) -> list[tuple[int, StoredTrial]]:
    """One candidate per measurement of the feasible front (a reused result and its original are one
    launch), kept to those with at least `min_free_mib` free."""
    front = pareto_front(data)
    if not front:
        counts = {r.outcome.value for r in data.rows if r.confirm_of is None}
        raise ProfileError(
            f"study {data.name!r}: no feasible trial to export (expected at least one; "
            f"{len(data.rows)} recorded, outcomes: {', '.join(sorted(counts)) or 'none'})"
        )
    rows: dict[int, tuple[int, StoredTrial]] = {}
    for number in front:
        row = data.row_of(number)
        if row is not None and row.id not in rows:
            rows[row.id] = (number, row)
    candidates = list(rows.values())
    if min_free_mib is None:
        return candidates
    kept = [(n, r) for n, r in candidates if r.min_free_mib is not None and r.min_free_mib >= min_free_mib]
    if not kept:
        best_free = max((r.min_free_mib for _, r in candidates if r.min_free_mib is not None), default=None)
        raise ProfileError(
            f"--min-free-vram {min_free_mib}: no Pareto-front trial of study {data.name!r} kept that "
            f"much GPU memory free (expected ≥ {min_free_mib} MiB; the most any kept: {best_free} MiB)"
        )
    return kept


def choose_best(data: StudyData, *, prefer: str = "balanced", min_free_mib: int | None = None) -> Choice:
    """The feasible Pareto-front trial the preference favours, over the study's own objectives and
    directions (see the module docstring), judged on each trial's figures (medians)."""
    metric = preference_metric(data, prefer)
    names, directions = _objectives(data)
    candidates = _candidates(data, min_free_mib)
    figures = {n: trial_figures(data, r) for n, r in candidates}
    points = {n: tuple(f.get(m) or 0.0 for m in names) for n, f in figures.items()}
    sign = front_module.signs(directions)
    if metric is not None:
        i = names.index(metric)
        order = [i, *(j for j in range(len(names)) if j != i)]
        number = max(points, key=lambda n: (tuple(sign[j] * points[n][j] for j in order), -n))
        best = "lowest" if sign[i] < 0 else "highest"
        title = METRICS[metric].title if metric in METRICS else metric
        why = f"{best} {title}: {_show(metric, points[number][i])}"
    else:
        dist = front_module.utopia_distances(points, directions)
        number = min(
            dist, key=lambda n: (dist[n], tuple(-s * v for s, v in zip(sign, points[n], strict=True)))
        )
        why = f"closest to the utopia point of {', '.join(names)} (normalised distance {dist[number]:.3f})"
    row = dict(candidates)[number]
    vram = f", min free VRAM {row.min_free_mib:,} MiB ≥ {min_free_mib:,}" if min_free_mib is not None else ""
    shown = ", ".join(_show(m, points[number][i]) for i, m in enumerate(names))
    runs = figures[number].runs
    over = f" (medians of {runs} runs)" if runs > 1 else ""
    reason = (
        f"chose trial {number} among {len(candidates)} feasible Pareto-front trial(s) "
        f"(prefer={prefer}: {why}; {shown}{over}{vram})"
    )
    return Choice(row=row, reason=reason, warning=_single_noisy(data, number, runs))


def utopia_distances(first: Mapping[int, float], second: Mapping[int, float]) -> dict[int, float]:
    """Distance of each candidate to (1, 1) once each metric (both maximised) is divided by its best."""
    return front_module.utopia_distances({k: (first[k], second[k]) for k in first}, ("maximize", "maximize"))


def _show(metric: str, value: float) -> str:
    """A value with its unit, or with its title where the title holds the unit (`499,255 KV-cache tokens`)."""
    known = METRICS.get(metric)
    if known is None:
        return f"{value:,.1f} {metric}"
    shown = known.show(value)
    return f"{shown} {known.title}" if known.unit and known.unit in known.title else shown


def _single_noisy(data: StudyData, number: int, runs: int) -> str:
    """A warning when the pick rests on one measurement marked noisy (never re-measured)."""
    from tuner.study.asks import classify

    if runs > 1:
        return ""
    ask = next((a for a in classify(data.trials, data.rows) if a.number == number), None)
    if ask is None or not ask.noisy:
        return ""
    return (
        f"trial {number} was measured once and that measurement is marked {ask.noisy}: re-measure it "
        f"before trusting the pick (python -m tuner confirm --space FILE --trial {number} --repeats 3)"
    )


# ------------------------------------------------------------------------------------ profile


def spreads(rows: Sequence[StoredTrial], metrics: Sequence[str] = SPREAD_METRICS) -> dict[str, Spread]:
    """Median and min–max of each metric over the successful measurements among `rows`."""
    out: dict[str, Spread] = {}
    measured = [measurements(r) for r in rows if r.outcome.measured]
    for metric in metrics:
        values = [v for m in measured if (v := m.get(metric)) is not None]
        if values:
            out[metric] = Spread(
                median=statistics.median(values), low=min(values), high=max(values), n=len(values)
            )
    return out


def build_profile(data: StudyData, choice: Choice, *, now: datetime | None = None) -> Profile:
    """The Profile of the chosen row; with re-validations, the spread over original + repeats."""
    row = choice.row
    if row.argv is None:
        raise ProfileError(f"trial {row.trial_number} of study {data.name!r}: no launch command was recorded")
    repeats = data.confirmations(row.id)
    launch = row.launch or {}
    gpus = tuple(int(g) for g in launch.get("gpus") or ())
    drivers = sorted({str(g.get("driver")) for g in row.gpus if g.get("driver")})
    number = row.trial_number
    if number is None:  # a re-validation row chosen directly: describe its original
        number = next((r.trial_number for r in data.rows if r.id == row.confirm_of), None)
    figures = trial_figures(data, row)
    return Profile(
        study=data.name,
        trial=number,
        row_id=row.id,
        config_hash=row.config_hash,
        feasible=row.feasible,
        outcome=row.outcome.value,
        params=dict(row.params),
        config=dict(row.config),
        argv=tuple(row.argv),
        env=dict(row.env or {}),
        host=launch.get("host"),
        port=launch.get("port"),
        gpus=gpus,
        sglang_version=row.sglang_version,
        gpu_names=tuple(str(g.get("name", "?")) for g in row.gpus),
        driver=", ".join(drivers),
        measured=dict(figures.values),
        runs=figures.runs,
        launch_gpus=launch_gpu_count(row),
        warning=choice.warning,
        gate_verdict=row.gate_verdict,
        gate_reason=row.gate_reason,
        measured_at=row.finished_at,
        exported_at=now or datetime.now(timezone.utc),
        confirmations=spreads((row, *repeats)) if repeats else {},
        n_confirm=len(repeats),
        failed_confirms=tuple(r.outcome.value for r in repeats if not r.outcome.measured),
        reason=choice.reason,
        context=(
            *_noisy_context(data, number),
            *study_context(data, number),
            *_capacity_context(data, row.id),
            *_goodput_context(data, row.id),
            *verify_lines(data.space_text, row.argv),
        ),
    )


def _noisy_context(data: StudyData, number: int | None) -> tuple[str, ...]:
    """`measurement marked noisy: ...` when the exported trial's own measurement was."""
    from tuner.study.asks import classify

    ask = next((a for a in classify(data.trials, data.rows) if a.number == number), None)
    return (f"measurement marked {ask.noisy}",) if ask is not None and ask.noisy else ()


def _goodput_context(data: StudyData, row_id: int) -> tuple[str, ...]:
    """bench_serving's goodput and SLO attainment of the exported trial's measurements."""
    ids = [r.id for r in data.rows if r.id == row_id or r.confirm_of == row_id]
    runs = [g for i in ids if (g := data.goodput.get(i)) is not None]
    if not runs:
        return ()
    more = f" (and {len(runs) - 1} re-measurement(s))" if len(runs) > 1 else ""
    return (f"{runs[0].line()}{more}",)


def _capacity_context(data: StudyData, row_id: int) -> tuple[str, ...]:
    """The latest `tuner capacity` result of the exported trial, with every load it measured."""
    record = data.capacity_of(row_id)
    if record is None:
        return ()
    loads = ", ".join(f"{p['load']:g} {'pass' if p['passed'] else 'fail'}" for p in record.points)
    return (f"capacity under SLO: {record.line()}; loads: {loads}",)


def study_context(data: StudyData, chosen: int | None) -> tuple[str, ...]:
    """Workload, constraints and the feasible front over the study's objectives, with each point's
    trade-off and VRAM headroom (each point's figures: medians over its measurements)."""
    from tuner.errors import ReportError
    from tuner.report.context import (
        constraints_line,
        front_heading,
        front_points,
        tradeoff_lines,
        workload_line,
    )

    try:
        points = front_points(data)
    except ReportError:  # the front's cross-check failed: say so rather than list a front
        points = ()
    names, _ = _objectives(data)
    return (
        workload_line(data),
        constraints_line(data),
        front_heading(names),
        *tradeoff_lines(points, chosen, names),
    )


def knob_line(profile: Profile) -> str:
    """The knobs as `name=value` pairs (full names)."""
    return compact_params(profile.params, {k: k for k in profile.params})
