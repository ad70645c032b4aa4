"""A re-measurement of a recorded configuration, judged and recorded one way for finalists and `confirm`.

A repeat is not an Optuna trial: it is a store row linked to its original (`confirm_of`), judged
by the space's objectives and constraints like any launch. A result that is not the
configuration's doing (interrupted, infrastructure) is not recorded: it says nothing about it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tuner.config import Verdict
from tuner.objectives import judge
from tuner.result import TrialResult
from tuner.space.loader import SearchSpace
from tuner.store.protocol import ResultStore
from tuner.study.storage import objectives_of


def record_repeat(
    store: ResultStore,
    space: SearchSpace,
    result: TrialResult,
    *,
    study: str,
    params: Mapping[str, Any],
    config_hash: str,
    original_id: int | None,
) -> tuple[Verdict, int | None]:
    """The verdict on a repeat and its row id (None when it was not recorded: retryable)."""
    verdict = judge(result, objectives_of(space), space.constraints)
    if verdict.retryable:
        return verdict, None
    row_id = store.record(
        result,
        study=study,
        trial_number=None,
        params=params,
        config_hash=config_hash,
        verdict=verdict,
        confirm_of=original_id,
    )
    return verdict, row_id
