"""Telling Optuna and recording rows: one verdict per trial, written to the store and to Optuna alike.

A launched trial is judged once (`objectives.judge`); its row, its user attributes (including the
evidence the failure rules are derived from) and the values told to Optuna all come from that
verdict. A measured trial is told COMPLETE with its values; a failed launch FAIL and a pruned
suggestion PRUNED, each without values, with the failure constraint and the outcome in its user
attributes (tuner.search.told); a pruned one is recorded as `pruned` with the rule and evidence that
proved it.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import optuna
from optuna.study._constrained_optimization import _CONSTRAINTS_KEY
from optuna.trial import FrozenTrial, TrialState

from tuner.config import Failure, Outcome, Phase, TrialConfig, Verdict
from tuner.objectives import judge
from tuner.private import make_private, private_dir
from tuner.result import TrialResult
from tuner.search.policy import Decision
from tuner.search.told import verdict_state
from tuner.space.goals import Objective
from tuner.space.loader import SearchSpace
from tuner.store.protocol import ResultStore
from tuner.study.asks import Fate
from tuner.study.durable import mark_pending
from tuner.study.learn import PRUNED, evidence_attrs
from tuner.study.storage import objectives_of, state_label

log = logging.getLogger(__name__)


class Teller:
    """Judges, records and tells the trials of one study."""

    def __init__(self, study: optuna.Study, store: ResultStore, space: SearchSpace, run_dir: Path) -> None:
        self.study = study
        self.store = store
        self.space = space
        self.run_dir = run_dir
        self.objectives = objectives_of(space)

    def verdict(self, result: TrialResult) -> Verdict:
        """The study's verdict on a result (the worst latency seen so far sets failures' values)."""
        return judge(
            result,
            self.objectives,
            self.space.constraints,
            worst_seen=_worst_seen(self.study, self.objectives),
        )

    def launched(
        self,
        trial: optuna.Trial,
        result: TrialResult,
        params: dict[str, Any],
        chash: str,
        extra: dict[str, Any] | None = None,
    ) -> Verdict:
        """Record and tell a launched (or rejected-before-launch) trial; FAIL when retryable."""
        verdict = self.verdict(result)
        failure = result.failure
        attrs: dict[str, Any] = {
            "state": state_label(verdict.outcome.value, verdict.feasible, verdict.retryable),
            "fate": _launch_fate(verdict).value,  # what the views call it (tuner.study.asks)
            "outcome": verdict.outcome.value,
            "feasible": verdict.feasible,
            "failure": failure.outcome.value if failure else None,
            "failure_message": failure.message[:500] if failure else None,
            "phase": failure.phase.value if failure else None,
            "kv_tokens": verdict.metrics.get("kv_tokens"),
            "output_throughput": verdict.metrics.get("output_throughput"),
            "log": str(result.launch.log_path.resolve()) if result.launch else None,
            "warning": "; ".join(result.warnings) or None,
            **evidence_attrs(result, verdict),
            **(extra or {}),
        }
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        for key, value in verdict.constraints.items():
            trial.set_user_attr(f"c_{key}", value)
        self._attach_log(trial, result)
        # pending tell (and constraints), then the row, then the tell (tuner/study/durable.py)
        if verdict.retryable:
            mark_pending(trial, state=TrialState.FAIL)
            self._record(trial.number, result, params, chash, verdict)
            self.study.tell(trial, state=TrialState.FAIL)
            return verdict
        self._conclude(trial, result, params, chash, verdict, launched=True)
        return verdict

    def pruned(
        self,
        trial: optuna.Trial,
        config: TrialConfig,
        params: dict[str, Any],
        chash: str,
        decision: Decision,
        sglang_version: str,
        *,
        forbidden: bool = False,
    ) -> Verdict:
        """Tell a suggestion the policy proved bad (or the space forbids), as infeasible as a real failure,
        without a launch."""
        result = not_launched(config, sglang_version, Outcome.PRUNED, decision.reason)
        verdict = self.verdict(result)
        rule = decision.rule
        attrs: dict[str, Any] = {
            "state": f"PRUNED: {decision.reason[:120]}",
            "fate": (Fate.FORBIDDEN if forbidden else Fate.PRUNED_RULE if rule else Fate.PRUNED_MEMORY).value,
            PRUNED: True,
            "forbidden": forbidden,
            "outcome": Outcome.PRUNED.value,
            "feasible": False,
            "failure": Outcome.PRUNED.value,
            "failure_message": decision.reason[:500],
            "predicted_outcome": decision.outcome.value if decision.outcome else None,
            "rule": rule.kind.value if rule else ("forbidden" if forbidden else "memory_model"),
            "rule_evidence": rule.evidence if rule else None,
        }
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        for key, value in verdict.constraints.items():
            trial.set_user_attr(f"c_{key}", value)
        self._conclude(trial, result, params, chash, verdict, launched=False)
        return verdict

    def _conclude(
        self,
        trial: optuna.Trial,
        result: TrialResult,
        params: dict[str, Any],
        chash: str,
        verdict: Verdict,
        *,
        launched: bool,
    ) -> None:
        """Constraints, pending tell, row, tell: COMPLETE with the measured values, else FAIL (a failed
        launch) or PRUNED (nothing launched) without values (tuner.search.told)."""
        for key, value in verdict.constraints.items():
            trial.set_constraint(key, value)
        self._dashboard_constraints(trial, verdict.constraints)
        state = verdict_state(measured=verdict.outcome.measured, launched=launched)
        values = tuple(verdict.values) if state is TrialState.COMPLETE else ()
        mark_pending(trial, state=state, values=values, verdict=True)
        self._record(trial.number, result, params, chash, verdict)
        if state is TrialState.COMPLETE:
            self.study.tell(trial, list(values))
        else:
            self.study.tell(trial, state=state)

    def reused(self, trial: optuna.Trial, prior: FrozenTrial) -> None:
        """Tell a trial whose effective launch was already measured with that measurement."""
        named = {k: v for k, v in prior.constraints.items() if not k.isdigit()}  # not the dashboard's list
        for key, value in named.items():
            trial.set_constraint(key, value)
        self._dashboard_constraints(trial, named)
        for key in ("state", "outcome", "feasible", "failure", "kv_tokens", "output_throughput"):
            if key in prior.user_attrs:
                trial.set_user_attr(key, prior.user_attrs[key])
        trial.set_user_attr("dedup_of", prior.number)
        trial.set_user_attr("fate", Fate.REUSED.value)
        if prior.state is TrialState.COMPLETE and prior.values is not None:
            mark_pending(trial, state=TrialState.COMPLETE, values=tuple(prior.values), verdict=True)
            self.study.tell(trial, list(prior.values))
        else:  # the launch failed: this ask fails with it, without values
            mark_pending(trial, state=prior.state, verdict=True)
            self.study.tell(trial, state=prior.state)

    def _dashboard_constraints(self, trial: optuna.Trial, constraints: Mapping[str, float]) -> None:
        """The constraints again as Optuna's older list attribute: optuna-dashboard (0.21) reads only
        that one to grey infeasible trials and keep them off its Pareto front. Optuna reads the list
        back as extra keys "0", "1", ... of `FrozenTrial.constraints`, with the same feasibility."""
        if constraints:
            values = [float(v) for v in constraints.values()]
            self.study._storage.set_trial_system_attr(trial._trial_id, _CONSTRAINTS_KEY, values)

    def _record(
        self, number: int | None, result: TrialResult, params: dict[str, Any], chash: str, verdict: Verdict
    ) -> None:
        """The row; a StoreError stops the run (nothing reports success without a durable record)."""
        self.store.record(
            result,
            study=self.study.study_name,
            trial_number=number,
            params=params,
            config_hash=chash,
            verdict=verdict,
        )

    def _attach_log(self, trial: optuna.Trial, result: TrialResult) -> None:
        """The server log as an Optuna artifact (optuna-dashboard --artifact-dir <run dir>/artifacts)."""
        if result.launch is None or not result.launch.log_path.exists():
            return
        try:
            from optuna.artifacts import FileSystemArtifactStore, upload_artifact

            store_dir = private_dir(self.run_dir / "artifacts")  # owner-only copies of server logs
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                artifact_id = upload_artifact(
                    artifact_store=FileSystemArtifactStore(str(store_dir)),
                    file_path=str(result.launch.log_path),
                    study_or_trial=trial,
                    mimetype="text/plain",
                )
            make_private(store_dir / artifact_id)
        except Exception as exc:  # a log that cannot be attached never loses the trial
            log.warning("could not attach %s to trial %d: %s", result.launch.log_path, trial.number, exc)


def _worst_seen(study: optuna.Study, objectives: tuple[Objective, ...]) -> dict[str, float]:
    worst: dict[str, float] = {}
    trials = [
        t
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if t.user_attrs.get("feasible")
    ]
    for i, obj in enumerate(objectives):
        if obj.direction == "minimize" and trials:
            worst[obj.metric] = max(t.values[i] for t in trials)
    return worst


def _launch_fate(verdict: Verdict) -> Fate:
    if verdict.retryable:
        return Fate.RETRIED
    if verdict.outcome.measured:
        return Fate.OK if verdict.feasible else Fate.CONSTRAINT_MISSED
    return Fate.FAILED


def not_launched(config: TrialConfig, sglang_version: str, outcome: Outcome, message: str) -> TrialResult:
    """The result of a configuration that was never launched (forbidden, pruned)."""
    now = datetime.now(timezone.utc)
    return TrialResult(
        config=config,
        launch=None,
        outcome=outcome,
        failure=Failure(outcome=outcome, phase=Phase.RENDER, message=message),
        sglang_version=sglang_version,
        started_at=now,
        finished_at=now,
    )
