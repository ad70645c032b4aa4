"""`python -m tuner.sim`: parse, start the scheduler child, serve HTTP, stop like SGLang."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import multiprocessing
import os
import random
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, cast

from aiohttp import web

from tuner.errors import TunerError
from tuner.gpu.statefile import STATE_ENV
from tuner.sglang.options import builtin_table
from tuner.sim import args as simargs
from tuner.sim import logfmt, memory, statefiles
from tuner.sim.child import ChildJob, run_child
from tuner.sim.engine import Engine, Request
from tuner.sim.faults import BenchFaults
from tuner.sim.logsetup import configure_logging
from tuner.sim.resolve import GRAPH_FREE_BACKENDS, Launch, at_least, graph_free_backend, resolve_launch
from tuner.sim.routes import make_app
from tuner.sim.scenario import PLATFORMS, Scenario, load_scenario
from tuner.sim.state import ServerState
from tuner.sim.text import answer

log = logging.getLogger(__name__)
REAL_GPU_LIMIT = 64  # GPU-backed: CUDA_VISIBLE_DEVICES may name any real device below this index


def _kill_tree_and_self(child: BaseProcess | None) -> None:
    """SGLang's kill_process_tree(include_parent=True): SIGKILL the children, then ourselves."""
    if child is not None and child.pid and child.is_alive():
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGKILL)
    logging.shutdown()
    os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    version = simargs.DEFAULT_VERSION
    try:
        sim, rest = simargs.split_sim_flags(argv)
    except simargs.SimFlagError as exc:
        simargs.sim_flag_error(version, str(exc))
        return 2
    if sim.gpu_backed and importlib.util.find_spec("torch") is None:
        sys.stderr.write(
            "tuner.sim: error: --sim-gpu-backed needs torch (pip install 'sglang-tuner[gpu-sim]')\n"
        )
        return 2
    try:
        table = builtin_table(sim.sglang_version)
        scenario = load_scenario(sim.scenario)
        if sim.noise_pct is not None:
            scenario = replace(scenario, perf=replace(scenario.perf, noise_pct=sim.noise_pct))
        if sim.platform is not None:
            if sim.platform not in PLATFORMS:
                sys.stderr.write(f"tuner.sim: error: --sim-platform: one of {', '.join(PLATFORMS)}\n")
                return 2
            scenario = replace(scenario, platform=sim.platform)
    except TunerError as exc:
        sys.stderr.write(f"tuner.sim: error: {exc}\n")
        return 2
    if sim.publish_gpus:  # the tuner checks GPU indices against the scenario before any launch
        directory = statefiles.state_dir()
        if directory is None:
            sys.stderr.write(f"tuner.sim: error: --sim-publish-gpus needs {STATE_ENV}\n")
            return 2
        statefiles.publish_gpus(directory, scenario)
        return 0
    for warning in simargs.deprecation_warnings(table, rest):
        sys.stderr.write(warning + "\n")
    given = simargs.parse_sglang_argv(table, rest)  # exits 2 like SGLang
    try:
        # GPU-backed: the real card's devices, not the scenario's count, bound CUDA_VISIBLE_DEVICES
        gpu_count = REAL_GPU_LIMIT if sim.gpu_backed else None
        launch = resolve_launch(
            scenario, sim.sglang_version, given, os.environ.get("CUDA_VISIBLE_DEVICES"), gpu_count=gpu_count
        )
    except (ValueError, TypeError) as exc:
        sys.stderr.write(f"tuner.sim: error: {exc}\n")
        return 2
    configure_logging(launch)
    plan = memory.plan_memory(
        scenario,
        tp_size=launch.tp_size,
        fraction=launch.mem_fraction_static,
        kv_dtype=launch.kv_cache_dtype,
        captured_bs=launch.captured_bs,
    )
    seed = sim.seed if sim.seed is not None else random.SystemRandom().randrange(2**31)
    return _run(scenario, launch, plan, sim, seed, argv)


def _run(
    scenario: Scenario,
    launch: Launch,
    plan: memory.MemoryPlan,
    sim: simargs.SimOptions,
    seed: int,
    argv: list[str],
) -> int:
    # GPU-backed: NVML sees the real memory; no state files for the GPUs really used
    state_dir = None if sim.gpu_backed else statefiles.state_dir()
    if state_dir:
        statefiles.publish_gpus(state_dir, scenario)
    if at_least(launch.version, "0.5.10") and launch.enable_nan_detection:
        log.warning(
            "--enable-nan-detection is deprecated. "
            "Use SGLANG_SPEC_NAN_DETECTION=1 and SGLANG_SPEC_OOB_DETECTION=1 instead."
        )
    backend = graph_free_backend(launch.args)
    if backend is not None:
        what = GRAPH_FREE_BACKENDS[backend]
        log.warning(f"Cuda graph is disabled because of using {what} attention backend")
    log.info(logfmt.server_args_line(launch.args))
    if scenario.model.sparse_attention:
        log.info(logfmt.backends_line(launch))

    child: BaseProcess | None = None

    def on_sigquit_launch(signum: int, frame: object) -> None:
        log.error(logfmt.SIGQUIT_LAUNCH)
        _kill_tree_and_self(child)

    signal.signal(signal.SIGQUIT, on_sigquit_launch)
    if sim.inject.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    job = ChildJob(
        scenario=scenario,
        launch=launch,
        plan=plan,
        inject=sim.inject,
        state_dir=state_dir,
        parent_pid=os.getpid(),
        gpu_backed=sim.gpu_backed,
    )
    ctx = multiprocessing.get_context("fork")
    parent_conn, child_conn = ctx.Pipe()
    child = ctx.Process(target=run_child, args=(job, child_conn), name="scheduler_0", daemon=False)
    try:
        child.start()
        child_conn.close()
        facts = _wait_ready(launch, child, parent_conn)
        return asyncio.run(_serve(scenario, launch, plan, sim, seed, argv, child, parent_conn, facts))
    except KeyboardInterrupt:
        if child.pid and child.is_alive():
            os.kill(child.pid, signal.SIGKILL)
        return 1


def _wait_ready(launch: Launch, child: BaseProcess, conn: Connection) -> dict[str, Any]:
    while True:
        if conn.poll(0.05):
            try:
                kind, facts = conn.recv()
            except EOFError:
                kind, facts = "eof", {}
            if kind == "ready":
                return cast(dict[str, Any], facts)
        if not child.is_alive():
            child.join(0.1)
            code = child.exitcode if child.exitcode is not None else -9
            log.error(logfmt.rank_dead(launch.version, code))
            _kill_tree_and_self(child)


async def _serve(
    scenario: Scenario,
    launch: Launch,
    plan: memory.MemoryPlan,
    sim: simargs.SimOptions,
    seed: int,
    argv: list[str],
    child: BaseProcess,
    conn: Connection,
    facts: dict[str, Any],
) -> int:
    """Serve until SIGINT (stop now) or SIGTERM (drain, then stop); the exit code."""
    stop = asyncio.Event()

    def send(message: tuple[Any, ...]) -> None:
        with contextlib.suppress(BrokenPipeError, OSError):
            conn.send(message)

    engine = Engine(
        scenario=scenario,
        launch=launch,
        plan=plan,
        seed=seed,
        on_crash=lambda text: send(("crash", text)),
        on_peak=lambda mib: send(("peak", mib)),
        crash_after_requests=sim.inject.crash_after_requests,
        real_memory=sim.gpu_backed,
    )
    avail_mib = facts.get("avail_mib", plan.free_mib)
    logging.getLogger("tuner.sim.engine").info(
        logfmt.kv_summary(launch, plan.kv_tokens, engine.max_running, scenario.model.context_len, avail_mib)
    )
    state = _state(scenario, launch, plan, engine, sim, argv)
    _handle_signals(state, stop, child, ignore_sigterm=sim.inject.ignore_sigterm)
    engine_task = asyncio.create_task(engine.run())
    runner = await _listen(state, child)
    watch = asyncio.create_task(_watch_child(state, child))
    if sim.inject.crash_after_ready_s is not None:
        _crash_later(engine, send, sim.inject.crash_after_ready_s)
    if not launch.skip_server_warmup:
        if sim.inject.warmup_status is not None:  # SGLang logs it and kills its own tree
            log.error(logfmt.warmup_failed(launch.version, sim.inject.warmup_status))
            _kill_tree_and_self(child)
        await _warmup(engine)
    if state.status == "Starting":
        state.status = "Up"
        log.info(logfmt.READY)
    await stop.wait()
    await _shut_down(state, launch, child, send)
    watch.cancel()
    engine.kill()
    await asyncio.gather(engine_task, return_exceptions=True)
    await runner.cleanup()
    return 0


def _state(
    scenario: Scenario, launch: Launch, plan: memory.MemoryPlan, engine: Engine, sim: simargs.SimOptions,
    argv: list[str],
) -> ServerState:  # fmt: skip
    """What the HTTP handlers serve from: the engine, the launch's argv and the injected faults."""
    return ServerState(
        scenario=scenario,
        launch=launch,
        plan=plan,
        engine=engine,
        argv=("python", "-m", "tuner.sim", *argv),
        drift_at=sim.inject.drift_at,
        kv_canary_violation=sim.inject.kv_canary_violation,
        faults=BenchFaults(
            http_error_rate=sim.inject.http_error_rate,
            bad_usage=sim.inject.bad_usage,
            freeze_at=sim.inject.freeze_at,
        ),
    )


async def _shut_down(
    state: ServerState, launch: Launch, child: BaseProcess, send: Callable[[tuple[Any, ...]], None]
) -> None:
    """After SIGTERM the scheduler drains and exits (0.5.9: then SIGKILL of the launcher itself);
    after SIGINT the children are killed at once, as each release prints it."""
    if state.status == "Draining":
        send(("exit",))
        await _join(child, 15.0)
        if not at_least(launch.version, "0.5.20"):
            _kill_tree_and_self(None)  # 0.5.9's shutdown ends with SIGKILL of the launcher itself
    elif child.pid and child.is_alive():  # SIGINT: stop now; the children are killed, not asked
        if at_least(launch.version, "0.5.17"):
            for line in logfmt.sigint_shutdown(os.getpid(), child.pid):  # what 0.5.17 prints on an H200
                log.info(line)
        os.kill(child.pid, signal.SIGKILL)


def _handle_signals(
    state: ServerState, stop: asyncio.Event, child: BaseProcess, *, ignore_sigterm: bool
) -> None:
    """SIGQUIT kills the tree; SIGTERM drains; SIGINT stops now (unless told to ignore both)."""
    loop = asyncio.get_running_loop()

    def on_sigquit() -> None:
        log.error(logfmt.sigquit_running())
        _kill_tree_and_self(child)

    loop.add_signal_handler(signal.SIGQUIT, on_sigquit)
    if ignore_sigterm:
        return
    loop.add_signal_handler(signal.SIGTERM, lambda: _start_drain(state, stop))

    def on_sigint() -> None:
        state.status = "Stopping"
        stop.set()

    loop.add_signal_handler(signal.SIGINT, on_sigint)


async def _listen(state: ServerState, child: BaseProcess) -> web.AppRunner:
    """Bind the HTTP port (a taken port ends the tree, as uvicorn's exit does)."""
    launch = state.launch
    runner = web.AppRunner(make_app(state), access_log=None, handle_signals=False)
    await runner.setup()
    try:
        await web.TCPSite(runner, launch.host, launch.port, reuse_address=True).start()
    except OSError as exc:
        log.error(
            f"[Errno {exc.errno}] error while attempting to bind on address "
            f"({launch.host!r}, {launch.port}): {exc.strerror}"
        )
        _kill_tree_and_self(child)
    log.info(logfmt.uvicorn_running(launch.host, launch.port), extra={"bare": True})
    return runner


def _crash_later(engine: Engine, send: Callable[[tuple[Any, ...]], None], after_s: float) -> None:
    def crash() -> None:
        if not engine.dead:
            error = (
                "RuntimeError: CUDA error: an illegal memory access was encountered\n"
                "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."
            )
            send(("crash", logfmt.scheduler_exception("forward", error)))

    asyncio.get_running_loop().call_later(after_s, crash)


async def _warmup(engine: Engine) -> None:
    """The server's own warmup request, before it reports ready."""
    req = Request(
        prompt_tokens=4,
        answer=answer(
            "The capital city of France is", max_tokens=8, ignore_eos=False, temperature=0, request_seed=0
        ),
    )
    engine.submit(req)
    while (item := await req.queue.get()) is not None and isinstance(item, tuple):
        pass


def _start_drain(state: ServerState, stop: asyncio.Event) -> None:
    if state.status == "Draining":
        return
    log.info(logfmt.sigterm_received())
    state.status = "Draining"

    async def drain() -> None:
        last_log = 0.0
        while state.engine.in_flight or state.active_http:
            if time.monotonic() - last_log >= 5.0:
                last_log = time.monotonic()
                log.info(logfmt.gracefully_exiting(state.engine.in_flight))
            await asyncio.sleep(0.05)
        stop.set()

    asyncio.get_running_loop().create_task(drain())


async def _join(child: BaseProcess, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while child.is_alive() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    if child.is_alive() and child.pid:
        log.info("Schedulers still alive after the shutdown request; killing them")
        os.kill(child.pid, signal.SIGKILL)


async def _watch_child(state: ServerState, child: BaseProcess) -> None:
    """SGLang's SubprocessWatchdog (0.5.10+): a child that exits on its own takes the tree down."""
    while True:
        await asyncio.sleep(0.1)
        if child.is_alive() or state.status in ("Draining", "Stopping"):
            continue
        child.join(0.1)
        state.engine.kill()
        if at_least(state.launch.version, "0.5.10"):
            code = child.exitcode if child.exitcode is not None else -9
            log.error(logfmt.subprocess_crashed("scheduler_0", child.pid or 0, code))
            os.kill(os.getpid(), signal.SIGQUIT)
        return
