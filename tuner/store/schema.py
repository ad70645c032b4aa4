"""The tuner's tables in experiments.db, their schema version and how a database is upgraded.

They share the database with Optuna's RDB tables, so every name carries the
`tuner_` prefix (Optuna silently skips creating a table that already exists,
`trials` included) and the version lives in `tuner_schema`, never in
alembic's default `alembic_version`, which is Optuna's.

Opening a database brings it to this schema (`ensure_schema`), in three steps:
missing tables are created; the ordered `MIGRATIONS` from its version on are
applied (a change that rewrites data: renumbering, filling, renaming); and
every nullable column the tables declare but the database lacks is added (a
metric added to tuner.metrics is a new column of `tuner_trials`, and needs no
migration). Every step is idempotent, so two workers upgrading at once are safe.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import sqlalchemy as sa

from tuner.metrics import BENCH_METRICS

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


# Capacity results (tuner capacity, the capacity objective, the finalists' capacity): in the schema
# since version 3; releases before it created them on first use, with these same columns.
capacity_table = sa.Table(
    "tuner_capacity",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("study", sa.String(255), nullable=False, index=True),
    sa.Column("trial_number", sa.Integer, nullable=True),
    sa.Column("row_id", sa.Integer, nullable=False),  # the trial's row in tuner_trials
    sa.Column("config_hash", sa.String(64), nullable=False),
    sa.Column("knob", sa.String(32), nullable=False),  # request_rate | concurrency
    sa.Column("slos", sa.Text, nullable=False),  # JSON list of "metric<=bound"
    sa.Column("capacity", sa.Float, nullable=True),  # None: no load met the SLOs
    sa.Column("points_json", sa.Text, nullable=False),  # every measurement: load, pass, SLO metrics
    sa.Column("outcome", sa.String(32), nullable=False),  # ok | the launch's failure class
    sa.Column("message", sa.Text, nullable=True),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)

capacity_points_table = sa.Table(
    "tuner_capacity_points",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("study", sa.String(255), nullable=False, index=True),
    sa.Column("config_hash", sa.String(64), nullable=False, index=True),
    sa.Column("run_key", sa.String(64), nullable=False),  # "first", "repeat-1": one search per launch kind
    sa.Column("search_key", sa.Text, nullable=False),  # the knob and the SLOs (another objective: its own)
    sa.Column("load", sa.Float, nullable=False),
    sa.Column("values_json", sa.Text, nullable=False),  # the run's metrics (SLO metrics, curve)
    sa.Column("completed", sa.Integer, nullable=False),
    sa.Column("failed", sa.Integer, nullable=False),
    sa.Column("died", sa.String(32), nullable=True),  # the server died under this load (its class)
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)
CAPACITY_TABLES = (capacity_table, capacity_points_table)


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


def _capacity_tables(conn: sa.Connection) -> None:
    """Version 2 -> 3: the capacity tables join the schema. A database where a capacity run created
    them the old way keeps them and their rows (same columns); one without them gains them empty."""
    for table in CAPACITY_TABLES:
        table.create(conn, checkfirst=True)
        for index in table.indexes:
            index.create(conn, checkfirst=True)


@dataclass(frozen=True, kw_only=True, slots=True)
class Migration:
    """One schema change: upgrades a database at `version` to `version + 1`."""

    version: int
    summary: str
    upgrade: Callable[[sa.Connection], None]


# In order; a new one is appended with the next version and SCHEMA_VERSION follows.
MIGRATIONS: tuple[Migration, ...] = (
    Migration(version=1, summary="attempt numbers unique per configuration", upgrade=_unique_attempts),
    Migration(version=2, summary="capacity results in the schema", upgrade=_capacity_tables),
)
SCHEMA_VERSION = MIGRATIONS[-1].version + 1
assert [m.version for m in MIGRATIONS] == list(range(1, SCHEMA_VERSION)), "migrations out of order"


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


def missing_columns(conn: sa.Connection) -> Mapping[str, tuple[sa.Column[object], ...]]:
    """Table name -> the declared columns an existing table of the database lacks."""
    inspector = sa.inspect(conn)
    present = set(inspector.get_table_names())
    gaps: dict[str, tuple[sa.Column[object], ...]] = {}
    for table in metadata.sorted_tables:
        if table.name not in present:
            continue
        have = {c["name"] for c in inspector.get_columns(table.name)}
        lacking = tuple(c for c in table.columns if c.name not in have)
        if lacking:
            gaps[table.name] = lacking
    return gaps


def up_to_date(conn: sa.Connection) -> bool:
    """Every table and column of this schema is there (the version is checked apart)."""
    present = set(sa.inspect(conn).get_table_names())
    return all(t.name in present for t in metadata.sorted_tables) and not missing_columns(conn)


def add_missing_columns(conn: sa.Connection) -> tuple[str, ...]:
    """ALTER TABLE ... ADD COLUMN for each declared nullable column a table lacks; `table.column` added.

    A NOT NULL column cannot be added to rows that exist without saying what they hold: that is
    a migration's job, and its absence here is a bug of the schema, not of the database.
    """
    quote = conn.dialect.identifier_preparer.quote
    guard = " IF NOT EXISTS" if conn.dialect.name == "postgresql" else ""
    added = []
    for table, columns in missing_columns(conn).items():
        for column in columns:
            if not column.nullable and column.server_default is None:
                raise ValueError(f"column {table}.{column.name} is NOT NULL: add it with a migration")
            spec = sa.schema.CreateColumn(column).compile(dialect=conn.dialect)
            conn.exec_driver_sql(f"ALTER TABLE {quote(table)} ADD COLUMN{guard} {spec}")
            added.append(f"{table}.{column.name}")
    return tuple(added)


def ensure_schema(conn: sa.Connection) -> int:
    """Create missing tables, stamp or migrate the version, add missing columns and indexes;
    return the version found before."""
    metadata.create_all(conn, checkfirst=True)
    found = conn.execute(sa.select(schema_table.c.version)).scalar_one_or_none()
    if found is None:
        conn.execute(sa.insert(schema_table).values(id=1, version=SCHEMA_VERSION))
        found = SCHEMA_VERSION
    if found > SCHEMA_VERSION:
        raise NewerSchemaError(found)
    for migration in MIGRATIONS:
        if migration.version >= found:
            migration.upgrade(conn)
    if found < SCHEMA_VERSION:
        conn.execute(sa.update(schema_table).values(version=SCHEMA_VERSION))
    add_missing_columns(conn)
    for table in metadata.sorted_tables:
        for index in table.indexes:
            index.create(conn, checkfirst=True)
    return int(found)
