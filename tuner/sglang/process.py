"""A child process in its own session, and how to end it and everything it spawned.

Generic process handling (no SGLang knowledge): start with an argument list
in a new session, remember every descendant seen, stop with
SIGINT -> SIGTERM -> SIGKILL on the whole group with grace periods, then
sweep descendants that left the group (setsid grandchildren), and check
loopback ports.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import psutil

from tuner.errors import LaunchError
from tuner.host import (
    HOSTNAME_ENV,
    ensure_port_free,
    free_port,
    host_name,
    pid_alive,
    port_is_free,
    wait_port_free,
)

log = logging.getLogger(__name__)

# Ports, pids and the host's name live in tuner.host; kept importable from here for callers.
__all__ = [
    "HOSTNAME_ENV",
    "ProcessGroup",
    "StopReport",
    "ensure_port_free",
    "free_port",
    "host_name",
    "pid_alive",
    "port_is_free",
    "wait_port_free",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class StopReport:
    """How a process group was ended."""

    signals_sent: tuple[str, ...]
    swept_pids: tuple[int, ...]
    exit_code: int | None
    duration_s: float


class ProcessGroup:
    """One launched command, its session, and all descendants ever seen."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        on_line: Callable[[str], None],
        cwd: str | None = None,
    ) -> None:
        try:
            self._proc = subprocess.Popen(
                list(argv),
                env=dict(env),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                bufsize=0,
            )
        except OSError as exc:
            raise LaunchError(f"cannot start {argv[0]!r}: {exc}") from exc
        self.pid = self._proc.pid
        self.pgid = self.pid
        self.exited = threading.Event()
        self.exit_code: int | None = None
        self.exit_time: float | None = None
        self._known: set[int] = {self.pid}
        self._known_lock = threading.Lock()
        self._reader = threading.Thread(
            target=self._read, args=(on_line,), daemon=True, name=f"log-{self.pid}"
        )
        self._waiter = threading.Thread(target=self._wait, daemon=True, name=f"wait-{self.pid}")
        self._reader.start()
        self._waiter.start()

    def _read(self, on_line: Callable[[str], None]) -> None:
        assert self._proc.stdout is not None
        buf = b""
        stream = self._proc.stdout
        while True:
            try:
                chunk = stream.read(65536)
            except (OSError, ValueError):
                break
            if not chunk:
                break
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for raw in lines:
                on_line(raw.decode("utf-8", "replace").rstrip("\r"))
        if buf:
            on_line(buf.decode("utf-8", "replace"))

    def _wait(self) -> None:
        code = self._proc.wait()
        self.exit_code = code
        self.exit_time = time.monotonic()
        self.exited.set()

    def alive(self) -> bool:
        return not self.exited.is_set()

    def drain_output(self, timeout_s: float = 1.0) -> None:
        """Give the log reader a moment to deliver the last lines after an exit."""
        self._reader.join(timeout_s)

    def remember_descendants(self) -> set[int]:
        """Record every current descendant (so ones that later leave the group can be swept)."""
        found: set[int] = set()
        with contextlib.suppress(psutil.Error):
            found = {child.pid for child in psutil.Process(self.pid).children(recursive=True)}
        with self._known_lock:
            self._known |= found
        return found

    def known_pids(self) -> frozenset[int]:
        with self._known_lock:
            return frozenset(self._known)

    def live_pids(self) -> tuple[int, ...]:
        """Known processes of this launch that still exist (zombies excluded)."""
        alive = []
        for pid in sorted(self.known_pids()):
            with contextlib.suppress(psutil.Error):
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
        return tuple(alive)

    def stop(self, *, sigint_grace_s: float, sigterm_grace_s: float, kill_wait_s: float = 10.0) -> StopReport:
        """End the group: SIGINT, then SIGTERM, then SIGKILL, then sweep strays."""
        started = time.monotonic()
        if self.alive():
            self.remember_descendants()
        sent: list[str] = []
        for sig, grace in ((signal.SIGINT, sigint_grace_s), (signal.SIGTERM, sigterm_grace_s)):
            if not self._group_alive():
                break
            self._signal_group(sig)
            sent.append(sig.name)
            self._wait_group_gone(grace)
        if self._group_alive():
            self._signal_group(signal.SIGKILL)
            sent.append("SIGKILL")
            self._wait_group_gone(kill_wait_s)
        swept = self._sweep()
        self.exited.wait(kill_wait_s)
        self.drain_output(1.0)
        return StopReport(
            signals_sent=tuple(sent),
            swept_pids=swept,
            exit_code=self.exit_code,
            duration_s=time.monotonic() - started,
        )

    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, sig)

    def _group_alive(self) -> bool:
        if self.alive():
            return True
        for pid in self.live_pids():
            with contextlib.suppress(OSError):
                if os.getpgid(pid) == self.pgid:
                    return True
        return False

    def _wait_group_gone(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self._group_alive():
                return
            self.exited.wait(0.02)

    def _sweep(self) -> tuple[int, ...]:
        """SIGKILL known descendants that survived the group kill (they left the session)."""
        strays = tuple(pid for pid in self.live_pids() if pid != self.pid)
        for pid in strays:
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).kill()
        if strays:
            log.warning(
                "killed %d process(es) that had left the server's process group: %s", len(strays), strays
            )
            psutil.wait_procs([_proc_or_none(p) for p in strays if _proc_or_none(p)], timeout=5)
        return strays


def _proc_or_none(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None
