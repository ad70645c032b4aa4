"""What happened to each ask of a study, in one model every view reads (pure).

An Optuna trial is an *ask*. Some asks become launches (the server started, or tried to):
those end ok, missed a constraint, or failed with a class; a measurement may be marked noisy.
The others never launched: pruned by a failure rule, pruned by the memory model, forbidden by
the space (a backend pair not among its choices), or reused (the same launch was already
measured). Status, `studies`, the run's summary, the bare-run resume, the HTML report, the CSV,
the notebook and the dashboard's state all count with `classify` and `tally`, so they agree.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from tuner.config import OUTCOMES
from tuner.search.told import concluded
from tuner.store.rows import StoredTrial

# The user attributes the study writes on asks that never launched (see tuner.study.tell).
PRUNED_ATTR = "pruned"
FORBIDDEN_ATTR = "forbidden"
REUSED_ATTRS = ("dedup_of", "duplicate_running")
MEMORY_MODEL_RULE = "memory_model"
NOISY_PREFIX = "noisy"
MEASURED = frozenset(o.value for o, kind in OUTCOMES.items() if kind.measured)  # as trial attrs hold them


class Fate(str, Enum):
    """What became of one ask."""

    OK = "ok"  # launched, measured, met every constraint
    CONSTRAINT_MISSED = "constraint missed"  # launched, measured, missed a constraint
    FAILED = "failed"  # launched; crash, OOM, NaN, ... (the class is `Ask.failure`)
    PRUNED_RULE = "pruned by rule"
    PRUNED_MEMORY = "pruned by the memory model"
    FORBIDDEN = "forbidden"  # the space forbids it: never a candidate
    REUSED = "reused"  # the same launch was measured before: its result is reused
    RETRIED = "retried"  # launched, failed for a reason outside the configuration: asked again
    RUNNING = "running"
    WAITING = "waiting"

    @property
    def launched(self) -> bool:
        """The ask became a launch that finished (ok, constraint missed or failed)."""
        return self in (Fate.OK, Fate.CONSTRAINT_MISSED, Fate.FAILED)

    @property
    def measured(self) -> bool:
        return self in (Fate.OK, Fate.CONSTRAINT_MISSED)


@dataclass(frozen=True, kw_only=True, slots=True)
class Ask:
    """One ask and its fate."""

    number: int
    fate: Fate
    failure: str | None = None  # failure class of a failed launch
    rule: str | None = None  # the rule that pruned it
    reused_from: int | None = None
    noisy: str | None = None  # why its measurement is marked noisy (None: not marked)


@dataclass(frozen=True, kw_only=True, slots=True)
class Tally:
    """The asks of a study counted by fate; every view's numbers come from here."""

    asked: int
    ok: int
    constraint_missed: int
    failed: Mapping[str, int] = field(default_factory=dict)  # failure class -> launches
    noisy: int = 0
    pruned: Mapping[str, int] = field(default_factory=dict)  # rule -> asks
    pruned_memory: int = 0
    forbidden: int = 0
    reused: int = 0
    retried: int = 0
    running: int = 0
    waiting: int = 0

    @property
    def launched(self) -> int:
        return self.ok + self.constraint_missed + sum(self.failed.values())

    @property
    def not_launched(self) -> int:
        return sum(self.pruned.values()) + self.pruned_memory + self.forbidden + self.reused


def _noisy(attrs: Mapping[str, Any]) -> str | None:
    warning = attrs.get("warning")
    if not isinstance(warning, str):
        return None
    marks = [part.strip() for part in warning.split(";") if part.strip().startswith(NOISY_PREFIX)]
    return "; ".join(marks) or None


def classify_trial(trial: FrozenTrial | None, row: StoredTrial | None, number: int | None = None) -> Ask:
    """The fate of one ask, from its Optuna trial (user attributes, state) and its recorded row."""
    attrs: Mapping[str, Any] = trial.user_attrs if trial is not None else {}
    n = trial.number if trial is not None else (number if number is not None else -1)
    if trial is not None and trial.state is TrialState.RUNNING:
        return Ask(number=n, fate=Fate.RUNNING)
    if trial is not None and trial.state is TrialState.WAITING:
        return Ask(number=n, fate=Fate.WAITING)
    if trial is not None and trial.state is TrialState.FAIL and not concluded(trial):
        failure = row.outcome.value if row is not None else str(attrs.get("outcome") or "failed")
        return Ask(number=n, fate=Fate.RETRIED, failure=failure)
    if attrs.get(FORBIDDEN_ATTR):
        return Ask(number=n, fate=Fate.FORBIDDEN, rule="forbidden")
    if attrs.get(PRUNED_ATTR):
        rule = str(attrs.get("rule") or MEMORY_MODEL_RULE)
        fate = Fate.PRUNED_MEMORY if rule == MEMORY_MODEL_RULE else Fate.PRUNED_RULE
        return Ask(number=n, fate=fate, rule=rule)
    for key in REUSED_ATTRS:
        if key in attrs and attrs[key] is not None and attrs[key] is not False:
            source = attrs[key]
            return Ask(number=n, fate=Fate.REUSED, reused_from=source if isinstance(source, int) else None)
    noisy = _noisy(attrs)
    if row is not None and row.trial_number == n:
        if row.outcome.measured:
            fate = Fate.OK if row.feasible else Fate.CONSTRAINT_MISSED
            return Ask(number=n, fate=fate, noisy=noisy)
        return Ask(number=n, fate=Fate.FAILED, failure=row.outcome.value)
    outcome = attrs.get("outcome")
    if outcome in MEASURED:
        fate = Fate.OK if attrs.get("feasible") else Fate.CONSTRAINT_MISSED
        return Ask(number=n, fate=fate, noisy=noisy)
    failure = str(outcome) if outcome else (trial.state.name.lower() if trial is not None else "unrecorded")
    return Ask(number=n, fate=Fate.FAILED, failure=failure)


def classify(trials: Iterable[FrozenTrial], rows: Iterable[StoredTrial] = ()) -> tuple[Ask, ...]:
    """The fate of every ask; without Optuna trials, of every recorded (non-repeat) row."""
    trials = tuple(trials)
    by_number = {r.trial_number: r for r in rows if r.confirm_of is None and r.trial_number is not None}
    if trials:
        return tuple(classify_trial(t, by_number.get(t.number)) for t in trials)
    return tuple(classify_trial(None, r, n) for n, r in sorted(by_number.items()))


def tally(asks: Iterable[Ask]) -> Tally:
    """Count asks by fate (failures by class, pruned asks by rule)."""
    fates: Counter[Fate] = Counter()
    failed: Counter[str] = Counter()
    pruned: Counter[str] = Counter()
    noisy = asked = 0
    for ask in asks:
        asked += 1
        fates[ask.fate] += 1
        if ask.fate is Fate.FAILED:
            failed[ask.failure or "failed"] += 1
        if ask.fate is Fate.PRUNED_RULE:
            pruned[ask.rule or "rule"] += 1
        noisy += ask.noisy is not None and ask.fate.measured
    return Tally(
        asked=asked,
        ok=fates[Fate.OK],
        constraint_missed=fates[Fate.CONSTRAINT_MISSED],
        failed=dict(failed.most_common()),
        noisy=noisy,
        pruned=dict(pruned.most_common()),
        pruned_memory=fates[Fate.PRUNED_MEMORY],
        forbidden=fates[Fate.FORBIDDEN],
        reused=fates[Fate.REUSED],
        retried=fates[Fate.RETRIED],
        running=fates[Fate.RUNNING],
        waiting=fates[Fate.WAITING],
    )


def missed_word(has_slo: bool) -> str:
    """`SLO missed` where the space defines an SLO, else `constraint missed`."""
    return "SLO missed" if has_slo else "constraint missed"


def tally_lines(t: Tally, *, has_slo: bool = False) -> list[str]:
    """`20 asks, 12 launches: 8 ok, 1 constraint missed, 3 failed (oom=2, nan=1)`, then the asks not
    launched (pruned by rule, by the memory model, forbidden, reused)."""
    failed = sum(t.failed.values())
    parts = [f"{t.ok} ok"]
    if t.constraint_missed:
        parts.append(f"{t.constraint_missed} {missed_word(has_slo)}")
    if failed:
        parts.append(f"{failed} failed ({', '.join(f'{k}={v}' for k, v in t.failed.items())})")
    noisy = f"; {t.noisy} measurements marked noisy" if t.noisy else ""
    lines = [f"{t.asked} asks, {t.launched} launches: {', '.join(parts)}{noisy}"]
    skipped = []
    if t.pruned:
        by_rule = ", ".join(f"{k}={v}" for k, v in t.pruned.items())
        skipped.append(f"{sum(t.pruned.values())} pruned by rule ({by_rule})")
    if t.pruned_memory:
        skipped.append(f"{t.pruned_memory} pruned by the memory model")
    if t.forbidden:
        skipped.append(f"{t.forbidden} forbidden by the space")
    if t.reused:
        skipped.append(f"{t.reused} reused an earlier measurement")
    if skipped:
        lines.append(f"not launched: {t.not_launched} ({'; '.join(skipped)})")
    if t.retried:
        lines.append(f"{t.retried} launches failed outside the configuration and were asked again")
    if t.running or t.waiting:
        lines.append(f"{t.running} running, {t.waiting} waiting")
    return lines
