"""Each load point of a capacity objective's load search, stored as it is measured: `tuner_capacity_points`.

A launch's search reads the points its configuration already has (same study, launch, run and
SLOs) before it measures anything, so a run killed inside a search resumes where it was: a point
whose row was written is never measured again, and none is lost. The table is part of the schema
(since version 3); points are written and read through the ResultStore.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa

from tuner.store.schema import capacity_points_table

points_table = capacity_points_table
TABLE = points_table.name


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


def insert(conn: sa.Connection, key: SearchKey, point: StoredPoint) -> None:
    """Write one measured load point (SqlStore.add_capacity_point)."""
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


def select(conn: sa.Connection, key: SearchKey) -> tuple[StoredPoint, ...]:
    """The points of one search, in the order they were measured (SqlStore.capacity_points)."""
    t = points_table
    query = (
        sa.select(t)
        .where(t.c.study == key.study, t.c.config_hash == key.config_hash)
        .where(t.c.run_key == key.run_key, t.c.search_key == key.search_key)
        .order_by(t.c.id)
    )
    rows: list[Any] = list(conn.execute(query).mappings().all())
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
