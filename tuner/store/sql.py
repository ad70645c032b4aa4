"""experiments.db: the tuner's record of every trial, beside Optuna's tables.

`SqlStore` writes one `tuner_trials` row per TrialResult and its request
records to `tuner_requests`, in the same database (SQLite file or any
SQLAlchemy URL) that Optuna's `RDBStorage` uses; URLs and engines: connect.py,
tables: schema.py, row conversion: rows.py, redaction and JSON: codec.py.
"""

from __future__ import annotations

import logging
import os
import random
import sqlite3
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pandas as pd
import sqlalchemy as sa

from tuner.config import Verdict
from tuner.errors import ConfigError, StoreError
from tuner.host import host_name
from tuner.result import TrialResult
from tuner.store import capacity as capacity_rows
from tuner.store import capacity_points as point_rows
from tuner.store.capacity import CapacityRecord
from tuner.store.capacity_points import SearchKey, StoredPoint
from tuner.store.codec import loads
from tuner.store.connect import BUSY_TIMEOUT_S, make_engine, mask_url
from tuner.store.preflight import check_database, foreign_tables
from tuner.store.protocol import choose_study
from tuner.store.rows import StoredTrial, request_rows, stored_trial, trial_row
from tuner.store.schema import (
    ATTEMPT_UNIQUE,
    SCHEMA_VERSION,
    NewerSchemaError,
    ensure_schema,
    read_version,
    requests_table,
    trials_table,
    up_to_date,
)

__all__ = ["SqlStore", "StoredTrial"]

log = logging.getLogger(__name__)

RECORD_TRIES = 50  # writers of one configuration racing for its next attempt number


def _cause(exc: BaseException, busy_timeout_s: float) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
    if "unable to open database file" in text:
        text += " (does the directory exist, and may this user write to it?)"
    elif "database is locked" in text:
        text += f" (another process held the write lock for more than {busy_timeout_s:g} s)"
    return text


class SqlStore:
    """ResultStore on a SQLAlchemy database; opening it creates or checks the tuner's tables."""

    def __init__(
        self,
        url: str,
        *,
        hostname: str | None = None,
        pid: int | None = None,
        create: bool = True,
        busy_timeout_s: float = BUSY_TIMEOUT_S,
    ) -> None:
        """`create=False` (status, reports, exports): the database must exist and be the tuner's.
        `busy_timeout_s`: how long a write waits for another process's write lock (SQLite)."""
        self.url = url
        self._busy_timeout_s = busy_timeout_s
        self._shown = mask_url(url)
        self._create = create
        check_database(url, create=create)
        self._hostname = hostname if hostname is not None else host_name()
        self._pid = pid if pid is not None else os.getpid()
        self._engine = make_engine(url, busy_timeout_s=busy_timeout_s)
        self.attempt_retries = 0  # INSERTs refused because another writer took the attempt number
        try:
            self._open()
        except BaseException:
            self._engine.dispose()
            raise

    def _open(self) -> None:
        deadline = time.monotonic() + self._busy_timeout_s
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
                if current == SCHEMA_VERSION and up_to_date(conn):
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
            cause = _cause(exc, self._busy_timeout_s)
            raise StoreError(f"experiments database {self._shown}: cannot {action}: {cause}") from exc

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
        with self._guard(f"record a trial of study {study!r}"):
            tries = 0
            while True:
                tries += 1
                try:
                    return self._insert(row, requests)
                except sa.exc.IntegrityError as exc:
                    # Under READ COMMITTED two writers of one configuration count the same rows and
                    # claim the same attempt; the unique index refuses the second, which counts again.
                    if (
                        tries >= RECORD_TRIES
                        or ATTEMPT_UNIQUE not in str(exc.orig)
                        and ("tuner_trials.attempt" not in str(exc.orig))
                    ):
                        raise
                    self.attempt_retries += 1
                    log.debug("attempt of %s taken by another writer; counting again", config_hash[:12])
                    time.sleep(random.uniform(0.0, 0.002 * tries))

    def _insert(self, row: dict[str, Any], requests: list[dict[str, Any]]) -> int:
        t = trials_table
        with self._engine.begin() as conn:
            # Counted inside the INSERT itself (one statement: SQLite writers cannot share a number).
            attempt = (
                sa.select(sa.func.count() + 1)
                .where(t.c.study == row["study"], t.c.config_hash == row["config_hash"])
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
        """The study a command means (see `choose_study`)."""
        return choose_study(self.studies(), name, preferred, mask_url(self.url))

    def save_capacity(self, record: CapacityRecord) -> int:
        """Write one capacity run (tuner_capacity); its id."""
        with self._guard("store a capacity result"), self._engine.begin() as conn:
            return capacity_rows.insert(conn, record)

    def capacity(self, study: str) -> tuple[CapacityRecord, ...]:
        """The capacity runs of a study, oldest first."""
        with self._guard("read capacity results"), self._engine.connect() as conn:
            return capacity_rows.select(conn, study)

    def add_capacity_point(self, key: SearchKey, point: StoredPoint) -> None:
        """Write one measured load point (tuner_capacity_points)."""
        with self._guard("store a capacity load point"), self._engine.begin() as conn:
            point_rows.insert(conn, key, point)

    def capacity_points(self, key: SearchKey) -> tuple[StoredPoint, ...]:
        """The load points of one capacity search, in the order they were measured."""
        with self._guard("read capacity load points"), self._engine.connect() as conn:
            return point_rows.select(conn, key)

    def close(self) -> None:
        """Release the pooled connections."""
        self._engine.dispose()

    def __enter__(self) -> SqlStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
