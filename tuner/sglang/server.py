"""ServerProcess: one SGLang server's life — launch, log watch, readiness, failure, stop.

The server is started from a LaunchSpec's argv (never a shell string) in its
own session. Its output goes to the per-trial log file and through the pure
parsers of tuner.sglang.logs as it arrives. Readiness means the process is
alive, the health endpoint of that version answers 200 and the server-info
endpoint reports the KV-cache size. Any other ending is classified at once:
the waiter thread wakes the moment the process exits, and a fatal log line
counts as a crash even before the exit.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, TextIO

import httpx

from tuner.config import Failure, LaunchSpec, Outcome, Phase, ServerFacts, ServerLoad
from tuner.errors import LaunchError
from tuner.host import CpuWatch
from tuner.private import open_private, private_dir
from tuner.sglang import logs
from tuner.sglang.auth import auth_from_argv, httpx_auth
from tuner.sglang.batch_lines import LoadMeter
from tuner.sglang.http import SyncClient
from tuner.sglang.log_events import Ready
from tuner.sglang.log_parse import parse_line
from tuner.sglang.options import version_key
from tuner.sglang.process import ProcessGroup, StopReport, ensure_port_free, wait_port_free
from tuner.sglang.server_info import (  # re-exported: the readers of /server_info live there
    _first_info,
    _graphs,
    _kv_tokens,
    _version_text,
    captured_sizes,
    decode_graphs,
    max_running,
    server_info,
)

__all__ = ["ServerProcess", "captured_sizes", "decode_graphs", "max_running", "server_info"]

log = logging.getLogger(__name__)

TAIL_LINES = 4000


class ServerProcess:
    """A launched SGLang (or stand-in) server and everything known about it."""

    def __init__(
        self,
        spec: LaunchSpec,
        *,
        clock: Callable[[], float] = time.monotonic,
        scrub: Callable[[str], str] | None = None,
        cpu_watch: Callable[[Callable[[], Sequence[int]]], CpuWatch] = CpuWatch,
    ) -> None:
        self.spec = spec
        self._clock = clock
        self._cpu = cpu_watch(self.our_pids)  # how much the host keeps the server's processes from a CPU
        self._scrub = scrub  # applied to every line before it is kept or written (secrets the server echoes)
        self._lock = threading.Lock()
        self._tail: deque[str] = deque(maxlen=TAIL_LINES)
        self._count = 0
        self._state = logs.LogState()
        self.fatal_at: float | None = None  # when the first fatal line arrived
        self.first_line_at: float | None = None
        self.ready_line_at: float | None = None
        self._last_line_at: float | None = None
        self._log_file: TextIO | None = None
        self._group: ProcessGroup | None = None
        self._started_at: float | None = None
        self.died = threading.Event()  # set when the process exits or prints a fatal line
        self.stop_report: StopReport | None = None
        self._meter: LoadMeter | None = None  # the scheduler's load since meter_load()

    # -- launch ---------------------------------------------------------------------------------

    def start(self, *, extra_env: Sequence[tuple[str, str]] = ()) -> None:
        """Launch the server. Raises PortInUseError / LaunchError (infrastructure, not the config).

        `extra_env` is added to the server's environment (not to its launch key): the live record's marker.
        """
        spec = self.spec
        ensure_port_free(spec.host, spec.port)
        try:
            private_dir(spec.log_path.parent)
            self._log_file = open_private(spec.log_path)
        except OSError as exc:
            raise LaunchError(f"cannot write the server log {spec.log_path}: {exc.strerror or exc}") from exc
        env = dict(os.environ)
        env.update(dict(spec.env))
        env.update(dict(extra_env))
        if spec.gpus:
            env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # the NVML index order the probe uses
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in spec.gpus)
        env.setdefault("PYTHONUNBUFFERED", "1")
        self._started_at = self._clock()
        self._last_line_at = self._started_at
        try:
            self._group = ProcessGroup(spec.argv, env=env, on_line=self._on_line)
        except LaunchError:
            self._close_log()
            raise
        threading.Thread(target=self._watch_exit, daemon=True, name=f"exit-{self._group.pid}").start()
        log.info("launched pid %d on %s: %s", self._group.pid, spec.base_url, spec.log_path)

    def _watch_exit(self) -> None:
        assert self._group is not None
        self._group.exited.wait()
        self.died.set()

    def _on_line(self, line: str) -> None:
        now = self._clock()
        if self._scrub is not None:
            line = self._scrub(line)
        event = parse_line(line)
        with self._lock:
            self._tail.append(line)
            self._count += 1
            self._last_line_at = now
            if self.first_line_at is None:
                self.first_line_at = now
            if event is not None:
                self._state = self._state.apply(event)
                if self.ready_line_at is None and isinstance(event, Ready):
                    self.ready_line_at = now
            if self.fatal_at is None and logs.is_fatal(line):
                self.fatal_at = now
            if self._meter is not None:
                self._meter.add(line)
        if self._log_file is not None:
            try:
                self._log_file.write(line + "\n")
            except ValueError:  # closed during teardown
                pass
            except OSError as exc:  # disk full: keep reading (the server must not block on its pipe)
                log.error("cannot write the server log %s: %s", self.spec.log_path, exc)
                self._close_log()
        if self.fatal_at == now:
            self.died.set()

    # -- what we know ---------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self._group.pid if self._group else None

    def lines(self) -> list[str]:
        with self._lock:
            return list(self._tail)

    def meter_load(self) -> None:
        """Start measuring the scheduler's load from the next line on (tuner.sglang.batch_lines)."""
        with self._lock:
            self._meter = LoadMeter()

    def metered_load(self) -> ServerLoad | None:
        """The scheduler's load since meter_load(): every line counted, however many the tail keeps."""
        with self._lock:
            return self._meter.load() if self._meter is not None else None

    def cursor(self) -> int:
        """A position in the log; `lines_since` returns what came after it."""
        with self._lock:
            return self._count

    def lines_since(self, cursor: int) -> list[str]:
        with self._lock:
            new = self._count - cursor
            if new <= 0:
                return []
            return list(self._tail)[-min(new, len(self._tail)) :]

    @property
    def state(self) -> logs.LogState:
        with self._lock:
            return self._state

    def alive(self) -> bool:
        return self._group is not None and self._group.alive()

    def exit_code(self) -> int | None:
        return self._group.exit_code if self._group else None

    @property
    def exit_time(self) -> float | None:
        """time.monotonic() when the waiter saw the process exit."""
        return self._group.exit_time if self._group else None

    def our_pids(self) -> tuple[int, ...]:
        if self._group is None:
            return ()
        self._group.remember_descendants() if self._group.alive() else None
        return tuple(self._group.known_pids())

    # -- readiness ------------------------------------------------------------------------------

    def wait_ready(
        self, on_stage: Callable[[str], None] | None = None, check: Callable[[], None] | None = None
    ) -> ServerFacts | Failure:
        """Block until ready (ServerFacts) or until the launch failed (Failure), whichever first.

        `on_stage` hears the startup stage the log shows (load, kv, capture, warmup) as it changes;
        `check` is called on every poll (a safe point: it may raise to stop waiting).
        """
        if self._group is None or self._started_at is None:
            raise LaunchError("wait_ready() before start()")
        stage = "start"
        t = self.spec.timeouts
        health_path = "/ready" if version_key(self.spec.sglang_version) >= (0, 5, 20, 0) else "/health"
        auth = httpx_auth(auth_from_argv(self.spec.argv))  # readiness and /server_info carry the launch's key
        with SyncClient(self.spec.base_url, timeout_s=10.0, connect_s=2.0, auth=auth) as client:
            while True:
                if check is not None:
                    check()
                failure = self._launch_failure()
                if failure is not None:
                    return failure
                now = self._clock()
                self._cpu.sample(now)
                if now - self._started_at > t.startup_s:
                    return self._watchdog_failure(Outcome.TIMEOUT, f"not ready after {t.startup_s:.0f} s")
                idle = now - (self._last_line_at or now)
                if idle > t.idle_log_s and not self.state.http_up:
                    return self._watchdog_failure(
                        Outcome.HANG, f"no log output for {idle:.0f} s before the server was ready"
                    )
                if on_stage is not None and self.state.stage != stage:
                    stage = self.state.stage
                    on_stage(stage)
                if self._probe(client, health_path):
                    facts = self._facts(client)
                    if facts is not None:
                        return facts
                self.died.wait(t.ready_poll_s)

    def _probe(self, client: SyncClient, path: str) -> bool:
        try:
            return client.get(path).status_code == 200
        except httpx.HTTPError:
            return False

    def _facts(self, client: SyncClient) -> ServerFacts | None:
        info = self._server_info(client)
        state = self.state
        kv = _kv_tokens(info) if info else None
        if kv is None and state.max_total_num_tokens is None:
            return None
        if kv and state.max_total_num_tokens and abs(kv - state.max_total_num_tokens) > 0.01 * kv:
            log.warning("KV tokens differ: server info says %d, log says %d", kv, state.max_total_num_tokens)
        assert self._started_at is not None
        graphs, graph_sizes = _graphs(info, state)
        return ServerFacts(
            base_url=self.spec.base_url,
            startup_s=self._clock() - self._started_at,
            kv_tokens=kv if kv is not None else state.max_total_num_tokens,
            kv_tokens_log=state.max_total_num_tokens or state.kv_tokens_log,
            captured_bs=graph_sizes,
            cuda_graph=graphs,
            available_gpu_mem_gb=state.available_gpu_mem_gb,
            sparse_backends=state.backends,
            weights_gb=state.weights_gb,
            server_version=_version_text((info or {}).get("version")),
            max_running_requests=max_running(info or {}),
        )

    def _server_info(self, client: SyncClient) -> dict[str, Any] | None:
        paths = ["/server_info", "/get_server_info"]
        if version_key(self.spec.sglang_version) < (0, 5, 6, 0):
            paths.reverse()
        return _first_info(client, paths)

    def _launch_failure(self) -> Failure | None:
        """A Failure if the process exited or printed a fatal line; None while still healthy."""
        assert self._group is not None
        if not self.died.is_set():
            return None
        if self._group.alive() and self.fatal_at is not None:
            # A fatal line: the server is going down. Give it a moment to print its cause.
            self._group.exited.wait(0.5)
        if not self._group.alive():
            self._group.drain_output(0.5)
        return self.classify(Phase.LAUNCH)

    def classify(self, phase: Phase) -> Failure:
        """The failure the log and exit status show, for the given phase.

        A dead server's last lines (its traceback: the evidence) can still be in the pipe when its
        exit is seen; they are read to the end first, or the blame would go to a kill from outside.
        """
        group = self._group
        if group is not None and not group.alive():
            group.drain_output(3.0)  # returns at the pipe's end, at once when it came already
        verdict = logs.classify_failure(self.lines(), exit_code=self.exit_code(), phase=phase)
        return Failure(
            outcome=verdict.outcome,
            phase=phase,
            message=verdict.message,
            excerpt=verdict.excerpt,
            exit_code=self.exit_code(),
            backend=verdict.backend,
            backend_role=verdict.role,
            stage=verdict.stage,
        )

    def _watchdog_failure(self, outcome: Outcome, message: str) -> Failure:
        """The watchdog's failure; an infrastructure error instead when the host starved the server of
        CPU time (tuner.host.CpuPressure.starved: a busy machine slows every stage of a launch, no
        configuration is to blame)."""
        tail = "\n".join(self.lines()[-30:])
        pressure = self._cpu.pressure(self._clock())
        if pressure is not None and pressure.starved():
            outcome = Outcome.INFRA_ERROR
            message = (
                f"{message} on a host that starved the server ({pressure.describe()}): "
                "not the configuration's fault"
            )
        return Failure(outcome=outcome, phase=Phase.LAUNCH, message=message, excerpt=tail, exit_code=None)

    # -- stop -----------------------------------------------------------------------------------

    def stop(self) -> StopReport | None:
        """End the server and every process it started; wait until its port is free again."""
        if self._group is None:
            return None
        t = self.spec.timeouts
        report = self._group.stop(sigint_grace_s=t.sigint_grace_s, sigterm_grace_s=t.sigterm_grace_s)
        if not wait_port_free(self.spec.host, self.spec.port, timeout_s=10.0):
            log.warning("port %d still busy 10 s after the server stopped", self.spec.port)
        self._close_log()
        self.stop_report = report
        return report

    def _close_log(self) -> None:
        log_file, self._log_file = self._log_file, None
        if log_file is not None:
            try:
                log_file.close()
            except OSError as exc:  # the last buffered lines could not be flushed (disk full)
                log.error("cannot write the server log %s: %s", self.spec.log_path, exc.strerror or exc)
