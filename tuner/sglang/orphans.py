"""Servers left behind by a run that was killed, found and stopped before the next launch.

A server runs in its own session, so SIGKILL of the `tuner run` process does
not take it down. Each launch is recorded in `<run dir>/live/<pid>.json`
(owner pid, server pid, its command line, port) and removed after teardown.
At start-up, records whose owner is dead are servers of a killed run: if the
recorded process still exists with the recorded command line, its group and
every descendant are killed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from tuner.sglang.process import pid_alive

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class LiveServer:
    """What is needed to recognise and stop a server later."""

    owner_pid: int
    server_pid: int
    argv: tuple[str, ...]
    port: int


class LiveServers:
    """The run directory's record of launched servers."""

    def __init__(self, run_dir: Path) -> None:
        self.dir = run_dir / "live"
        self.dir.mkdir(parents=True, exist_ok=True)

    def add(self, server_pid: int, argv: Sequence[str], port: int) -> None:
        record = {"owner_pid": os.getpid(), "server_pid": server_pid, "argv": list(argv), "port": port}
        tmp = self.dir / f".{server_pid}.tmp"
        tmp.write_text(json.dumps(record))
        os.replace(tmp, self.dir / f"{server_pid}.json")

    def remove(self, server_pid: int) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.dir / f"{server_pid}.json").unlink()

    def records(self) -> list[LiveServer]:
        out = []
        for path in sorted(self.dir.glob("*.json")):
            try:
                data = json.loads(path.read_text())
                out.append(
                    LiveServer(
                        owner_pid=int(data["owner_pid"]),
                        server_pid=int(data["server_pid"]),
                        argv=tuple(data["argv"]),
                        port=int(data["port"]),
                    )
                )
            except (OSError, ValueError, KeyError, TypeError):
                log.warning("ignoring unreadable server record %s", path)
        return out

    def stop_orphans(self) -> list[int]:
        """Kill servers whose owning run is gone; return the pids killed."""
        killed: list[int] = []
        for rec in self.records():
            if pid_alive(rec.owner_pid) and rec.owner_pid != os.getpid():
                continue  # another live worker owns it
            if _matches(rec):
                killed.extend(_kill_tree(rec.server_pid))
                log.warning("stopped server pid %d (port %d) left by a killed run", rec.server_pid, rec.port)
            self.remove(rec.server_pid)
        return killed


def _matches(rec: LiveServer) -> bool:
    try:
        return tuple(psutil.Process(rec.server_pid).cmdline()) == rec.argv
    except psutil.Error:
        return False


def _kill_tree(pid: int) -> list[int]:
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return []
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(procs, timeout=10)
    return [p.pid for p in procs]
