"""The overnight study: Optuna ask/tell around run_trial, resumable, shared by workers.

Storage is Optuna's RDB storage in the same database as the tuner's own tables. The loop owns
ask/tell so it can (a) reap trials of dead workers and retry them until measured, (b) reuse the recorded
result of an effective launch already measured, (c) not launch a suggestion a failure rule or
the memory model proves bad (tuner.search: told infeasible, recorded `pruned`, not counted in
the budget), (d) never launch what another worker is running, (e) draw sampler seeds no worker
or resumed run repeats, (f) spend the last launches of the budget re-measuring the finalists,
(g) keep one global launch budget across workers (an exclusive lock around count + ask), and (h)
enqueue an untried configuration when the sampler keeps suggesting measured ones (tuner/study/fill).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import optuna

from tuner.config import Outcome, TrialConfig
from tuner.errors import StoreLostError, TunerError
from tuner.host import host_name
from tuner.interrupts import INTERRUPTS
from tuner.objectives import is_feasible
from tuner.result import TrialResult
from tuner.search.evidence import Evidence
from tuner.search.policy import Decision, Policy
from tuner.session import TrialContext, key_of, prepare_launch, trial_session
from tuner.space.loader import SearchSpace, config_from_params, forbidden_reason, suggest
from tuner.space.sampling import sampler_params
from tuner.store.factory import open_store
from tuner.store.health import StoreWatch
from tuner.store.preflight import check_database
from tuner.store.protocol import StoreOpener
from tuner.study import fill, finalists
from tuner.study.amend import amend_from_store
from tuner.study.backoff import InfraBackoff
from tuner.study.claims import claim_launch
from tuner.study.durable import store_guard
from tuner.study.events import Hooks, RunSummary, trial_event, with_phase_hook
from tuner.study.finalist_jobs import next_finalist_job, unclaim
from tuner.study.learn import PROVEN_ONLY, measured_before, sampler_seed, study_policy
from tuner.study.reap import reap_dead_workers
from tuner.study.repeat import record_repeat
from tuner.study.retry import fail_unrecorded, retry, unrecordable
from tuner.study.stages import Step, Stop
from tuner.study.storage import Heartbeat, ask_lock, make_sampler, open_study, record_heartbeat, worker_lock
from tuner.study.tell import Teller
from tuner.study.warm import WarmStart
from tuner.trial import run_trial

log = logging.getLogger(__name__)

Execute = Callable[..., TrialResult]  # run_trial's signature: (config, ctx, *, label, prepared=None)
WAIT = "wait"  # _next: the budget is taken by trials running elsewhere; one may yet need a retry


@dataclass(kw_only=True, slots=True)
class _Loop:
    """What one run of the loop counts."""

    started: float
    ran: int = 0
    idle: int = 0  # jobs in a row that launched nothing
    waited: bool = False
    exhausted: str | None = None


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
        warm_start: WarmStart | None = None,
        execute: Execute = run_trial,
        stores: StoreOpener = open_store,
    ) -> None:
        self.space = space
        self.db_url = db_url
        self.run_dir = Path(space.log_dir)
        check_database(db_url, create=True)  # refuse a bad database before touching it
        self.lock = worker_lock(db_url, self.run_dir, study_name or space.study_name)
        with ask_lock(self.lock):  # first creation of the tables must not race another worker
            self.store = stores(db_url)
            self.study = open_study(space, db_url, study_name)
        self.watch = StoreWatch(db_url)  # the file vanishing or replaced stops the run
        self.backoff = InfraBackoff.from_budget(space.budget, INTERRUPTS.nap)
        self._last_failure = ""
        self._last_config = ""  # the last trial's configuration key: tells environment errors apart
        self.name = self.study.study_name
        self.budget: int | None = n_trials or space.budget.n_trials
        self.timeout_s = timeout_s if timeout_s is not None else space.budget.timeout_s
        self.hooks = hooks or Hooks()
        self.stop_requested = threading.Event()
        self.progress = progress
        self.host = host_name()
        self.teller = Teller(self.study, self.store, space, self.run_dir)
        self.warm = warm_start
        self.warm_evidence: list[Evidence] = warm_start.evidence(space) if warm_start else []
        self.execute = execute
        self._ask_started = time.monotonic()

    # -- bookkeeping under the lock -------------------------------------------------------------

    def _prepare(self, ctx: TrialContext) -> None:
        with INTERRUPTS.deferred(), ask_lock(self.lock):
            self._reap_dead_workers()
            attrs = self.study.user_attrs
            if not attrs.get("baselines_enqueued"):
                for params in self.space.baselines:
                    self.study.enqueue_trial(
                        sampler_params(self.space, params), user_attrs={"baseline": True}, skip_if_exists=True
                    )
                self.study.set_user_attr("baselines_enqueued", True)
            if self.warm is not None and not attrs.get("warm_started"):
                for params in self.warm.launchable(self.space, ctx.engine):
                    self.study.enqueue_trial(
                        sampler_params(self.space, params),
                        user_attrs={"warm_start": True},
                        skip_if_exists=True,
                    )
                self.study.set_user_attr("warm_started", f"{self.warm.study} in {self.warm.shown}")

    def _reap_dead_workers(self) -> None:
        reap_dead_workers(self.study, self.store, self.name, self.host)

    def _counts(self) -> tuple[int, int]:
        """Launches finished (finalist repeats included) and running, as the budget counts them."""
        trials = self.study.get_trials(deepcopy=False)
        return finalists.launch_counts(trials, self.study.user_attrs.get(finalists.STATE_ATTR) or {})

    # -- the loop -------------------------------------------------------------------------------

    def run(self, hooks: Hooks | None = None) -> RunSummary:
        """Ask, run and tell trials until the budget or the time is spent, or a stop is asked."""
        if hooks is not None:
            self.hooks = hooks
        loop = _Loop(started=time.monotonic())
        with (
            store_guard(self.store, self.watch),
            trial_session(
                self.space, progress=self.progress, study=self.study.study_name, record_reference=True
            ) as ctx,
        ):
            self._prepare(ctx)
            stop = None
            while stop is None:  # the loop's one exit: a Stop, from a safe point or a step
                stop = self._stop(loop) or self._step(loop, ctx)
            done, _ = self._counts()
            self.watch.check()
        return RunSummary(
            study_name=self.name,
            completed=done,
            budget=self.budget,
            interrupted=stop is Stop.INTERRUPTED or INTERRUPTS.requested,
            ran=loop.ran,
            exhausted=loop.exhausted,
        )

    def _stop(self, loop: _Loop) -> Stop | None:
        """At a safe point between jobs (the store checked still there): why to stop, if any."""
        self.watch.check()
        if self.stop_requested.is_set():
            return Stop.ASKED
        if INTERRUPTS.requested:
            return Stop.INTERRUPTED
        if self.timeout_s is not None and time.monotonic() - loop.started > self.timeout_s:
            log.info("time budget of %.0f s spent", self.timeout_s)
            return Stop.TIME
        return None

    def _step(self, loop: _Loop, ctx: TrialContext) -> Stop | None:
        """The next job of the budget, run by its stage (search launch or finalist repeat)."""
        job = self._next()
        if job is None:
            return Stop.BUDGET
        if isinstance(job, str):  # WAIT: leave only once those trials are told (or reaped)
            if not loop.waited:
                log.info("the rest of the budget is running on other workers: waiting for it")
            loop.waited = True
            self.stop_requested.wait(min(self.space.workers.heartbeat_s, 10.0))
            return None
        if isinstance(job, finalists.FinalistJob):
            step = self._run_finalist(job, ctx)
        else:
            step = self._run_one(job, ctx)
        loop.ran += 1
        loop.idle = 0 if step.launched else loop.idle + 1
        self.watch.check()  # never announce a trial the store has lost
        if step.outcome is Outcome.INTERRUPTED:
            return Stop.INTERRUPTED
        self.backoff.after(step.outcome, self._last_failure, self._last_config)  # infra: pause, cap
        left = self._fill_in() if loop.idle and loop.idle % fill.FILL_IN_AFTER == 0 else None
        if left is not None and (left.total is not None or loop.idle >= self.space.search.max_pruned_asks):
            loop.exhausted = fill.exhausted(loop.idle, left)
            log.warning("%s", loop.exhausted)
            return Stop.EXHAUSTED
        return None

    def _next(self) -> optuna.Trial | finalists.FinalistJob | str | None:
        self._ask_started = time.monotonic()
        with INTERRUPTS.deferred(), ask_lock(self.lock):
            self._reap_dead_workers()
            done, running = self._counts()
            if self.budget is not None:
                if done >= self.budget:
                    return None
                if done + running >= self.budget:
                    return WAIT
                job = next_finalist_job(
                    self.study, self.space, budget=self.budget, done=done, running=running
                )
                if job is not None:
                    return job
            asked = len(self.study.get_trials(deepcopy=False))
            self.study.sampler = make_sampler(
                self.space, seed=sampler_seed(self.space.sampler.seed, self.host, asked), budget=self.budget
            )
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                trial = self.study.ask()
            trial.set_user_attr("state", "running")  # first attribute: optuna-dashboard lists it first
            record_heartbeat(self.study, trial)  # stale from now on if this worker dies
            trial.set_user_attr("host", self.host)
            trial.set_user_attr("pid", os.getpid())
            trial.set_user_attr("gpus", list(self.space.gpus))  # `status` shows where it runs
            if self.hooks.on_start is not None:
                self.hooks.on_start(trial.number, done)
            return trial

    def _fill_in(self) -> fill.Left | None:
        """Enqueue an untried configuration no rule covers (the sampler keeps re-suggesting measured
        ones); None when one was enqueued, else what is left of the space.

        Where the rules as inferred leave nothing, the study narrows them to what their failures show
        (rules_proven_only) and goes on with what that opens, rather than stop with launches left."""
        with INTERRUPTS.deferred(), ask_lock(self.lock):
            policy = self._policy()
            left = fill.enqueue_untried(self.study, self.space, lambda c: policy.decide(c).launch, self.host)
            if left is None or policy.proven_only:
                return left
            proven = self._policy(proven_only=True)
            opened = fill.enqueue_untried(
                self.study, self.space, lambda c: proven.decide(c).launch, self.host,
                marks={PROVEN_ONLY: True},
            )  # fmt: skip
            if opened is not None:
                return left
            log.warning(
                "every configuration left is covered by failure rules wider than their failures show "
                "(a broken pair's eager decode and smaller graphs, an unsupported pair blamed on one "
                "backend) or by the memory model's predictions: from now on each rule covers only what "
                "its failure showed, predictions prune nothing, and the search goes on there"
            )
            return None

    def _policy(self, *, proven_only: bool | None = None) -> Policy:
        """The study's policy over its launches and the warm start's (proven_only: as the study says)."""
        trials = self.study.get_trials(deepcopy=False)
        return study_policy(self.space, trials, warm=self.warm_evidence, proven_only=proven_only)

    def _run_one(self, trial: optuna.Trial, ctx: TrialContext) -> Step:
        """The search-launch stage: suggest, screen and (if nothing proves it bad) launch one trial."""
        t0 = time.monotonic()
        label = f"trial-{trial.number:04d}"
        with Heartbeat(self.study, trial):
            enqueued = self.study.get_trials(deepcopy=False)[trial.number].system_attrs.get("fixed_params")
            config, params = suggest(self.space, trial, fixed=enqueued)
            prepared = prepare_launch(config, ctx, label=label)
            chash = key_of(prepared)
            with INTERRUPTS.deferred():
                decision = self._screen(trial, config, params, chash, ctx.engine.sglang_version, t0)
            if decision is None:
                return Step(outcome=Outcome.PRUNED, launched=False)
            # claim the launch key under the workers' lock (sets cfg_hash): waits while a live twin runs it
            claim_launch(
                self.study, trial, chash, lock=self.lock, stop=lambda: INTERRUPTS.requested,
                sleep=INTERRUPTS.nap,
            )  # fmt: skip
            with INTERRUPTS.deferred():
                reused = self._reuse(trial, chash, t0)
                if reused is not None:
                    return Step(outcome=reused, launched=False)
                trial.set_user_attr("pred_kv_tokens", decision.prediction.kv_tokens)
                trial.set_user_attr("pred_min_free_mib", decision.prediction.min_free_mib)
            phase_ctx = with_phase_hook(ctx, trial.number, self.hooks)
            try:
                result = self.execute(config, phase_ctx, label=label, prepared=prepared)
            except Exception as exc:  # never left RUNNING: failed with the reason (machine faults retried)
                machine = isinstance(exc, TunerError)  # GPU memory not released, ...; else a bug
                fail_unrecorded(self.study, trial, f"{type(exc).__name__}: {exc}", again=machine)
                raise
        with INTERRUPTS.deferred():
            return Step(outcome=self._tell_launched(trial, result, params, chash, t0), launched=True)

    def _screen(
        self, trial: optuna.Trial, config: TrialConfig, params: dict[str, Any], chash: str, version: str,
        t0: float,
    ) -> Decision | None:  # fmt: skip
        """The policy's decision to launch; None when the ask is pruned (forbidden, or proven bad by a
        failure rule or the memory model): told infeasible and announced, nothing launched."""
        forbidden = forbidden_reason(self.space, params)
        decision = self._policy().decide(config)
        if forbidden is not None:
            decision = replace(
                decision, launch=False, reason=f"forbidden: {forbidden}", outcome=Outcome.BAD_FLAG
            )
        if decision.launch:
            return decision
        trial.set_user_attr("cfg_hash", chash)
        verdict = self.teller.pruned(
            trial, config, params, chash, decision, version, forbidden=forbidden is not None
        )
        self._announce(trial.number, Outcome.PRUNED, verdict.values, False, None, decision.reason, t0)
        return None

    def _reuse(self, trial: optuna.Trial, chash: str, t0: float) -> Outcome | None:
        """The outcome of the same launch measured before (its result told again), else None."""
        reused = measured_before(self.study.get_trials(deepcopy=False), chash, exclude=trial.number)
        if reused is None:
            return None
        self.teller.reused(trial, reused)
        outcome = Outcome(reused.user_attrs.get("outcome", "ok"))
        message = f"same launch as trial {reused.number}: result reused"
        feasible = is_feasible(reused.constraints)
        values = tuple(reused.values or ())  # a failed launch has none
        self._announce(trial.number, outcome, values, feasible, reused.number, message, t0)
        return outcome

    def _tell_launched(
        self, trial: optuna.Trial, result: TrialResult, params: dict[str, Any], chash: str, t0: float
    ) -> Outcome:
        """Record and tell a launched trial (a retryable outcome is asked again), and announce it."""
        try:
            verdict = self.teller.launched(trial, result, params, chash)
        except StoreLostError:
            raise
        except Exception as exc:
            unrecordable(self.study, trial, exc)
        if verdict.retryable:
            frozen = self.study.get_trials(deepcopy=False)[trial.number]
            retry(self.study, frozen, reason=result.outcome.value)
        message = result.failure.message if result.failure else verdict.message
        message = "; ".join(m for m in (message, *result.warnings) if m)  # noisy trials say so
        self._last_failure = result.failure.message if result.failure else ""
        self._last_config = chash
        values = () if verdict.retryable else verdict.values
        self._announce(trial.number, verdict.outcome, values, verdict.feasible, None, message, t0, result)
        return verdict.outcome

    def _run_finalist(self, job: finalists.FinalistJob, ctx: TrialContext) -> Step:
        """The finalist stage: launch a finalist again and record the repeat beside its original row."""
        t0 = time.monotonic()
        number = job.trial.number
        config = config_from_params(self.space, job.trial.params)
        label = f"finalist-{number:04d}-{job.repeat}"
        result = self.execute(config, with_phase_hook(ctx, number, self.hooks), label=label)
        with INTERRUPTS.deferred():
            original = next(
                (
                    r
                    for r in self.store.trials(self.name)
                    if r.trial_number == number and r.confirm_of is None
                ),
                None,
            )
            verdict, _ = record_repeat(
                self.store,
                self.space,
                result,
                study=self.name,
                params=dict(job.trial.params),
                config_hash=str(job.trial.user_attrs.get("cfg_hash", "")),
                original_id=original.id if original is not None else None,
            )
            if verdict.retryable:
                unclaim(self.study, self.lock, number)
            else:  # the dashboard shows the median of its measurements, as every view does
                amend_from_store(self.study, self.store, number)
            message = f"finalist trial {number}, repeat {job.repeat}: " + (
                result.failure.message if result.failure else verdict.message
            )
            self._announce(
                number, verdict.outcome, verdict.values, verdict.feasible, None, message, t0, result
            )
        return Step(outcome=verdict.outcome, launched=True)

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
        event = trial_event(number, outcome, values, feasible, reused, message, t0, self._ask_started, result)
        if self.hooks.on_trial is not None:
            self.hooks.on_trial(event)
