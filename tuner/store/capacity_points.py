"""Each load point of a capacity objective's load search, stored as it is measured: `tuner_capacity_points`.

A launch's search reads the points its configuration already has (same study, launch, run and
SLOs) before it measures anything, so a run killed inside a search resumes where it was: a point
whose row was written is never measured again, and none is lost. Its own table, created on first
use; databases without it have no points.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa

from tuner.errors import StoreError
from tuner.store.connect import make_engine, mask_url

TABLE = "tuner_capacity_points"
_META = sa.MetaData()
points_table = sa.Table(
    TABLE,
    _META,
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


@dataclass(frozen=True, kw_only=True, slots=True)
class SearchKey:
    """Which search a point belongs to."""

    study: str
    config_hash: str
    run_key: str
    search_key: str


@dataclass(frozen=True, kw_only=True, slots=True)
class StoredPoint:
    load: float
    values: dict[str, float | None]
    completed: int
    failed: int
    died: str | None = None


def _fail(url: str, action: str, exc: Exception) -> StoreError:
    return StoreError(f"experiments database {mask_url(url)}: cannot {action} a capacity load point: {exc}")


def append(url: str, key: SearchKey, point: StoredPoint) -> None:
    """Store one measured load point (the table is created if absent)."""
    engine = make_engine(url)
    try:
        _META.create_all(engine, tables=[points_table], checkfirst=True)
        with engine.begin() as conn:
            conn.execute(
                points_table.insert().values(
                    study=key.study,
                    config_hash=key.config_hash,
                    run_key=key.run_key,
                    search_key=key.search_key,
                    load=point.load,
                    values_json=json.dumps(point.values),
                    completed=point.completed,
                    failed=point.failed,
                    died=point.died,
                    created_at=datetime.now(timezone.utc),
                )
            )
    except sa.exc.SQLAlchemyError as exc:
        raise _fail(url, "store", exc) from exc
    finally:
        engine.dispose()


def load(url: str, key: SearchKey) -> tuple[StoredPoint, ...]:
    """The points of one search, in the order they were measured (none where the table is absent)."""
    engine = make_engine(url)
    try:
        if not sa.inspect(engine).has_table(TABLE):
            return ()
        t = points_table
        query = (
            sa.select(t)
            .where(t.c.study == key.study, t.c.config_hash == key.config_hash)
            .where(t.c.run_key == key.run_key, t.c.search_key == key.search_key)
            .order_by(t.c.id)
        )
        with engine.connect() as conn:
            rows: list[Any] = list(conn.execute(query).mappings().all())
    except sa.exc.SQLAlchemyError as exc:
        raise _fail(url, "read", exc) from exc
    finally:
        engine.dispose()
    return tuple(
        StoredPoint(
            load=r["load"],
            values=json.loads(r["values_json"]),
            completed=r["completed"],
            failed=r["failed"],
            died=r["died"],
        )
        for r in rows
    )
