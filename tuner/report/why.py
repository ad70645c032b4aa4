"""Why a trial is not ok, in one line every view prints (pure).

A trial that missed a constraint names each constraint it missed with the measured value and the
bound (`min_free_vram_mib = 2,041 MiB, bound >= 2,048 (7 short)`); a failed launch its message;
a trial the tuner's own process died in says so, with the pid and host that died. The text is
built here from typed values (the recorded row, the Optuna trial's attributes, the study's SLOs)
and is always a string: no view formats a missing field, so none can print `nan` or `None`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import yaml
from optuna.trial import FrozenTrial, TrialState
from pydantic import ValidationError

from tuner.config import Outcome
from tuner.metrics import METRICS
from tuner.space.goals import Slo
from tuner.store.rows import StoredTrial

__all__ = ["missed_constraints", "reason", "slos_of", "tuner_died"]

CONSTRAINT_PREFIX = "c_slo:"  # the user attribute of each SLO's constraint value (tuner.study.tell)


def slos_of(space_text: str | None) -> tuple[Slo, ...]:
    """The SLO constraints of the space file stored with a study (none where it is absent or unreadable)."""
    if not space_text:
        return ()
    try:
        loaded = yaml.safe_load(space_text)
    except yaml.YAMLError:
        return ()
    found = loaded.get("constraints") if isinstance(loaded, Mapping) else None
    out = []
    for item in found if isinstance(found, list) else []:
        try:
            out.append(Slo.model_validate(item))
        except (ValidationError, ValueError, TypeError):
            continue
    return tuple(out)


def _show(metric: str, value: float) -> str:
    known = METRICS.get(metric)
    return known.show(value) if known is not None else f"{value:,.1f}"


def _missed_line(slo: Slo, value: float | None) -> str:
    if value is None:
        return f"{slo.metric} not measured (bound {slo.op} {slo.bound:,.10g})"
    gap = abs(slo.violation(value))
    word = "over" if slo.op in ("<=", "<") else "short"
    return f"{slo.metric} = {_show(slo.metric, value)}, bound {slo.op} {slo.bound:,.10g} ({gap:,.6g} {word})"


def missed_constraints(
    values: Mapping[str, float | None], slos: Sequence[Slo], attrs: Mapping[str, Any] | None = None
) -> list[str]:
    """Each constraint the measurement missed, with value and bound. The trial's own constraint
    values (its `c_slo:*` attributes, as it was judged) decide which; the study's SLOs otherwise."""
    judged = [
        (slo, float(v))
        for key, v in (attrs or {}).items()
        if key.startswith(CONSTRAINT_PREFIX)
        and isinstance(v, (int, float))
        and (slo := Slo.from_name(key.removeprefix(CONSTRAINT_PREFIX))) is not None
    ]
    if judged:
        return [_missed_line(slo, values.get(slo.metric)) for slo, v in judged if v > 0]
    return [
        _missed_line(slo, values.get(slo.metric)) for slo in slos if slo.violation(values.get(slo.metric)) > 0
    ]


def tuner_died(trial: FrozenTrial, retried_as: int | None = None) -> str:
    """`the tuner's own process died during this trial (pid 123 on h1); ...`."""
    attrs = trial.user_attrs
    who = f" (pid {attrs.get('pid', '?')} on {attrs.get('host', '?')})" if "pid" in attrs else ""
    again = f"; asked again as #{retried_as}" if retried_as is not None else "; asked again"
    return f"the tuner's own process died during this trial{who}, before it was recorded{again}"


def _first_line(text: str, limit: int = 200) -> str:
    line = (text.strip().splitlines() or [""])[0]
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _present(value: object) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value)) and value != ""


def reason(
    row: StoredTrial | None,
    trial: FrozenTrial | None,
    values: Mapping[str, float | None],
    slos: Sequence[Slo],
    *,
    retried_as: int | None = None,
) -> str:
    """Why the trial is not ok, in one line ("" for an ok trial, a running one or a reused one)."""
    attrs: Mapping[str, Any] = trial.user_attrs if trial is not None else {}
    if row is None:
        if trial is None or trial.state is not TrialState.FAIL:
            return ""
        message = attrs.get("failure_message")
        if _present(message):
            return _first_line(str(message))
        if not _present(attrs.get("outcome")):
            return tuner_died(trial, retried_as)
        return f"{attrs['outcome']}: asked again (not the configuration's fault)"
    if row.outcome.measured and row.feasible:
        return ""
    if row.outcome.measured:
        missed = missed_constraints(values, slos, attrs)
        return (
            "missed " + "; ".join(missed) if missed else "missed a constraint (not in the stored space file)"
        )
    if row.outcome is Outcome.PRUNED:
        return _first_line(row.failure_message or "pruned: a failure rule covers it")
    if _present(row.failure_message):
        return _first_line(str(row.failure_message))
    phase = f" at {row.failure_phase.value}" if row.failure_phase is not None else ""
    return f"{row.outcome.value}{phase} (no message recorded)"
