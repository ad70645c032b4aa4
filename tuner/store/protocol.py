"""What the study and the report need of a result store (SqlStore is the one adapter; tests have a fake)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import pandas as pd

from tuner.config import Verdict
from tuner.result import TrialResult
from tuner.store.rows import StoredTrial


class ResultStore(Protocol):
    """Trials recorded one row each (with their request records), read back per study."""

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

    def close(self) -> None:
        """Release what the store holds."""
        ...
