"""Run one trial: TrialConfig -> TrialResult. The only place where the stages meet.

render + validate flags -> GPUs free? -> launch -> ready? -> gate -> benchmark
(GPU memory sampled throughout) -> stop -> memory released -> TrialResult.

A failing configuration is a result, never an exception. Exceptions that
leave here are infrastructure faults the caller must see (the GPUs never came
back, the log directory cannot be written).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timezone
from typing import Literal, TypeVar, cast

from tuner.bench.runner import short_window
from tuner.bench.types import BenchResult
from tuner.config import (
    Failure,
    GpuInfo,
    LaunchSpec,
    Outcome,
    Phase,
    ServerFacts,
    ServerLoad,
    StageTimings,
    TrialConfig,
)
from tuner.errors import FlagError, GpuBusyError, LaunchError, ReleaseTimeoutError
from tuner.gate.checks import GateResult, GateVerdict
from tuner.gpu.sampler import MemorySampler, check_gpus_free, wait_for_release
from tuner.interrupts import INTERRUPTS
from tuner.result import TrialResult
from tuner.secrets import redact_argv, scrub, secret_values
from tuner.session import (
    TrialContext,
    effective_config,
    effective_note,
    on_a_free_port,
    prepare_launch,
    render_launch,
)
from tuner.sglang import logs
from tuner.sglang.auth import ServerAuth, auth_from_argv
from tuner.sglang.flags import min_gpus
from tuner.sglang.orphans import LiveServer
from tuner.sglang.server import ServerProcess
from tuner.stage_verdicts import bench_failure, gate_failure, starved_note

log = logging.getLogger(__name__)

T = TypeVar("T")
BusyPolicy = Literal["wait", "fail", "ignore"]
# How long a stage whose requests failed waits for the server's exit to be seen before the failure is
# judged the configuration's (a server killed from outside is the machine's fault, not its own)
DEATH_NOTICE_S = 2.0
REQUESTS_FAILED = frozenset({Outcome.BENCH_FAILED, Outcome.BENCH_ERRORS, Outcome.HANG})  # a death can cause


def run_trial(
    config: TrialConfig, ctx: TrialContext, *, label: str, prepared: LaunchSpec | Failure | None = None
) -> TrialResult:
    """Launch, gate, benchmark and stop one configuration; always returns a TrialResult.

    `prepared` is the launch from `prepare_launch` when the caller already rendered it.
    """
    return _TrialRun(config, ctx, label, prepared).run()


class _TrialRun:
    def __init__(
        self, config: TrialConfig, ctx: TrialContext, label: str, prepared: LaunchSpec | Failure | None
    ) -> None:
        self.config = config
        self.ctx = ctx
        self.label = label
        self.prepared = prepared
        self.started_at = datetime.now(timezone.utc)
        self.t0 = time.perf_counter()
        self.waits: dict[str, float] = {}
        self.spec: LaunchSpec | None = None
        self.server: ServerProcess | None = None
        self.live: LiveServer | None = None  # the live record: written before the server exists
        self.facts: ServerFacts | None = None
        self.gate_result: GateResult | None = None
        self.bench_result: BenchResult | None = None
        self.load: ServerLoad | None = None  # the scheduler's batch under the benchmark
        self.sampler: MemorySampler | None = None
        self.gpus: tuple[GpuInfo, ...] = ()
        self.baseline: tuple[int, ...] | None = None  # used MiB per GPU before the launch
        self.current = Phase.RENDER
        self.warnings: list[str] = []
        self.effective: TrialConfig | None = None  # what SGLang ran, when it differs from the request
        self.effective_key: str | None = None
        self.last_lines: list[str] = []

    def _phase(self, phase: Phase, detail: str = "") -> None:
        if phase is not Phase.TEARDOWN:
            INTERRUPTS.check()  # a safe point: a stop asked meanwhile ends the trial here
        self.current = phase
        if self.ctx.on_phase is not None:
            self.ctx.on_phase(phase, detail)

    def _timed(self, name: str, fn: Callable[[], T]) -> T:
        start = time.perf_counter()
        try:
            return fn()
        finally:
            self.waits[name] = self.waits.get(name, 0.0) + time.perf_counter() - start

    def run(self) -> TrialResult:
        try:
            failure = self._launch_and_measure()
        except KeyboardInterrupt as exc:
            signame = f" ({exc})" if str(exc) else ""
            failure = Failure(
                outcome=Outcome.INTERRUPTED, phase=self.current, message=f"interrupted by the user{signame}"
            )
            self._teardown(quiet=True)
            return self._result(failure)
        except (GpuBusyError, LaunchError) as exc:
            failure = Failure(outcome=Outcome.INFRA_ERROR, phase=self.current, message=str(exc))
        except OSError as exc:  # the machine's fault (a full disk under runs/), not the configuration's
            where = exc.filename or f"under {self.ctx.space.log_dir}"
            message = f"cannot write {where}: {exc.strerror or exc} (the machine's fault; retried)"
            failure = Failure(outcome=Outcome.INFRA_ERROR, phase=self.current, message=message)
        release_error = self._teardown()
        result = self._result(failure)
        if release_error is not None:
            raise release_error
        return result

    def _launch_and_measure(self) -> Failure | None:
        ctx = self.ctx
        self._phase(Phase.RENDER)
        prepared = self.prepared or prepare_launch(self.config, ctx, label=self.label)
        if isinstance(prepared, Failure):
            return prepared
        self.spec = prepared
        failure = self._wait_gpus() or self._launch()
        if failure is not None:
            return failure
        indices = self._gpu_indices()
        self.gpus = tuple(d for d in ctx.probe.devices() if not indices or d.index in indices)
        self.sampler = MemorySampler(ctx.probe, indices)
        self.sampler.start()
        return self._gate() or self._bench()

    def _wait_gpus(self) -> Failure | None:
        """The launch's GPUs free (orphans of this host stopped first); a failure when it has too few."""
        ctx, space, spec = self.ctx, self.ctx.space, self.spec
        assert spec is not None
        self._phase(Phase.WAIT_GPUS)
        if ctx.live is not None:  # a worker that died beside this one on this host left its server
            ctx.live.stop_orphans(running=True)
        indices = self._gpu_indices()
        needed = min_gpus(spec.argv[len(ctx.engine.launcher) :], ctx.engine.table)
        if indices and needed > len(indices):
            return Failure(
                outcome=Outcome.BAD_FLAG,
                phase=Phase.RENDER,
                message=(
                    f"the launch needs at least {needed} GPUs (tensor x pipeline parallel) but has "
                    f"{len(indices)}: {', '.join(map(str, indices))}"
                ),
            )
        self._timed(
            "wait_gpus",
            lambda: check_gpus_free(
                ctx.probe,
                indices,
                policy=cast(BusyPolicy, space.gpu_busy_policy),
                timeout_s=space.timeouts.release_s,
                sleep=INTERRUPTS.wait,
            ),
        )
        self.baseline = self._used(indices)
        return None

    def _launch(self) -> Failure | None:
        """Start the server (recorded live first) and wait until it is ready; its failure, if any."""
        ctx = self.ctx
        assert self.spec is not None
        spec = self.spec = on_a_free_port(self.spec, self.config, ctx)
        self._phase(Phase.LAUNCH, spec.base_url)
        secrets = secret_values(spec.argv, spec.env)
        server = self.server = ServerProcess(spec, scrub=lambda line: scrub(line, secrets))
        marker: tuple[tuple[str, str], ...] = ()
        if ctx.live is not None:
            # intent first: a kill between here and the pid below still leaves a record to find it by
            self.live = ctx.live.reserve(spec.argv, spec.port, shown=redact_argv(spec.argv))
            marker = self.live.env
        server.start(extra_env=marker)
        if ctx.live is not None and self.live is not None and server.pid is not None:
            self.live = ctx.live.started(self.live, server.pid)

        def on_stage(stage: str) -> None:  # load, kv, capture, warmup, ready: shown as launch details
            self._phase(Phase.LAUNCH, f"{stage} {spec.base_url}")

        ready = self._timed("launch", lambda: server.wait_ready(on_stage=on_stage, check=INTERRUPTS.check))
        if isinstance(ready, Failure):
            return ready
        assert isinstance(ready, ServerFacts)
        self.facts = ready
        self._effective(ready)
        return None

    def _effective(self, facts: ServerFacts) -> None:
        """Note what SGLang reports it ran when that is not what was asked (a warning, and its key)."""
        effective = effective_config(self.config, facts)
        note = effective_note(self.config, effective)
        if note is None or self.spec is None:
            return
        log.warning("%s: %s", self.label, note)
        self.warnings.append(note)
        self.effective = effective
        try:
            spec = self.spec
            ctx = self.ctx
            ran = render_launch(effective, ctx.space, ctx.engine, port=spec.port, log_path=spec.log_path)
            self.effective_key = ran.key
        except FlagError as exc:  # what ran has no flags of its own in this release: keyed as asked
            log.info("%s: the effective launch has no rendering (%s)", self.label, exc)

    def _auth(self) -> dict[str, ServerAuth | None]:
        """`auth=` for the stages when the launch has an API key (kept in memory, never stored)."""
        auth = auth_from_argv(self.spec.argv) if self.spec is not None else None
        return {"auth": auth} if auth else {}

    def _gate(self) -> Failure | None:
        server, space = self.server, self.ctx.space
        facts = self.facts
        assert server is not None and facts is not None
        self._phase(Phase.GATE, f"{len(space.gate.prompts)} prompts")
        cursor = server.cursor()
        result = self._timed(
            "gate",
            lambda: self.ctx.gate(
                facts.base_url,
                space.gate,
                captured_bs=facts.captured_bs,
                max_running=facts.max_running_requests,
                nan_log_lines=lambda: logs.nan_lines(server.lines_since(cursor)),
                log_lines=lambda: server.lines_since(cursor),
                server_died=server.died,
                stop=lambda: INTERRUPTS.requested,
                **self._auth(),
            ),
        )
        self.gate_result = result
        INTERRUPTS.check()  # a gate cut short by a stop request says nothing about the configuration
        if self._server_died(requests_failed=result.verdict is GateVerdict.ERROR):
            return self._died(Phase.GATE)
        if result.passed:
            return None
        return gate_failure(result)

    def _bench(self) -> Failure | None:
        server, space = self.server, self.ctx.space
        facts = self.facts
        assert server is not None and facts is not None
        if not space.bench.enabled:
            return None
        points = ", ".join(p.label for p in space.bench.load_points)
        self._phase(Phase.BENCH, points)
        server.meter_load()
        result = self._timed(
            "bench",
            lambda: self.ctx.bench(
                facts.base_url,
                space.bench,
                server_died=server.died,
                progress=self.ctx.progress,
                stop=lambda: INTERRUPTS.requested,
                **self._auth(),
            ),
        )
        self.bench_result = result
        self.load = server.metered_load()
        INTERRUPTS.check()
        if result.crashed or server.died.is_set():
            return self._died(Phase.BENCH)
        failure = bench_failure(result, space.bench)
        if failure is not None:
            failed = failure.outcome in REQUESTS_FAILED
            return self._died(Phase.BENCH) if self._server_died(requests_failed=failed) else failure
        short = short_window(result)
        if short is not None:
            log.warning("%s: %s", self.label, short)
            self.warnings.append(short)
        starved = starved_note(result)
        if starved is not None:
            self.warnings.append(starved)
        return None

    def _server_died(self, *, requests_failed: bool) -> bool:
        """Whether the server died during the stage; after failed requests, waiting up to DEATH_NOTICE_S
        for the exit (requests cut off by a death can come back before the waiter sees it)."""
        assert self.server is not None
        if requests_failed:
            self.server.died.wait(DEATH_NOTICE_S)
        return self.server.died.is_set()

    def _died(self, phase: Phase) -> Failure:
        assert self.server is not None
        if self.server.alive():
            # a fatal line came first: give the process a moment to finish dying and print its cause
            with contextlib.suppress(Exception):
                self.server.died.wait(1.0)
        failure = self.server.classify(phase)
        if failure.outcome is Outcome.CRASHED and phase is Phase.BENCH:
            failure = replace(failure, outcome=Outcome.CRASHED_DURING_BENCH, phase=phase)
        return failure

    def _gpu_indices(self) -> tuple[int, ...]:
        if self.ctx.space.gpus:
            return self.ctx.space.gpus
        return tuple(d.index for d in self.ctx.probe.devices())

    def _used(self, indices: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(m.used_mib for m in self.ctx.probe.memory(indices))

    def _teardown(self, quiet: bool = False) -> ReleaseTimeoutError | None:
        if self.sampler is not None:
            self.sampler.stop()
        if self.server is None:
            return None
        self._phase(Phase.TEARDOWN)
        server = self.server
        self.last_lines = server.lines()[-40:]  # before the stop: what follows is SGLang's shutdown
        pids = server.our_pids()
        self._timed("teardown", server.stop)
        if self.ctx.live is not None:
            if self.live is not None:
                self.ctx.live.remove(self.live)  # only once the server is gone
            # a worker that died beside this one meanwhile: its server's memory is not ours to wait for
            self.ctx.live.stop_orphans(running=True)
        indices = self._gpu_indices()
        try:
            self._timed(
                "release",
                lambda: wait_for_release(
                    self.ctx.probe,
                    indices,
                    baseline_used_mib=self.baseline,
                    our_pids=pids,
                    timeout_s=self.ctx.space.timeouts.release_s,
                ),
            )
        except ReleaseTimeoutError as exc:
            if quiet:
                log.error("%s", exc)
                return None
            return exc
        return None

    def _result(self, failure: Failure | None) -> TrialResult:
        server = self.server
        outcome = failure.outcome if failure else Outcome.OK
        elapsed = time.perf_counter() - self.t0
        waited = sum(self.waits.values())
        timings = StageTimings(
            wait_gpus_s=self.waits.get("wait_gpus", 0.0),
            launch_s=self.waits.get("launch", 0.0),
            gate_s=self.waits.get("gate", 0.0),
            bench_s=self.waits.get("bench", 0.0),
            teardown_s=self.waits.get("teardown", 0.0) + self.waits.get("release", 0.0),
            release_s=self.waits.get("release", 0.0),
            overhead_s=max(0.0, elapsed - waited),
        )
        excerpt = failure.excerpt if failure and failure.excerpt else ""
        if not excerpt and failure is not None and server is not None:
            # only a failure's, and the lines before the stop: a passing trial's last lines (and what
            # follows any stop) are SGLang's shutdown noise, not evidence
            excerpt = "\n".join(self.last_lines or server.lines()[-40:])
        return TrialResult(
            config=self.config,
            launch=self.spec,
            outcome=outcome,
            failure=failure,
            sglang_version=self.ctx.engine.sglang_version,
            gpus=self.gpus,
            server=self.facts,
            gate=self.gate_result,
            bench=self.bench_result,
            load=self.load if outcome is Outcome.OK else None,
            min_free_mib=self.sampler.min_free_mib if self.sampler else None,
            log_excerpt=excerpt,
            started_at=self.started_at,
            finished_at=datetime.now(timezone.utc),
            timings=timings,
            warnings=tuple(self.warnings),
            effective=self.effective,
            effective_key=self.effective_key,
        )
