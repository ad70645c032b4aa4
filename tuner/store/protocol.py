"""What the study and the report need of a result store (SqlStore is the one adapter; tests have a fake),
and the one way to get one (StoreOpener; tuner.store.factory.open_store opens the URL)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import pandas as pd

from tuner.config import Verdict
from tuner.errors import ConfigError
from tuner.result import TrialResult
from tuner.store.capacity import CapacityRecord
from tuner.store.capacity_points import SearchKey, StoredPoint
from tuner.store.rows import StoredTrial


def choose_study(names: Sequence[str], name: str | None, preferred: str | None, where: str) -> str:
    """The study a command means among `names` (the studies at `where`): `name` if given, else
    `preferred` (the study of a --space given); either must exist. With neither, the only study;
    ConfigError otherwise (never another study in place of the one asked for)."""
    listed = ", ".join(names) or "none"
    if name is not None:
        if name not in names:
            raise ConfigError(f"study {name!r}: not in {where} (studies there: {listed})")
        return name
    if preferred is not None:
        if preferred not in names:
            raise ConfigError(
                f"--space: its study {preferred!r} is not in {where} "
                f"(studies there: {listed}; pass --study NAME or the space file of one of them)"
            )
        return preferred
    if len(names) == 1:
        return names[0]
    raise ConfigError(f"--study: expected one of the studies in {where} (found {len(names)}: {listed})")


class ResultStore(Protocol):
    """Trials recorded one row each (with their request records), read back per study; beside them
    the capacity runs and their load points."""

    url: str

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
        """Write one trial and its request records; return its row id."""
        ...

    def trials(self, study: str) -> tuple[StoredTrial, ...]:
        """Every recorded trial of a study, in the order they were recorded."""
        ...

    def requests(self, trial_id: int) -> pd.DataFrame:
        """One row per request record of a trial: point_index, point_label and every record field."""
        ...

    def studies(self) -> tuple[str, ...]:
        """The names of every study with at least one recorded trial, sorted."""
        ...

    def resolve_study(self, name: str | None, *, preferred: str | None = None) -> str:
        """The study a command means (ConfigError when it cannot tell)."""
        ...

    def save_capacity(self, record: CapacityRecord) -> int:
        """Write one capacity run of a trial's configuration; return its id."""
        ...

    def capacity(self, study: str) -> tuple[CapacityRecord, ...]:
        """The capacity runs of a study, oldest first."""
        ...

    def add_capacity_point(self, key: SearchKey, point: StoredPoint) -> None:
        """Write one load point of a capacity search, as it is measured."""
        ...

    def capacity_points(self, key: SearchKey) -> tuple[StoredPoint, ...]:
        """The load points of one capacity search, in the order they were measured."""
        ...

    def close(self) -> None:
        """Release what the store holds."""
        ...

    def __enter__(self) -> ResultStore: ...

    def __exit__(self, *exc: object) -> None: ...


class StoreOpener(Protocol):
    """How readers and writers get a store: from the database URL (tuner.store.factory.open_store;
    tests hand in one that returns a FakeStore)."""

    def __call__(self, url: str, *, create: bool = True) -> ResultStore:
        """The store at `url`; `create=False`: it must exist and be the tuner's (reports, status)."""
        ...
