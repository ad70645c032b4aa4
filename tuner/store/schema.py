"""The tuner's tables in experiments.db, and their schema version.

They share the database with Optuna's RDB tables, so every name carries the
`tuner_` prefix (Optuna silently skips creating a table that already exists,
`trials` included) and the version lives in `tuner_schema`, never in
alembic's default `alembic_version`, which is Optuna's.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa

from tuner.metrics import BENCH_METRICS

SCHEMA_VERSION = 3

ATTEMPT_UNIQUE = "uq_tuner_trials_attempt"  # (study, config_hash, attempt): one number per run

metadata = sa.MetaData()

schema_table = sa.Table(
    "tuner_schema",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),  # always 1: one row
    sa.Column("version", sa.Integer, nullable=False),
    sa.CheckConstraint("id = 1", name="tuner_schema_one_row"),
)

trials_table = sa.Table(
    "tuner_trials",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("study", sa.String(255), nullable=False),
    sa.Column("trial_number", sa.Integer),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("outcome", sa.String(32), nullable=False),
    sa.Column("failure_phase", sa.String(32)),
    sa.Column("failure_message", sa.Text),
    sa.Column("exit_code", sa.Integer),
    sa.Column("feasible", sa.Boolean, nullable=False),
    sa.Column("config_hash", sa.String(128), nullable=False),
    sa.Column("config_json", sa.Text, nullable=False),
    sa.Column("params_json", sa.Text, nullable=False),
    sa.Column("argv_json", sa.Text),
    sa.Column("env_json", sa.Text),
    sa.Column("launch_json", sa.Text),
    sa.Column("sglang_version", sa.String(64), nullable=False),
    sa.Column("gpus_json", sa.Text, nullable=False),
    sa.Column("server_json", sa.Text),
    sa.Column("startup_s", sa.Float),
    sa.Column("kv_tokens", sa.Integer),
    sa.Column("kv_tokens_log", sa.Integer),
    sa.Column("captured_bs_json", sa.Text),
    sa.Column("min_free_mib_json", sa.Text),
    sa.Column("min_free_mib", sa.Integer),
    sa.Column("gate_verdict", sa.String(32)),
    sa.Column("gate_reason", sa.Text),
    sa.Column("gate_answers_json", sa.Text),
    sa.Column("gate_json", sa.Text),
    sa.Column("objective_point", sa.String(64)),
    *(sa.Column(name, sa.Float) for name in BENCH_METRICS),  # the objective load point's metrics
    sa.Column("bench_json", sa.Text),
    sa.Column("client_bound", sa.Boolean),
    sa.Column("log_path", sa.Text),
    sa.Column("log_excerpt", sa.Text, nullable=False),
    sa.Column("timings_json", sa.Text, nullable=False),
    sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("finished_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("hostname", sa.String(255), nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("confirm_of", sa.Integer, sa.ForeignKey("tuner_trials.id")),
    sa.Index("ix_tuner_trials_study_hash", "study", "config_hash"),
    sa.Index("ix_tuner_trials_study_number", "study", "trial_number"),
    # A unique index, not a table constraint, so that a version-1 database (SQLite cannot add a
    # constraint to a table) gains exactly what a new one has.
    sa.Index(ATTEMPT_UNIQUE, "study", "config_hash", "attempt", unique=True),
)

requests_table = sa.Table(
    "tuner_requests",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("trial_id", sa.Integer, sa.ForeignKey("tuner_trials.id"), nullable=False),
    sa.Column("point_index", sa.Integer, nullable=False),
    sa.Column("point_label", sa.String(64), nullable=False),
    sa.Column("seq", sa.Integer, nullable=False),  # position within its load point
    # A few fields copied out of the record for plain-SQL queries; the record itself is record_json.
    sa.Column("success", sa.Boolean),
    sa.Column("ttft_ms", sa.Float),
    sa.Column("tpot_ms", sa.Float),
    sa.Column("e2e_ms", sa.Float),
    sa.Column("input_tokens", sa.Integer),
    sa.Column("output_tokens", sa.Integer),
    sa.Column("error", sa.Text),
    sa.Column("record_json", sa.Text, nullable=False),
    sa.Index("ix_tuner_requests_trial", "trial_id", "point_index", "seq"),
)


def _unique_attempts(conn: sa.Connection) -> None:
    """Version 1 -> 2: renumber attempts that concurrent writers shared, then make them unique."""
    t = trials_table
    rows = conn.execute(sa.select(t.c.id, t.c.study, t.c.config_hash, t.c.attempt).order_by(t.c.id)).all()
    seen: dict[tuple[str, str], int] = {}
    for row_id, study, config_hash, attempt in rows:
        number = seen.get((study, config_hash), 0) + 1
        seen[(study, config_hash)] = number
        if attempt != number:
            conn.execute(sa.update(t).where(t.c.id == row_id).values(attempt=number))
    next(i for i in t.indexes if i.name == ATTEMPT_UNIQUE).create(conn, checkfirst=True)


def _metric_columns(conn: sa.Connection) -> None:
    """Version 2 -> 3: a column for every metric the registry gained (failed_requests, failed_fraction)."""
    have = {c["name"] for c in sa.inspect(conn).get_columns(trials_table.name)}
    for name in BENCH_METRICS:
        if name not in have:
            column = sa.Column(name, sa.Float)
            kind = column.type.compile(dialect=conn.dialect)
            conn.exec_driver_sql(f"ALTER TABLE {trials_table.name} ADD COLUMN {name} {kind}")


# version -> function that upgrades a database at that version to version + 1.
MIGRATIONS: dict[int, Callable[[sa.Connection], None]] = {1: _unique_attempts, 2: _metric_columns}


class NewerSchemaError(Exception):
    """The database was written by a newer tuner (caught and reworded by the store)."""

    def __init__(self, found: int) -> None:
        super().__init__(found)
        self.found = found


def read_version(conn: sa.Connection) -> int | None:
    """The stored schema version; None for a database without the tuner's tables."""
    if not sa.inspect(conn).has_table(schema_table.name):
        return None
    found = conn.execute(sa.select(schema_table.c.version)).scalar_one_or_none()
    return None if found is None else int(found)


def ensure_schema(conn: sa.Connection) -> int:
    """Create missing tables, stamp or migrate the version; return the version found before."""
    metadata.create_all(conn, checkfirst=True)
    found = conn.execute(sa.select(schema_table.c.version)).scalar_one_or_none()
    if found is None:
        conn.execute(sa.insert(schema_table).values(id=1, version=SCHEMA_VERSION))
        return SCHEMA_VERSION
    if found > SCHEMA_VERSION:
        raise NewerSchemaError(found)
    for version in range(found, SCHEMA_VERSION):
        MIGRATIONS[version](conn)
    if found < SCHEMA_VERSION:
        conn.execute(sa.update(schema_table).values(version=SCHEMA_VERSION))
    return int(found)
