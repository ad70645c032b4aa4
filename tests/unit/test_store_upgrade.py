"""Opening a database brings it to this schema: missing metric columns and tables added, migrations once."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa
from support.stored import make_result, record

from tuner.store import schema as store_schema
from tuner.store.sql import SqlStore


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'experiments.db'}"


def _columns(tmp_path: Path, table: str) -> list[str]:
    con = sqlite3.connect(tmp_path / "experiments.db")
    try:
        return [row[1] for row in con.execute(f"PRAGMA table_info({table})")]
    finally:
        con.close()


def _sql(tmp_path: Path, *statements: str) -> None:
    con = sqlite3.connect(tmp_path / "experiments.db")
    with con:
        for statement in statements:
            con.execute(statement)
    con.close()


def test_a_metric_column_missing_is_added_on_open_and_then_written(tmp_path: Path) -> None:
    with SqlStore(_url(tmp_path)) as store:
        record(store, make_result())
    # A database written before `total_throughput` and `ttft_p99_ms` were metrics of the registry.
    _sql(tmp_path, "ALTER TABLE tuner_trials DROP COLUMN total_throughput")
    _sql(tmp_path, "ALTER TABLE tuner_trials DROP COLUMN ttft_p99_ms")
    assert "total_throughput" not in _columns(tmp_path, "tuner_trials")

    with SqlStore(_url(tmp_path)) as store:
        old = store.trials("glm5-v1")
        record(store, make_result())
        rows = store.trials("glm5-v1")

    assert {"total_throughput", "ttft_p99_ms"} <= set(_columns(tmp_path, "tuner_trials"))
    assert old[0].metrics["total_throughput"] is None  # the old row: not measured, never 0
    assert rows[-1].metrics["total_throughput"] is not None  # the new row has its value


def test_opening_twice_adds_nothing_the_second_time(tmp_path: Path) -> None:
    SqlStore(_url(tmp_path)).close()
    _sql(tmp_path, "ALTER TABLE tuner_trials DROP COLUMN request_throughput")
    engine = sa.create_engine(_url(tmp_path))
    with engine.begin() as conn:
        assert store_schema.add_missing_columns(conn) == ("tuner_trials.request_throughput",)
        assert store_schema.add_missing_columns(conn) == ()
        assert store_schema.up_to_date(conn)
    engine.dispose()
    SqlStore(_url(tmp_path)).close()
    assert _columns(tmp_path, "tuner_trials").count("request_throughput") == 1


def test_a_table_missing_from_an_up_to_date_version_is_created(tmp_path: Path) -> None:
    SqlStore(_url(tmp_path)).close()
    _sql(tmp_path, "DROP TABLE tuner_requests")

    with SqlStore(_url(tmp_path)) as store:
        record(store, make_result())

    assert "record_json" in _columns(tmp_path, "tuner_requests")


def test_a_read_only_open_upgrades_too(tmp_path: Path) -> None:
    with SqlStore(_url(tmp_path)) as store:
        record(store, make_result())
    _sql(tmp_path, "ALTER TABLE tuner_trials DROP COLUMN e2e_p99_ms")

    with SqlStore(_url(tmp_path), create=False) as store:
        assert store.trials("glm5-v1")[0].metrics["e2e_p99_ms"] is None
    assert "e2e_p99_ms" in _columns(tmp_path, "tuner_trials")


def test_a_not_null_column_missing_needs_a_migration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    SqlStore(_url(tmp_path)).close()
    meta = sa.MetaData()
    owner = sa.Column("owner", sa.Text, nullable=False)
    sa.Table("tuner_trials", meta, sa.Column("id", sa.Integer), owner)
    monkeypatch.setattr(store_schema, "metadata", meta)
    engine = sa.create_engine(_url(tmp_path))
    with engine.begin() as conn, pytest.raises(ValueError, match="tuner_trials.owner is NOT NULL"):
        store_schema.add_missing_columns(conn)
    engine.dispose()
    assert owner.name not in _columns(tmp_path, "tuner_trials")


def test_migrations_are_numbered_in_order_and_end_at_the_schema_version() -> None:
    versions = [m.version for m in store_schema.MIGRATIONS]
    assert versions == list(range(1, store_schema.SCHEMA_VERSION))
    assert all(m.summary for m in store_schema.MIGRATIONS)


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "databases"
CAPACITY_TABLES = {"tuner_capacity", "tuner_capacity_points"}


def _tables(db: Path) -> set[str]:
    con = sqlite3.connect(db)
    try:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        con.close()


def test_a_fresh_database_has_the_capacity_tables_from_its_schema(tmp_path: Path) -> None:
    SqlStore(_url(tmp_path)).close()  # no capacity run yet: the tables come with the schema
    assert _tables(tmp_path / "experiments.db") >= CAPACITY_TABLES
    assert any("capacity" in m.summary for m in store_schema.MIGRATIONS)
    assert {t.name for t in store_schema.metadata.sorted_tables} >= CAPACITY_TABLES


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.glob("*.db")))
def test_a_database_of_an_earlier_release_gains_the_capacity_tables_on_open(
    name: str, tmp_path: Path
) -> None:
    db = tmp_path / "experiments.db"
    db.write_bytes((FIXTURES / name).read_bytes())
    assert not CAPACITY_TABLES & _tables(db)
    with SqlStore(_url(tmp_path), create=False) as store:
        before = store.trials(store.resolve_study(None))
    assert _tables(db) >= CAPACITY_TABLES and before
    con = sqlite3.connect(db)
    try:
        assert con.execute("SELECT version FROM tuner_schema").fetchall() == [(store_schema.SCHEMA_VERSION,)]
    finally:
        con.close()


def test_capacity_tables_made_the_old_way_are_kept_with_their_rows(tmp_path: Path) -> None:
    """Before version 3 a capacity run created its tables on first use, in a version-2 database."""
    db = tmp_path / "experiments.db"
    db.write_bytes((FIXTURES / "v2-cd5d975.db").read_bytes())
    old = sa.MetaData()
    for table in store_schema.CAPACITY_TABLES:  # the same columns, without the index names of today
        sa.Table(table.name, old, *(sa.Column(c.name, c.type, primary_key=c.primary_key) for c in table.c))
    engine = sa.create_engine(_url(tmp_path))
    old.create_all(engine)
    with engine.begin() as conn:
        conn.execute(
            sa.insert(old.tables["tuner_capacity"]).values(
                study="s",
                row_id=1,
                config_hash="h",
                knob="request_rate",
                slos="[]",
                capacity=4.0,
                points_json="[]",
                outcome="ok",
                created_at=sa.func.now(),
            )  # fmt: skip
        )
    engine.dispose()
    with SqlStore(_url(tmp_path)) as store:
        assert [r.capacity for r in store.capacity("s")] == [4.0]
    con = sqlite3.connect(db)
    try:
        assert con.execute("SELECT version FROM tuner_schema").fetchall() == [(store_schema.SCHEMA_VERSION,)]
        indexes = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    finally:
        con.close()
    assert {"ix_tuner_capacity_study", "ix_tuner_capacity_points_config_hash"} <= indexes
