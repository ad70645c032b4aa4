"""How a trial's verdict reaches Optuna, and which finished trials carry one (pure).

A measured launch (ok, or ran and missed a constraint) is told COMPLETE with its measured values.
A launch that failed (crash, OOM, NaN, gate, ...) is told FAIL, and an ask that launched nothing
(pruned by a rule or the memory model, forbidden by the space) is told PRUNED: neither gets
placeholder values, so optuna-dashboard's axes and Optuna's own plots show measurements only. The
verdict itself is in the user attributes either way (`outcome`, `feasible`, `failure`, `c_<name>`)
and in the constraints (`failure` > 0), and the tuner's search reads it from there: the structured
sampler and the failure rules learn from a FAIL as they did from a COMPLETE-infeasible trial, TPE
ranks a PRUNED trial with a violated constraint among its infeasible ones; GP and NSGA-II see
neither, the failure rules keep them out of a proven crash region (a covered suggestion is pruned
without a launch).

A FAIL is also what Optuna gives a trial that ended without a verdict: retried (not the
configuration's fault), lost with its worker, or unrecordable. The pending tell written before the
row (`pending_tell`, tuner.study.durable) says which: a verdict's FAIL or PRUNED carries
`"verdict": true`. Databases of earlier releases hold every failure as COMPLETE with pessimistic
values (0 for a maximised metric): `concluded` counts them as before, and their values are never
measurements (`measured_values`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from optuna.trial import FrozenTrial, TrialState

__all__ = ["PENDING", "VERDICT_STATES", "concluded", "measured_values", "verdict_state"]

PENDING = "pending_tell"  # user attribute: the tell a trial is about to get (tuner.study.durable)
VERDICT_STATES = (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED)
_MEASURED = ("ok", "slo_violation")


def verdict_state(*, measured: bool, launched: bool) -> TrialState:
    """The state a verdict is told with: COMPLETE when measured, else FAIL (launched) or PRUNED."""
    if measured:
        return TrialState.COMPLETE
    return TrialState.FAIL if launched else TrialState.PRUNED


def concluded(trial: FrozenTrial) -> bool:
    """The trial was told with a verdict: COMPLETE (any release), or FAIL / PRUNED with its verdict.

    False for running and waiting trials and for a FAIL without a verdict (retried, lost, unrecordable).
    """
    if trial.state is TrialState.COMPLETE:
        return True
    if trial.state not in (TrialState.FAIL, TrialState.PRUNED):
        return False
    pending = trial.user_attrs.get(PENDING)
    if not isinstance(pending, Mapping):
        return False
    return bool(pending.get("verdict")) and pending.get("state") == trial.state.name


def measured_values(trial: FrozenTrial) -> tuple[float, ...] | None:
    """A trial's objective values when they are a measurement: None for failures, asks that launched
    nothing, and the placeholder values earlier releases told for them (COMPLETE with outcome `oom`)."""
    if trial.state is not TrialState.COMPLETE or trial.values is None:
        return None
    attrs: Mapping[str, Any] = trial.user_attrs
    outcome = attrs.get("outcome")
    if attrs.get("pruned") or attrs.get("forbidden"):
        return None
    if outcome is not None and outcome not in _MEASURED:
        return None
    return tuple(float(v) for v in trial.values)
