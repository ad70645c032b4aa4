"""Capacity results, stored with the trial they measured: the table `tuner_capacity`.

The table is part of the schema (tuner/store/schema.py, since version 3: opening a database of an
earlier release adds it, keeping a table that a capacity run made the old way); written and read
only through the ResultStore (save_capacity, capacity): status, the report and the export.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa

from tuner.store.schema import capacity_table

TABLE = capacity_table.name


@dataclass(frozen=True, kw_only=True, slots=True)
class CapacityRecord:
    """One capacity run of one trial's configuration."""

    study: str
    trial_number: int | None
    row_id: int
    config_hash: str
    knob: str
    slos: tuple[str, ...]
    capacity: float | None
    points: tuple[dict[str, Any], ...]  # {"load", "passed", "runs", "medians", "why"} per load
    outcome: str
    message: str | None = None
    created_at: datetime | None = None

    @property
    def unit(self) -> str:
        return "req/s" if self.knob == "request_rate" else "concurrent requests"

    def bound(self) -> str:
        """What set the limit: the reasons the lowest failing load above the capacity failed
        ("ttft_p99_ms<=2000 (ttft_p99_ms=2,310.0 ...)", "the served-rate rule ...", "failed requests"),
        or that no load failed. Records written before limits were stored are read from their text."""
        above = [
            p
            for p in self.points
            if not p.get("passed") and (self.capacity is None or p["load"] > self.capacity)
        ]
        if not above:
            return "nothing: no load measured failed (the search stopped at its highest load or its budget)"
        first = min(above, key=lambda p: p["load"])
        limits = [str(x) for x in first.get("limits") or _limits_from_text(str(first.get("why") or ""))]
        words = [
            f"SLO {x.removeprefix('slo:')}" if x.startswith("slo:") else _LIMIT_WORDS.get(x, x)
            for x in limits
        ]
        what = " and ".join(words) or "an unknown limit"
        return f"{what} at {first['load']:g} {self.unit} ({first.get('why') or '-'})"

    def line(self) -> str:
        """`#13: 4.2 req/s within ttft_p99_ms<=2000, bound by ... (7 loads measured, 11 runs)`."""
        who = f"#{self.trial_number}" if self.trial_number is not None else f"row {self.row_id}"
        runs = sum(int(p.get("runs", 1)) for p in self.points)
        found = f"{self.capacity:g} {self.unit}" if self.capacity is not None else "no load met the SLOs"
        if self.capacity is not None and all(p.get("passed") for p in self.points):
            found = f"at least {found} (no load measured failed)"
        if self.outcome != "ok":
            return (
                f"{who}: not measured ({self.outcome}: {self.message or ''}) within {', '.join(self.slos)} "
                f"({len(self.points)} loads measured, {runs} runs)"
            )
        bound = "" if all(p.get("passed") for p in self.points) else f", bound by {self.bound()}"
        return (
            f"{who}: {found} within {', '.join(self.slos)}{bound} "
            f"({len(self.points)} loads measured, {runs} runs)"
        )


_LIMIT_WORDS = {
    "kv_pool": "the KV pool (the requests in flight held more tokens than it has)",
    "served_rate": "the served-rate rule (under 90% of the offered rate served)",
    "failed_requests": "failed requests",
    "died": "the server dying under load",
    "no_request": "no request completing",
}


def _limits_from_text(why: str) -> list[str]:
    """The limits of a point recorded before they were stored, from its `why` text."""
    out = []
    for part in (p.strip() for p in why.split(";") if p.strip()):
        if part.startswith("served "):
            out.append("served_rate")
        elif part.endswith("failed requests"):
            out.append("failed_requests")
        elif part.startswith("the server died"):
            out.append("died")
        elif part == "no request completed":
            out.append("no_request")
        elif "(want " in part:
            metric, _, rest = part.partition("=")
            op_bound = rest.partition("(want ")[2].rstrip(")")
            out.append(f"slo:{metric}{op_bound.replace(' ', '')}")
    return out


def insert(conn: sa.Connection, record: CapacityRecord) -> int:
    """Write a capacity run (SqlStore.save_capacity, inside its transaction); its id."""
    result = conn.execute(
        capacity_table.insert().values(
            study=record.study,
            trial_number=record.trial_number,
            row_id=record.row_id,
            config_hash=record.config_hash,
            knob=record.knob,
            slos=json.dumps(list(record.slos)),
            capacity=record.capacity,
            points_json=json.dumps(list(record.points)),
            outcome=record.outcome,
            message=record.message,
            created_at=record.created_at or datetime.now(timezone.utc),
        )
    )
    key = result.inserted_primary_key
    return int(key[0]) if key else 0


def select(conn: sa.Connection, study: str) -> tuple[CapacityRecord, ...]:
    """The capacity runs of a study, oldest first (SqlStore.capacity)."""
    t = capacity_table
    rows = conn.execute(sa.select(t).where(t.c.study == study).order_by(t.c.id)).mappings().all()
    return tuple(
        CapacityRecord(
            study=r["study"],
            trial_number=r["trial_number"],
            row_id=r["row_id"],
            config_hash=r["config_hash"],
            knob=r["knob"],
            slos=tuple(json.loads(r["slos"])),
            capacity=r["capacity"],
            points=tuple(json.loads(r["points_json"])),
            outcome=r["outcome"],
            message=r["message"],
            created_at=r["created_at"],
        )
        for r in rows
    )


def latest_by_row(records: tuple[CapacityRecord, ...]) -> dict[int, CapacityRecord]:
    """The most recent capacity run of each trial row that measured (else its most recent run)."""
    out: dict[int, CapacityRecord] = {}
    for r in records:  # oldest first
        kept = out.get(r.row_id)
        if kept is None or r.outcome == "ok" or kept.outcome != "ok":
            out[r.row_id] = r
    return out


def bind_rows(records: tuple[CapacityRecord, ...], rows: Sequence[Any]) -> tuple[CapacityRecord, ...]:
    """A capacity objective's records (row_id 0: measured inside the trial, before its row existed) bound
    to the first row of their launch (same config hash); `tuner capacity`'s records are left as they are."""
    first: dict[str, Any] = {}
    for row in rows:
        if getattr(row, "confirm_of", None) is None:
            first.setdefault(row.config_hash, row)
    out = []
    for r in records:
        row = first.get(r.config_hash) if r.row_id == 0 else None
        out.append(r if row is None else replace(r, row_id=row.id, trial_number=row.trial_number))
    return tuple(out)
