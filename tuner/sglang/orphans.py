"""Servers left behind by a run that was killed, found and stopped before the next launch.

A server runs in its own session, so SIGKILL of the `tuner run` process does
not take it down. Every launch is recorded in `<run dir>/live/<id>.json`
*before* the process exists (intent: owner, command line, port, and a marker
put into the server's environment), the pid is filled in once it started, and
the record is removed after teardown. A SIGKILL at any instant therefore
leaves either nothing or a record. At start-up, records whose owner is dead are
servers of a killed run: the recorded process (if its command line still
matches) and every process carrying the record's marker in its environment
(the server and all its descendants, also those that left its group, and a
server whose pid never made it into the record) are killed. A running worker
does the same before each launch, so the servers of a worker that died beside
it on this host are gone before it launches on their GPUs.

Records hold the command line with secrets redacted (the caller passes that
copy) and a hash of the real one for matching.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
import os
import secrets
import signal
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import psutil

from tuner.private import private_dir, write_private
from tuner.sglang.process import pid_alive

log = logging.getLogger(__name__)

MARKER_ENV = "TUNER_LIVE_ID"  # in every launched server's environment: finds it and its descendants
_COUNTER = itertools.count()


@dataclass(frozen=True, kw_only=True, slots=True)
class LiveServer:
    """What is needed to recognise and stop a server later."""

    id: str
    owner_pid: int
    owner_started: float | None  # the owner's start time, so a recycled pid is not taken for it
    server_pid: int | None  # None: the launch was intended, its pid not (yet) recorded
    argv: tuple[str, ...]  # secrets redacted
    argv_sha256: str
    port: int

    @property
    def env(self) -> tuple[tuple[str, str], ...]:
        """The marker to put into the server's environment."""
        return ((MARKER_ENV, self.id),)


class LiveServers:
    """The run directory's record of launched servers."""

    def __init__(self, run_dir: Path) -> None:
        private_dir(run_dir)
        self.dir = private_dir(run_dir / "live")

    def reserve(self, argv: Sequence[str], port: int, *, shown: Sequence[str] | None = None) -> LiveServer:
        """Record the intent to launch `argv` (before starting it); `shown` is argv with secrets redacted."""
        record = LiveServer(
            id=f"{os.getpid()}-{next(_COUNTER)}-{secrets.token_hex(4)}",
            owner_pid=os.getpid(),
            owner_started=_started(os.getpid()),
            server_pid=None,
            argv=tuple(shown if shown is not None else argv),
            argv_sha256=argv_hash(argv),
            port=port,
        )
        self._write(record)
        return record

    def started(self, record: LiveServer, server_pid: int) -> LiveServer:
        """Fill in the pid of the server that `record` announced."""
        filled = replace(record, server_pid=server_pid)
        self._write(filled)
        return filled

    def _write(self, record: LiveServer) -> None:
        data = {
            "id": record.id,
            "owner_pid": record.owner_pid,
            "owner_started": record.owner_started,
            "server_pid": record.server_pid,
            "argv": list(record.argv),
            "argv_sha256": record.argv_sha256,
            "port": record.port,
        }
        write_private(self.dir / f"{record.id}.json", json.dumps(data))

    def remove(self, record: LiveServer) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.dir / f"{record.id}.json").unlink()

    def records(self) -> list[LiveServer]:
        out = []
        for path in sorted(self.dir.glob("*.json")):
            try:
                data = json.loads(path.read_text())
                pid = data.get("server_pid")
                out.append(
                    LiveServer(
                        id=str(data.get("id") or path.stem),
                        owner_pid=int(data["owner_pid"]),
                        owner_started=data.get("owner_started"),
                        server_pid=None if pid is None else int(pid),
                        argv=tuple(data["argv"]),
                        argv_sha256=str(data.get("argv_sha256", "")),
                        port=int(data["port"]),
                    )
                )
            except (OSError, ValueError, KeyError, TypeError):
                log.warning("ignoring unreadable server record %s", path)
        return out

    def stop_orphans(self, *, running: bool = False) -> list[int]:
        """Kill servers whose owning run is gone; return the pids killed.

        At start-up a record in this process's own name is from an earlier life (a recycled pid);
        `running=True` (before each launch, to stop the servers of a worker that died meanwhile on
        this host) keeps this process's own records.
        """
        killed: list[int] = []
        orphans = [
            rec
            for rec in self.records()
            if not (running and rec.owner_pid == os.getpid()) and not _owner_alive(rec)
        ]
        if not orphans:
            return killed
        marked = _marked_processes({rec.id for rec in orphans})
        for rec in orphans:
            roots = [p for p in marked.get(rec.id, []) if p.pid != os.getpid()]
            if rec.server_pid is not None and _matches(rec):
                with contextlib.suppress(psutil.Error):
                    roots.append(psutil.Process(rec.server_pid))
            pids = _kill_all(roots)
            if pids:
                killed.extend(pids)
                log.warning("stopped server of a killed run (port %d): pids %s", rec.port, sorted(pids))
            self.remove(rec)
        return killed


def argv_hash(argv: Sequence[str]) -> str:
    """The hash that recognises a command line without storing its secrets."""
    return hashlib.sha256(json.dumps(list(argv)).encode()).hexdigest()


def _started(pid: int) -> float | None:
    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return None


def _owner_alive(rec: LiveServer) -> bool:
    if rec.owner_pid == os.getpid():
        return False  # this process has just started: a record in its name is from an earlier life
    if not pid_alive(rec.owner_pid):
        return False
    started = _started(rec.owner_pid)
    return rec.owner_started is None or started is None or abs(started - rec.owner_started) < 1.0


def _matches(rec: LiveServer) -> bool:
    try:
        cmdline = psutil.Process(rec.server_pid).cmdline() if rec.server_pid else []
    except psutil.Error:
        return False
    return bool(cmdline) and argv_hash(cmdline) == rec.argv_sha256


def _marked_processes(ids: set[str]) -> dict[str, list[psutil.Process]]:
    """Processes whose environment carries one of the markers, by marker."""
    found: dict[str, list[psutil.Process]] = {}
    for proc in psutil.process_iter():
        try:
            value = proc.environ().get(MARKER_ENV)
        except (psutil.Error, OSError):
            continue
        if value in ids:
            found.setdefault(value, []).append(proc)
    return found


def _kill_all(roots: list[psutil.Process]) -> list[int]:
    procs: dict[int, psutil.Process] = {}
    for root in roots:
        with contextlib.suppress(psutil.Error):
            procs[root.pid] = root
            for child in root.children(recursive=True):
                procs[child.pid] = child
    for pid in procs:
        with contextlib.suppress(OSError):
            if os.getpgid(pid) == pid:
                os.killpg(pid, signal.SIGKILL)
    for proc in procs.values():
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(list(procs.values()), timeout=10)
    return sorted(procs)
