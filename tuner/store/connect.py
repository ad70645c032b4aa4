"""Database URLs and engines: SQLite in WAL mode with a 60 s busy timeout on both the tuner's and
Optuna's side (so a notebook reading the file never stalls the workers writing it), servers with
keepalives and a check of connections that sat idle."""

from __future__ import annotations

import functools
import os
import re
import sqlite3
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from tuner.errors import StoreError
from tuner.secrets import REDACTED, is_secret_name, redact_url

BUSY_TIMEOUT_S = 60.0
IDLE_CHECK_S = 30.0  # a pooled server connection idle longer than this is checked before use
DEFAULT_FILE = "experiments.db"
POSTGRES_DRIVER = "postgresql+psycopg"
_URL_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def database_url(db: str | None) -> str:
    """An absolute SQLAlchemy URL: None -> ./experiments.db, a path -> sqlite, a URL as given.

    Relative SQLite paths are made absolute so that workers, the dashboard and a
    notebook started from different directories open the same file; `postgresql://`
    names the driver of the `postgres` extra (psycopg 3), not SQLAlchemy's default psycopg2.
    """
    if db is None:
        return f"sqlite:///{Path.cwd() / DEFAULT_FILE}"
    if not _URL_SCHEME.match(db):
        return f"sqlite:///{os.path.abspath(os.path.expanduser(db))}"
    url = make_url(db)
    if url.drivername == "postgresql":
        return url.set(drivername=POSTGRES_DRIVER).render_as_string(hide_password=False)
    path = url.database or ""
    is_file = path not in ("", ":memory:") and not path.startswith("file:")
    if url.get_backend_name() == "sqlite" and is_file and not os.path.isabs(path):
        return url.set(database=os.path.abspath(path)).render_as_string(hide_password=False)
    return db


def mask_url(url: str) -> str:
    """The URL as it may be printed: parsed with SQLAlchemy's URL, its password and every
    secret-named query argument (`?password=`, `sslpassword=`) replaced by ***.

    The user-info is cut at the last `@` before the query first, so a password holding an
    unescaped `@`, `/` or space (which SQLAlchemy's parser would take for part of the host)
    never reaches the text; what remains then goes through the shape rules of tuner.secrets."""
    text = _without_password(url)
    try:
        parsed = make_url(text)
        query = {k: REDACTED if is_secret_name(k) else v for k, v in parsed.query.items()}
        shown = parsed.set(query=query).render_as_string(hide_password=True)
        shown = shown.replace(quote(REDACTED, safe=""), REDACTED)
    except Exception:  # an unparsable URL may still hold user:password@
        shown = text
    return redact_url(shown)


def _without_password(url: str) -> str:
    """`scheme://user:password@rest` -> `scheme://user:***@rest`, the user-info ending at the last `@`
    before any `?` (a password may hold `@`, `/`, `:` or spaces when the user did not escape it)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    head, qmark, query = rest.partition("?")
    userinfo, at, host = head.rpartition("@")
    if not at:
        return url
    user, colon, _password = userinfo.partition(":")
    masked = f"{user}:{REDACTED}" if colon else user
    return f"{scheme}://{masked}@{host}{qmark}{query}"


def _sqlite_file(url: sa.URL) -> str | None:
    """The file of a SQLite URL, None for an in-memory database."""
    path = url.database
    if not path or path == ":memory:" or "mode=memory" in path:
        return None
    return path


def _apply_sqlite_pragmas(
    dbapi_conn: Any, *, foreign_keys: bool, busy_timeout_s: float = BUSY_TIMEOUT_S
) -> None:
    cursor = dbapi_conn.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        cursor.execute("PRAGMA journal_mode = WAL")  # persistent in the file; "memory" in memory
        cursor.execute("PRAGMA synchronous = NORMAL")  # per connection; safe with WAL
        if foreign_keys:
            cursor.execute("PRAGMA foreign_keys = ON")
    finally:
        cursor.close()


def _on_sqlite_connect(dbapi_conn: Any, _record: Any, *, busy_timeout_s: float) -> None:
    _apply_sqlite_pragmas(dbapi_conn, foreign_keys=True, busy_timeout_s=busy_timeout_s)


def _sqlite_connect(path: str) -> sqlite3.Connection:
    """A connection for Optuna's engine with the store's pragmas (module level: stays picklable)."""
    con = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, check_same_thread=False)
    _apply_sqlite_pragmas(con, foreign_keys=False)
    return con


def make_engine(url: str, *, busy_timeout_s: float = BUSY_TIMEOUT_S) -> sa.Engine:
    """A SQLAlchemy engine: SQLite in WAL mode with a busy timeout (60 s unless given), servers with
    a check of idle connections."""
    try:
        parsed = make_url(url)
        if parsed.get_backend_name() == "sqlite":
            if _sqlite_file(parsed) is None:
                # One connection for all threads, or each thread would see its own empty database.
                engine = sa.create_engine(
                    parsed,
                    connect_args={"timeout": busy_timeout_s, "check_same_thread": False},
                    poolclass=sa.pool.StaticPool,
                )
            else:
                engine = sa.create_engine(parsed, connect_args={"timeout": busy_timeout_s})
            sa.event.listen(
                engine, "connect", functools.partial(_on_sqlite_connect, busy_timeout_s=busy_timeout_s)
            )
            return engine
        engine = sa.create_engine(parsed, **_server_kwargs(parsed))
        ping_idle_connections(engine)
        return engine
    except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError, ImportError, ValueError) as exc:
        hint = ""
        if isinstance(exc, ImportError) and "psycopg" in str(exc):
            hint = " (pip install 'sglang-tuner[postgres]')"
        raise StoreError(f"experiments database {mask_url(url)}: cannot use this URL: {exc}{hint}") from exc


def optuna_storage_kwargs(url: str) -> dict[str, Any]:
    """`engine_kwargs` for Optuna's RDBStorage on the same database: same WAL and busy timeout."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        path = _sqlite_file(parsed)
        return {} if path is None else {"creator": functools.partial(_sqlite_connect, path)}
    return _server_kwargs(parsed)  # the caller adds ping_idle_connections to the storage's engine


def _server_kwargs(url: sa.URL) -> dict[str, Any]:
    if url.get_backend_name() != "postgresql":
        return {}
    # The client notices a server (or a path to it) gone within about a minute.
    keepalives = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10, "keepalives_count": 3}
    return {"connect_args": keepalives}


def ping_idle_connections(engine: sa.Engine) -> None:
    """Check a pooled server connection before use when it sat idle long enough to have been cut.

    Idle connections get cut between multi-minute trials (by the server, a firewall, a restart);
    SQLAlchemy's `pool_pre_ping` would check every checkout instead, one more round trip on each
    of the ~40 storage calls of a trial. A failed check discards the connection and takes another.
    """

    @sa.event.listens_for(engine, "checkin")
    def _checkin(_dbapi_conn: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    @sa.event.listens_for(engine, "checkout")
    def _checkout(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get("idle_since")
        if since is None or time.monotonic() - since < IDLE_CHECK_S:
            return
        try:
            cursor = dbapi_conn.cursor()
            try:
                cursor.execute("SELECT 1")
            finally:
                cursor.close()
            dbapi_conn.rollback()
        except Exception as exc:  # any driver's "connection is gone"
            raise sa.exc.DisconnectionError(f"idle connection lost: {exc}") from exc
