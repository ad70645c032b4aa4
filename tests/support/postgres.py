"""A throwaway PostgreSQL server for tests and benchmarks: initdb + pg_ctl in a temporary directory.

`PostgresServer.start()` finds the server binaries (PATH, then /usr/lib/postgresql/*/bin),
creates a cluster in a new temporary directory, starts it on a free loopback port with
durability off (fsync, synchronous commit: a test database need not survive a crash) and
`stop()` removes it all. PostgreSQL refuses to run as root, so under root (CI, containers) the
cluster belongs to an unprivileged system user (`tuner-pg`, created if missing, else `nobody`)
and every server command runs as that user through `runuser`.

`missing()` says why a server cannot be started here (None when it can); tests skip with that
reason, unless TUNER_REQUIRE_POSTGRES=1 (set by .ci/run), which turns the skip into a failure.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

REQUIRE_ENV = "TUNER_REQUIRE_POSTGRES"
SERVER_USER = "tuner-pg"
FALLBACK_USER = "nobody"
BINARIES = ("initdb", "pg_ctl")


def find_bin_dir() -> Path | None:
    """The folder holding initdb and pg_ctl: on PATH, else the newest /usr/lib/postgresql/<v>/bin."""
    found = [shutil.which(name) for name in BINARIES]
    if all(found):
        return Path(str(found[0])).resolve().parent
    versions = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda p: [int(x) if x.isdigit() else 0 for x in Path(p).parent.name.split(".")],
    )
    for folder in reversed(versions):
        if all((Path(folder) / name).exists() for name in BINARIES):
            return Path(folder)
    return None


def missing() -> str | None:
    """Why a throwaway server cannot run here, or None."""
    if importlib.util.find_spec("psycopg") is None:
        return "psycopg is not installed (pip install 'sglang-tuner[postgres]')"
    if find_bin_dir() is None:
        return (
            "PostgreSQL server binaries (initdb, pg_ctl) not found on PATH or in /usr/lib/postgresql/*/bin "
            "(apt-get install postgresql)"
        )
    if os.geteuid() == 0 and _server_user() is None:
        return f"running as root, and no user {SERVER_USER} or {FALLBACK_USER} to run PostgreSQL as"
    return None


def _server_user() -> str | None:
    """The unprivileged user that owns the cluster when we are root: tuner-pg (created once), or nobody."""
    for name in (SERVER_USER, FALLBACK_USER):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
        if name == SERVER_USER and shutil.which("useradd"):
            made = subprocess.run(
                ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", SERVER_USER],
                capture_output=True,
                text=True,
            )
            if made.returncode in (0, 9):  # 9: created meanwhile by another test run
                return SERVER_USER
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PostgresServer:
    """One PostgreSQL cluster in a temporary directory; `url()` gives a new empty database on it."""

    def __init__(self) -> None:
        bin_dir = find_bin_dir()
        if bin_dir is None:
            raise RuntimeError(missing() or "no PostgreSQL binaries")
        self.bin_dir = bin_dir
        self.user = _server_user() if os.geteuid() == 0 else None
        self.port = _free_port()
        self.base = Path(tempfile.mkdtemp(prefix="tuner-pg-"))
        self.data = self.base / "data"
        self.log = self.base / "server.log"
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(self.base, entry.pw_uid, entry.pw_gid)

    def _run(self, *argv: str, timeout_s: float = 60.0) -> None:
        cmd = [str(self.bin_dir / argv[0]), *argv[1:]]
        if self.user is not None:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=self.base, env=env)
        if done.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout}{done.stderr}{log}")

    def start(self) -> PostgresServer:
        """initdb, then start the server and wait until it accepts connections."""
        try:
            self._run(
                "initdb",
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
                "--locale=C",
            )
            options = (
                f"-p {self.port} -k {self.base} -c listen_addresses=127.0.0.1 -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off -c max_connections=300"
            )
            self._run(
                "pg_ctl",
                "-D",
                str(self.data),
                "-l",
                str(self.log),
                "-o",
                options,
                "-w",
                "-t",
                "60",
                "start",
                timeout_s=90,
            )
        except BaseException:
            self.stop()
            raise
        return self

    def url(self, database: str | None = None) -> str:
        """A new database on the server (created now), as a SQLAlchemy URL."""
        import psycopg

        name = database or f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self._dsn("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{name}"

    def _dsn(self, database: str) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={database}"

    def stop(self) -> None:
        """Stop the server at once and remove its directory."""
        if (self.data / "postmaster.pid").exists():
            with contextlib.suppress(Exception):
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "-t", "30", "stop")
        shutil.rmtree(self.base, ignore_errors=True)
