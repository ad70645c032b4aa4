"""experiments.db: the tuner's record of every trial, beside Optuna's tables.

`SqlStore` writes one `tuner_trials` row per TrialResult and its request
records to `tuner_requests`, in the same database (SQLite file or any
SQLAlchemy URL) that Optuna's `RDBStorage` uses. SQLite runs in WAL mode with
a 60 s busy timeout on both sides (`make_engine`, `optuna_storage_kwargs`),
so a notebook reading the file never stalls the workers writing it. Table
layout: store_schema.py; row conversion: store_rows.py; redaction and JSON:
store_codec.py.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import socket
import sqlite3
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from tuner.config import TrialResult, Verdict
from tuner.errors import ConfigError, StoreError
from tuner.store.codec import loads, redact_argv, redact_env
from tuner.store.preflight import check_database, foreign_tables
from tuner.store.rows import StoredTrial, request_rows, stored_trial, trial_row
from tuner.store.schema import (
    SCHEMA_VERSION,
    NewerSchemaError,
    ensure_schema,
    read_version,
    requests_table,
    trials_table,
)

__all__ = [
    "BUSY_TIMEOUT_S",
    "SqlStore",
    "StoredTrial",
    "database_url",
    "make_engine",
    "mask_url",
    "optuna_storage_kwargs",
    "redact_argv",
    "redact_env",
]

log = logging.getLogger(__name__)

BUSY_TIMEOUT_S = 60.0
DEFAULT_FILE = "experiments.db"
_URL_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def database_url(db: str | None) -> str:
    """An absolute SQLAlchemy URL: None -> ./experiments.db, a path -> sqlite, a URL as given.

    Relative SQLite paths are made absolute so that workers, the dashboard and a
    notebook started from different directories open the same file.
    """
    if db is None:
        return f"sqlite:///{Path.cwd() / DEFAULT_FILE}"
    if not _URL_SCHEME.match(db):
        return f"sqlite:///{os.path.abspath(os.path.expanduser(db))}"
    url = make_url(db)
    path = url.database or ""
    is_file = path not in ("", ":memory:") and not path.startswith("file:")
    if url.get_backend_name() == "sqlite" and is_file and not os.path.isabs(path):
        return url.set(database=os.path.abspath(path)).render_as_string(hide_password=False)
    return db


def mask_url(url: str) -> str:
    """The URL with its password replaced by ***, for messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # an unparsable URL may still hold user:password@
        return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)


def _sqlite_file(url: sa.URL) -> str | None:
    """The file of a SQLite URL, None for an in-memory database."""
    path = url.database
    if not path or path == ":memory:" or "mode=memory" in path:
        return None
    return path


def _apply_sqlite_pragmas(dbapi_conn: Any, *, foreign_keys: bool) -> None:
    cursor = dbapi_conn.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        cursor.execute("PRAGMA journal_mode = WAL")  # persistent in the file; "memory" in memory
        cursor.execute("PRAGMA synchronous = NORMAL")  # per connection; safe with WAL
        if foreign_keys:
            cursor.execute("PRAGMA foreign_keys = ON")
    finally:
        cursor.close()


def _on_sqlite_connect(dbapi_conn: Any, _record: Any) -> None:
    _apply_sqlite_pragmas(dbapi_conn, foreign_keys=True)


def _sqlite_connect(path: str) -> sqlite3.Connection:
    """A connection for Optuna's engine with the store's pragmas (module level: stays picklable)."""
    con = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, check_same_thread=False)
    _apply_sqlite_pragmas(con, foreign_keys=False)
    return con


def make_engine(url: str) -> sa.Engine:
    """A SQLAlchemy engine: SQLite in WAL mode with a 60 s busy timeout, servers with pre-ping."""
    try:
        parsed = make_url(url)
        if parsed.get_backend_name() == "sqlite":
            if _sqlite_file(parsed) is None:
                # One connection for all threads, or each thread would see its own empty database.
                engine = sa.create_engine(
                    parsed,
                    connect_args={"timeout": BUSY_TIMEOUT_S, "check_same_thread": False},
                    poolclass=sa.pool.StaticPool,
                )
            else:
                engine = sa.create_engine(parsed, connect_args={"timeout": BUSY_TIMEOUT_S})
            sa.event.listen(engine, "connect", _on_sqlite_connect)
            return engine
        # Idle pooled connections get cut between multi-minute trials (Optuna pre-pings only MySQL).
        return sa.create_engine(parsed, pool_pre_ping=True)
    except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError, ImportError, ValueError) as exc:
        raise StoreError(f"experiments database {mask_url(url)}: cannot use this URL: {exc}") from exc


def optuna_storage_kwargs(url: str) -> dict[str, Any]:
    """`engine_kwargs` for Optuna's RDBStorage on the same database: same WAL and busy timeout."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        path = _sqlite_file(parsed)
        return {} if path is None else {"creator": functools.partial(_sqlite_connect, path)}
    return {"pool_pre_ping": True}


def _cause(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
    if "unable to open database file" in text:
        text += " (does the directory exist, and may this user write to it?)"
    elif "database is locked" in text:
        text += f" (another process held the write lock for more than {BUSY_TIMEOUT_S:g} s)"
    return text


class SqlStore:
    """ResultStore on a SQLAlchemy database; opening it creates or checks the tuner's tables."""

    def __init__(
        self, url: str, *, hostname: str | None = None, pid: int | None = None, create: bool = True
    ) -> None:
        """`create=False` (status, reports, exports): the database must exist and be the tuner's."""
        self.url = url
        self._shown = mask_url(url)
        self._create = create
        check_database(url, create=create)
        self._hostname = hostname if hostname is not None else socket.gethostname()
        self._pid = pid if pid is not None else os.getpid()
        self._engine = make_engine(url)
        try:
            self._open()
        except BaseException:
            self._engine.dispose()
            raise

    def _open(self) -> None:
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        pause_s = 0.02
        while True:
            try:
                with self._guard("open"):
                    found = self._ensure_schema(may_retry=time.monotonic() < deadline)
            except NewerSchemaError as exc:
                raise StoreError(
                    f"experiments database {self._shown}: tuner schema version {exc.found} is newer than "
                    f"this tuner's ({SCHEMA_VERSION}); upgrade the tuner to open it"
                ) from None
            if found is not None:
                break
            time.sleep(pause_s)
            pause_s = min(2 * pause_s, 1.0)
        if found < SCHEMA_VERSION:
            log.info("migrated %s from tuner schema %d to %d", self._shown, found, SCHEMA_VERSION)

    def _ensure_schema(self, *, may_retry: bool) -> int | None:
        """The schema version found; None when another worker got in the way and it is worth a retry."""
        try:
            with self._engine.connect() as conn:
                current = read_version(conn)  # the usual case needs no write lock: readers open at once
                if current is not None and current > SCHEMA_VERSION:
                    raise NewerSchemaError(current)
                if current == SCHEMA_VERSION:
                    return current
                if current is None:
                    self._refuse_foreign(conn)
                conn.rollback()
                if conn.dialect.name == "sqlite":
                    # pysqlite runs DDL outside transactions: take the write lock first so
                    # workers starting together create the tables one after the other.
                    conn.exec_driver_sql("BEGIN IMMEDIATE")
                found = ensure_schema(conn)
                conn.commit()
                return found
        except (sa.exc.IntegrityError, sa.exc.OperationalError, sa.exc.ProgrammingError) as exc:
            # Another worker creating the same tables, or SQLite answering "locked" at once without
            # waiting (it does while the last connection of another process cleans up the WAL).
            text = str(exc)
            racing = isinstance(exc, sa.exc.IntegrityError) or "already exists" in text or "locked" in text
            if racing and may_retry:
                return None
            raise

    def _refuse_foreign(self, conn: sa.Connection) -> None:
        """ConfigError for a database without the tuner's tables that another program uses (or, for a
        read-only command, any database without them): nothing is written into it."""
        inspector = sa.inspect(conn)
        names = inspector.get_table_names()
        tables = {name: {c["name"] for c in inspector.get_columns(name)} for name in names}
        found = foreign_tables(tables, strict=conn.dialect.name == "sqlite")
        if found:
            raise ConfigError(
                f"experiments database {self._shown}: holds tables of another program "
                f"({', '.join(found[:6])}); use another database"
            )
        if not self._create:
            raise ConfigError(
                f"experiments database {self._shown}: no tuner tables there (not an experiments database, "
                "or no study was run into it yet)"
            )

    @contextmanager
    def _guard(self, action: str) -> Iterator[None]:
        """Turn database and file-system errors into a StoreError that names the database."""
        try:
            yield
        except (sa.exc.SQLAlchemyError, sqlite3.Error, OSError) as exc:
            raise StoreError(f"experiments database {self._shown}: cannot {action}: {_cause(exc)}") from exc

    def record(
        self,
        result: TrialResult,
        *,
        study: str,
        trial_number: int | None,
        params: Mapping[str, Any],
        config_hash: str,
        verdict: Verdict,
        confirm_of: int | None = None,
        objective_point: int | None = None,
    ) -> int:
        """Write one trial and its request records in one transaction; return the trial's row id.

        `objective_point` picks the load point whose metrics fill the scalar columns
        (default: the result's own `objective_point` if it has one, else the last point).
        """
        row = trial_row(
            result,
            study=study,
            trial_number=trial_number,
            params=params,
            config_hash=config_hash,
            verdict=verdict,
            confirm_of=confirm_of,
            objective_point=objective_point,
            hostname=self._hostname,
            pid=self._pid,
        )
        requests = list(request_rows(result.bench))  # encoded before the write lock is taken
        t = trials_table
        with self._guard(f"record a trial of study {study!r}"), self._engine.begin() as conn:
            # Counted inside the INSERT itself, so concurrent SQLite writers cannot share a number.
            attempt = (
                sa.select(sa.func.count() + 1)
                .where(t.c.study == study, t.c.config_hash == config_hash)
                .scalar_subquery()
            )
            inserted = conn.execute(sa.insert(t).values(**row, attempt=attempt))
            key = inserted.inserted_primary_key
            assert key is not None  # an INSERT of one row always has one
            trial_id = int(key[0])
            if requests:
                for request in requests:
                    request["trial_id"] = trial_id
                conn.execute(sa.insert(requests_table), requests)
        return trial_id

    def trials(self, study: str) -> tuple[StoredTrial, ...]:
        """Every recorded trial of a study, in the order they were recorded."""
        t = trials_table
        return self._select(sa.select(t).where(t.c.study == study).order_by(t.c.id), f"read study {study!r}")

    def _select(self, query: sa.Select[Any], action: str) -> tuple[StoredTrial, ...]:
        with self._guard(action), self._engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
        try:
            return tuple(stored_trial(dict(row)) for row in rows)
        except ValueError as exc:
            raise StoreError(
                f"experiments database {self._shown}: cannot {action}: {exc} (written by a newer tuner?)"
            ) from exc

    def requests(self, trial_id: int) -> pd.DataFrame:
        """One row per request record of a trial: point_index, point_label and every record field."""
        r = requests_table
        query = (
            sa.select(r.c.point_index, r.c.point_label, r.c.record_json)
            .where(r.c.trial_id == trial_id)
            .order_by(r.c.point_index, r.c.seq)
        )
        with self._guard(f"read the requests of trial {trial_id}"), self._engine.connect() as conn:
            rows = conn.execute(query).all()
        if not rows:
            return pd.DataFrame(columns=["point_index", "point_label"])
        return pd.DataFrame(
            [{"point_index": index, "point_label": label, **loads(data)} for index, label, data in rows]
        )

    def studies(self) -> tuple[str, ...]:
        """The names of every study with at least one recorded trial, sorted."""
        t = trials_table
        with self._guard("list studies"), self._engine.connect() as conn:
            names = conn.execute(sa.select(t.c.study).distinct().order_by(t.c.study)).scalars().all()
        return tuple(names)

    def resolve_study(self, name: str | None, *, preferred: str | None = None) -> str:
        """The study a command means: `name` if given (it must exist), else `preferred` (a space's
        study) if the database has it, else the database's only study; ConfigError otherwise."""
        names = self.studies()
        listed = ", ".join(names) or "none"
        if name is not None:
            if name not in names:
                raise ConfigError(f"study {name!r}: not in {mask_url(self.url)} (studies there: {listed})")
            return name
        if preferred is not None and preferred in names:
            return preferred
        if len(names) == 1:
            return names[0]
        raise ConfigError(
            f"--study: expected one of the studies in {mask_url(self.url)} (found {len(names)}: {listed})"
        )

    def close(self) -> None:
        """Release the pooled connections."""
        self._engine.dispose()

    def __enter__(self) -> SqlStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
