"""Fakes of the tuner's small interfaces, for tests that need one without its technology.

`FakeStore` is a ResultStore in memory: rows are built and read back by the same pure functions
as SqlStore's (tuner.store.rows), so what differs is only where they are kept; the store's
contract tests run against it too (tests/unit/test_store_contract.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

import pandas as pd

from tuner.config import Verdict
from tuner.errors import StoreError
from tuner.result import TrialResult
from tuner.store.capacity import CapacityRecord
from tuner.store.capacity_points import SearchKey, StoredPoint
from tuner.store.codec import loads
from tuner.store.protocol import choose_study
from tuner.store.rows import StoredTrial, request_rows, stored_trial, trial_row

_NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


class FakeStore:
    """A ResultStore in a list; `hostname` and `pid` as the rows should say."""

    def __init__(self, *, hostname: str = "node-1", pid: int = 4242) -> None:
        self.url = "fake://memory"
        self._hostname = hostname
        self._pid = pid
        self._rows: list[dict[str, Any]] = []
        self._requests: dict[int, list[dict[str, Any]]] = {}
        self._capacity: list[CapacityRecord] = []
        self._points: list[tuple[SearchKey, StoredPoint]] = []
        self.closed = False

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
        if confirm_of is not None and not any(r["id"] == confirm_of for r in self._rows):
            missing = f"no trial row {confirm_of} to link to"
            raise StoreError(f"experiments database {self.url}: cannot record: {missing}")
        same = sum(1 for r in self._rows if r["study"] == study and r["config_hash"] == config_hash)
        row.update(id=len(self._rows) + 1, attempt=same + 1)
        self._rows.append(row)
        self._requests[row["id"]] = list(request_rows(result.bench))
        return int(row["id"])

    def trials(self, study: str) -> tuple[StoredTrial, ...]:
        return tuple(stored_trial(r) for r in self._rows if r["study"] == study)

    def requests(self, trial_id: int) -> pd.DataFrame:
        rows = self._requests.get(trial_id, [])
        if not rows:
            return pd.DataFrame(columns=["point_index", "point_label"])
        where = ("point_index", "point_label")
        return pd.DataFrame([{**{k: r[k] for k in where}, **loads(r["record_json"])} for r in rows])

    def studies(self) -> tuple[str, ...]:
        return tuple(sorted({r["study"] for r in self._rows}))

    def resolve_study(self, name: str | None, *, preferred: str | None = None) -> str:
        return choose_study(self.studies(), name, preferred, self.url)

    def save_capacity(self, record: CapacityRecord) -> int:
        self._capacity.append(replace(record, created_at=record.created_at or _NOW))
        return len(self._capacity)

    def capacity(self, study: str) -> tuple[CapacityRecord, ...]:
        return tuple(r for r in self._capacity if r.study == study)

    def add_capacity_point(self, key: SearchKey, point: StoredPoint) -> None:
        self._points.append((key, point))

    def capacity_points(self, key: SearchKey) -> tuple[StoredPoint, ...]:
        return tuple(p for k, p in self._points if k == key)

    def close(self) -> None:
        self.closed = True

    def __enter__(self) -> FakeStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
