"""The overnight study: Optuna ask/tell around run_trial, resumable, shared by workers.

Storage is Optuna's RDB storage in the same database as the tuner's own
tables. The loop owns ask/tell so it can (a) reap trials of dead workers and
retry them once, (b) reuse the recorded result of an effective configuration
already measured instead of relaunching it, (c) report config-caused failures
as COMPLETE-but-infeasible and infrastructure faults as FAIL, and (d) keep one
global trial budget across workers (an exclusive lock around count + ask on
one host; across hosts the overshoot is at most one trial per extra worker).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import fail_stale_trials
from optuna.trial import FrozenTrial, TrialState

from tuner.config import Failure, Outcome, Phase, TrialConfig, TrialResult
from tuner.engine import Engine
from tuner.interrupts import INTERRUPTS
from tuner.objectives import is_feasible, judge
from tuner.private import make_private, private_dir
from tuner.session import TrialContext, key_of, prepare_launch, trial_session
from tuner.sglang.process import pid_alive
from tuner.space.loader import SearchSpace, forbidden_reason, suggest
from tuner.space.sections import Objective
from tuner.store.health import StoreWatch
from tuner.store.preflight import check_database
from tuner.store.sql import SqlStore
from tuner.study.backoff import InfraBackoff
from tuner.study.claims import claim_launch
from tuner.study.durable import finish_recorded, mark_pending, store_guard
from tuner.study.storage import MAX_RETRIES, Heartbeat, ask_lock, lock_path, objectives_of, open_study
from tuner.trial import run_trial

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class TrialEvent:
    """What the live display hears after each trial."""

    number: int
    outcome: Outcome
    values: tuple[float, ...]
    feasible: bool
    reused_from: int | None
    message: str
    duration_s: float
    overhead_s: float | None = None  # the tuner's own time: everything but waiting on the server


@dataclass(frozen=True, kw_only=True, slots=True)
class RunSummary:
    """How a `run` ended."""

    study_name: str
    completed: int
    budget: int | None  # None: no trial cap (time budget or Ctrl-C ends the run)
    interrupted: bool
    ran: int


class Hooks:
    """Callbacks for the CLI's live display (all optional)."""

    def __init__(
        self,
        *,
        on_phase: Callable[[int, Phase, str], None] | None = None,
        on_trial: Callable[[TrialEvent], None] | None = None,
        on_start: Callable[[int, int], None] | None = None,
    ) -> None:
        self.on_phase = on_phase
        self.on_trial = on_trial
        self.on_start = on_start


class StudyRunner:
    """One worker of a study: `run()` until the budget is spent, the time is up, or a stop is asked."""

    def __init__(
        self,
        space: SearchSpace,
        *,
        db_url: str,
        study_name: str | None = None,
        n_trials: int | None = None,
        timeout_s: float | None = None,
        hooks: Hooks | None = None,
        progress: bool = False,
    ) -> None:
        self.space = space
        self.db_url = db_url
        self.run_dir = Path(space.log_dir)
        check_database(db_url, create=True)  # reliability: refuse a bad database before touching it
        self.lock = lock_path(db_url, self.run_dir)
        with ask_lock(self.lock):  # first creation of the tables must not race another worker
            self.store = SqlStore(db_url)
            self.study = open_study(space, db_url, study_name)
        self.watch = StoreWatch(db_url)  # reliability: the file vanishing or replaced stops the run
        self.backoff = InfraBackoff.from_budget(space.budget, INTERRUPTS.nap)  # reliability
        self.name = self.study.study_name
        self.budget: int | None = n_trials or space.budget.n_trials
        self.timeout_s = timeout_s if timeout_s is not None else space.budget.timeout_s
        self.hooks = hooks or Hooks()
        self.stop_requested = threading.Event()
        self.progress = progress
        self.host = socket.gethostname()

    # -- bookkeeping under the lock -------------------------------------------------------------

    def _prepare(self) -> None:
        with INTERRUPTS.deferred(), ask_lock(self.lock):
            self._reap_dead_workers()
            attrs = self.study.user_attrs
            if not attrs.get("baselines_enqueued"):
                for params in self.space.baselines:
                    self.study.enqueue_trial(dict(params), user_attrs={"baseline": True}, skip_if_exists=True)
                self.study.set_user_attr("baselines_enqueued", True)

    def _reap_dead_workers(self) -> None:
        """Fail RUNNING trials whose worker on this host is gone, and enqueue one retry of each."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fail_stale_trials(self.study)  # other hosts, after the heartbeat grace period
        for trial in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            attrs = trial.user_attrs
            if attrs.get("host") != self.host:
                continue
            pid = attrs.get("pid")
            if isinstance(pid, int) and (pid == os.getpid() or pid_alive(pid)):
                continue
            # reliability: its row was written but its tell was lost: finish the tell
            if finish_recorded(self.study, self.store, self.name, trial):
                continue
            self.study.tell(trial.number, state=TrialState.FAIL, skip_if_finished=True)
            self._retry(trial, reason="worker died")

    def _retry(self, trial: FrozenTrial, *, reason: str) -> None:
        retries = int(trial.user_attrs.get("retries", 0))
        if retries >= MAX_RETRIES and reason != "interrupted":
            log.warning("trial %d (%s) already retried; not retrying again", trial.number, reason)
            return
        self.study.enqueue_trial(
            dict(trial.params),
            user_attrs={"retry_of": trial.number, "retries": retries + 1, "retry_reason": reason},
        )

    def _counts(self) -> tuple[int, int]:
        trials = self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING))
        done = sum(1 for t in trials if t.state is TrialState.COMPLETE)
        return done, len(trials) - done

    # -- the loop -------------------------------------------------------------------------------

    def run(self, hooks: Hooks | None = None) -> RunSummary:
        """Ask, run and tell trials until the budget or the time is spent, or a stop is asked."""
        if hooks is not None:
            self.hooks = hooks
        started = time.monotonic()
        ran = 0
        interrupted = False
        with store_guard(self.store, self.watch), trial_session(self.space, progress=self.progress) as ctx:
            self._prepare()
            while not self.stop_requested.is_set():
                # reliability: safe point of the loop (a stop asked between trials), store still there
                self.watch.check()
                if INTERRUPTS.requested:
                    interrupted = True
                    break
                if self.timeout_s is not None and time.monotonic() - started > self.timeout_s:
                    log.info("time budget of %.0f s spent", self.timeout_s)
                    break
                trial = self._ask()
                if trial is None:
                    break
                outcome = self._run_one(trial, ctx)
                ran += 1
                self.watch.check()  # reliability: never announce a trial the store has lost
                if outcome is Outcome.INTERRUPTED:
                    interrupted = True
                    break
                # reliability: back off after an infrastructure fault, stop after too many in a row
                self.backoff.after(outcome, str(trial.user_attrs.get("failure_message") or ""))
            done, _ = self._counts()
            self.watch.check()
        return RunSummary(
            study_name=self.name,
            completed=done,
            budget=self.budget,
            interrupted=interrupted or INTERRUPTS.requested,
            ran=ran,
        )

    def _ask(self) -> optuna.Trial | None:
        self._ask_started = time.monotonic()
        with INTERRUPTS.deferred(), ask_lock(self.lock):
            self._reap_dead_workers()
            done, running = self._counts()
            if self.budget is not None and done + running >= self.budget:
                return None
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                trial = self.study.ask()
            trial.set_user_attr("host", self.host)
            trial.set_user_attr("pid", os.getpid())
            if self.hooks.on_start is not None:
                self.hooks.on_start(trial.number, done)
            return trial

    def _run_one(self, trial: optuna.Trial, ctx: TrialContext) -> Outcome:
        t0 = time.monotonic()
        label = f"trial-{trial.number:04d}"
        with Heartbeat(self.study, trial):
            config, params = suggest(self.space, trial)
            prepared = prepare_launch(config, ctx, label=label)
            chash = key_of(prepared)
            # reliability: claim the launch key (sets cfg_hash); waits while a live twin runs it
            claim_launch(
                self.study, trial, chash, lock=self.lock, stop=lambda: INTERRUPTS.requested,
                sleep=INTERRUPTS.nap,
            )
            reused = self._measured_before(chash, exclude=trial.number)
            if reused is not None:
                with INTERRUPTS.deferred():
                    return self._tell_reused(trial, reused, t0)
            forbidden = forbidden_reason(self.space, params)
            if forbidden is not None:
                result = _not_launched(
                    config, ctx.engine, Outcome.BAD_FLAG, f"forbidden combination: {forbidden}"
                )
            else:
                phase_ctx = _with_phase_hook(ctx, trial.number, self.hooks)
                result = run_trial(config, phase_ctx, label=label, prepared=prepared)
        with INTERRUPTS.deferred():
            return self._tell(trial, result, params, chash, t0)

    def _measured_before(self, chash: str, *, exclude: int) -> FrozenTrial | None:
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            if (
                t.number != exclude
                and t.user_attrs.get("cfg_hash") == chash
                and "dedup_of" not in t.user_attrs
            ):
                return t
        return None

    def _tell_reused(self, trial: optuna.Trial, prior: FrozenTrial, t0: float) -> Outcome:
        for key, value in prior.constraints.items():
            trial.set_constraint(key, value)
        for key in ("outcome", "feasible", "failure", "kv_tokens", "output_throughput"):
            if key in prior.user_attrs:
                trial.set_user_attr(key, prior.user_attrs[key])
        trial.set_user_attr("dedup_of", prior.number)
        self.study.tell(trial, list(prior.values))
        outcome = Outcome(prior.user_attrs.get("outcome", "ok"))
        self._announce(
            trial.number,
            outcome,
            tuple(prior.values),
            is_feasible(prior.constraints),
            prior.number,
            f"same launch as trial {prior.number}: result reused",
            t0,
        )
        return outcome

    def _tell(
        self, trial: optuna.Trial, result: TrialResult, params: dict[str, Any], chash: str, t0: float
    ) -> Outcome:
        objectives = objectives_of(self.space)
        verdict = judge(
            result, objectives, self.space.constraints, worst_seen=_worst_seen(self.study, objectives)
        )
        message = result.failure.message if result.failure else verdict.message
        message = "; ".join(m for m in (message, *result.warnings) if m)  # reliability: noisy trials say so
        attrs = {
            "warning": "; ".join(result.warnings) or None,  # reliability
            "outcome": verdict.outcome.value,
            "feasible": verdict.feasible,
            "failure": result.failure.outcome.value if result.failure else None,
            "failure_message": (result.failure.message[:500] if result.failure else None),
            "phase": result.failure.phase.value if result.failure else None,
            "kv_tokens": verdict.metrics.get("kv_tokens"),
            "output_throughput": verdict.metrics.get("output_throughput"),
            "log": str(result.launch.log_path) if result.launch else None,
        }
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        for key, value in verdict.constraints.items():
            trial.set_user_attr(f"c_{key}", value)
        self._attach_log(trial, result)
        # reliability: pending tell (and constraints), then the row, then the tell (tuner/study/durable.py);
        # a StoreError here stops the run
        if verdict.retryable:
            mark_pending(trial, state=TrialState.FAIL)
        else:
            for key, value in verdict.constraints.items():
                trial.set_constraint(key, value)
            mark_pending(trial, state=TrialState.COMPLETE, values=tuple(verdict.values))
        self.store.record(
            result,
            study=self.name,
            trial_number=trial.number,
            params=params,
            config_hash=chash,
            verdict=verdict,
        )
        if verdict.retryable:
            # interrupted or infrastructure: not the configuration's fault, so FAIL and retry it
            self.study.tell(trial, state=TrialState.FAIL)
            frozen = self.study.get_trials(deepcopy=False)[trial.number]
            self._retry(frozen, reason=result.outcome.value)
            self._announce(trial.number, result.outcome, (), False, None, message, t0, result)
            return result.outcome
        self.study.tell(trial, list(verdict.values))
        self._announce(
            trial.number, verdict.outcome, verdict.values, verdict.feasible, None, message, t0, result
        )
        return verdict.outcome

    def _attach_log(self, trial: optuna.Trial, result: TrialResult) -> None:
        """The server log as an Optuna artifact (optuna-dashboard --artifact-dir <run dir>/artifacts)."""
        if result.launch is None or not result.launch.log_path.exists():
            return
        try:
            from optuna.artifacts import FileSystemArtifactStore, upload_artifact

            store_dir = private_dir(self.run_dir / "artifacts")  # reliability: owner-only copies of logs
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

    def _announce(
        self,
        number: int,
        outcome: Outcome,
        values: tuple[float, ...],
        feasible: bool,
        reused: int | None,
        message: str,
        t0: float,
        result: TrialResult | None = None,
    ) -> None:
        now = time.monotonic()
        overhead = None
        if result is not None:
            t = result.timings
            waited = t.wait_gpus_s + t.launch_s + t.gate_s + t.bench_s + t.teardown_s
            overhead = max(0.0, now - getattr(self, "_ask_started", t0) - waited)
        if self.hooks.on_trial is not None:
            self.hooks.on_trial(
                TrialEvent(
                    number=number,
                    outcome=outcome,
                    values=values,
                    feasible=feasible,
                    reused_from=reused,
                    message=message,
                    duration_s=now - t0,
                    overhead_s=overhead,
                )
            )


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


def _not_launched(config: TrialConfig, engine: Engine, outcome: Outcome, message: str) -> TrialResult:
    from datetime import datetime, timezone

    now = datetime.now(timezone.utc)
    return TrialResult(
        config=config,
        launch=None,
        outcome=outcome,
        failure=Failure(outcome=outcome, phase=Phase.RENDER, message=message),
        sglang_version=engine.sglang_version,
        started_at=now,
        finished_at=now,
    )


def _with_phase_hook(ctx: TrialContext, number: int, hooks: Hooks) -> TrialContext:
    if hooks.on_phase is None:
        return ctx
    on_phase = hooks.on_phase
    from dataclasses import replace

    return replace(ctx, on_phase=lambda phase, detail: on_phase(number, phase, detail))
