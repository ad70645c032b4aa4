"""Running `python -m tuner.sim` as a real subprocess in tests (import the fixture from here)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tuner.sglang.orphans import pid_alive  # a zombie counts as dead
from tuner.sglang.process import free_port

REPO = Path(__file__).resolve().parents[2]


def poll(condition: Callable[[], object], timeout_s: float, what: str, interval_s: float = 0.02) -> object:
    """Call `condition` until it returns something truthy; fail after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)


PORT_RETRIES = 3  # fresh ports tried when another process takes the chosen one before the bind


class Sim:
    """One simulator process: its own session, a log file, a port and a state dir."""

    def __init__(self, args: list[str], tmp: Path, env: dict[str, str] | None = None) -> None:
        self._args, self._tmp, self._env = args, tmp, env
        self._restarts = 0
        self._start()

    def _start(self) -> None:
        self.port = free_port()
        self.state_dir = self._tmp / f"state-{self.port}"
        self.log_path = self._tmp / f"sim-{self.port}.log"
        full_env = dict(os.environ)
        full_env.update({"TUNER_SIM_STATE_DIR": str(self.state_dir), "PYTHONUNBUFFERED": "1"})
        full_env.update(self._env or {})
        self.argv = [sys.executable, "-m", "tuner.sim", "--port", str(self.port), *self._args]
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - open for the process's life; kill() closes it
        self.proc = subprocess.Popen(
            self.argv,
            cwd=REPO,
            env=full_env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.url = f"http://127.0.0.1:{self.port}"

    def _lost_its_port(self) -> bool:
        """The simulator exited because another process took its port between the pick and the bind
        (the port is chosen free, then bound only once the server is ready, as SGLang does)."""
        return self.proc.poll() is not None and "error while attempting to bind on address" in self.log()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout_s: float = 20.0) -> None:
        def ok() -> bool:
            if self._lost_its_port() and self._restarts < PORT_RETRIES:
                self._restarts += 1
                self.kill()
                self._start()
                return False
            if self.proc.poll() is not None:
                raise AssertionError(f"sim exited {self.proc.returncode} before ready:\n{self.log()[-3000:]}")
            try:
                return httpx.get(self.url + "/health", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        poll(ok, timeout_s, "sim /health 200", 0.05)

    def wait_exit(self, timeout_s: float = 15.0) -> int:
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"sim still running after {timeout_s}s:\n{self.log()[-3000:]}") from exc

    def wait_log(self, needle: str, timeout_s: float = 15.0) -> str:
        poll(lambda: needle in self.log(), timeout_s, f"log line {needle!r}", 0.05)
        return self.log()

    def procs(self) -> dict[int, dict]:
        d = self.state_dir / "procs"
        if not d.is_dir():
            return {}
        return {int(p.stem): json.loads(p.read_text()) for p in d.glob("*.json")}

    def child_pids(self) -> list[int]:
        return [pid for pid in self.procs() if pid != self.proc.pid]

    def kill(self) -> None:
        for pid in self.procs():  # strays that left the session
            if pid_alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self._log.close()


@pytest.fixture
def sim_factory(tmp_path: Path) -> Iterator[Callable[..., Sim]]:
    """Start simulators; every one is killed (group and strays) at teardown."""
    started: list[Sim] = []

    def start(*args: str, env: dict[str, str] | None = None) -> Sim:
        sim = Sim(list(args), tmp_path, env)
        started.append(sim)
        return sim

    yield start
    for sim in started:
        sim.kill()
