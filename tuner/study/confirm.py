"""Re-validation: launch a chosen trial's configuration again, `repeats` times, and record each run.

The repeats go through the same `trial_session` and `run_trial` as the study
(same engine, probe, run directory, orphans stopped first), and are stored as
rows with `confirm_of = <the original row id>`; they are not Optuna trials,
so the sampler and the Pareto front never see them. The export then reports
the median and spread over the original and its repeats, and the trial's
Optuna values and user attributes (the dashboard's) are amended to the same
median (tuner.study.amend).

Before launching, the configuration is rendered again from the space file
and its hash compared with the one recorded: if the space now renders a
different launch (other fixed flags, another SGLang version), a repeat would
measure something else, so confirm refuses.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import optuna

from tuner.config import Outcome, TrialConfig
from tuner.errors import ConfigError, ProfileError
from tuner.result import TrialResult
from tuner.session import TrialContext, key_of, prepare_launch, trial_session
from tuner.space.loader import SearchSpace, config_from_params
from tuner.store.factory import open_store
from tuner.store.protocol import ResultStore, StoreOpener
from tuner.store.rows import StoredTrial
from tuner.study.amend import amend_from_store
from tuner.study.repeat import record_repeat
from tuner.study.storage import make_storage
from tuner.trial import run_trial

__all__ = ["ConfirmRun", "confirm"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class ConfirmRun:
    """What `confirm` did: the original row, the chosen trial, the new rows and their outcomes."""

    study: str
    trial: int | None
    original_id: int
    row_ids: tuple[int, ...]
    outcomes: tuple[Outcome, ...]
    interrupted: bool = False

    @property
    def all_ok(self) -> bool:
        return not self.interrupted and all(o is Outcome.OK for o in self.outcomes)


def confirm(
    space: SearchSpace,
    *,
    db_url: str,
    study: str,
    original: StoredTrial,
    trial: int | None = None,
    repeats: int = 3,
    on_result: Callable[[int, TrialResult], None] | None = None,
    stores: StoreOpener = open_store,
) -> ConfirmRun:
    """Relaunch the recorded `original` (trial `trial`, or the one chosen for the caller) `repeats`
    times and record every run."""
    if repeats < 1:
        raise ConfigError(f"--repeats: expected at least 1 (got {repeats})")
    name = study
    with stores(db_url, create=False) as store:
        number = original.trial_number if trial is None else trial
        try:
            config = config_from_params(space, original.params)
        except ConfigError as exc:
            raise ProfileError(f"trial {number} of study {name!r} does not fit {space.path}: {exc}") from exc
        with trial_session(space, study=name) as ctx:
            ids, outcomes, interrupted = _repeats(
                space, ctx, store, config, original, name=name, number=number, repeats=repeats,
                on_result=on_result,
            )  # fmt: skip
        if ids and number is not None:
            _amend(db_url, name, store, number)
    return ConfirmRun(
        study=name,
        trial=number,
        original_id=original.id,
        row_ids=tuple(ids),
        outcomes=tuple(outcomes),
        interrupted=interrupted,
    )


def _amend(db_url: str, study: str, store: ResultStore, number: int) -> None:
    """The dashboard's values of the trial: the median over the original and every repeat."""
    try:
        loaded = optuna.load_study(study_name=study, storage=make_storage(db_url))
    except Exception as exc:  # noqa: BLE001 - the repeats are recorded; the dashboard lags
        log.warning("trial %d: the dashboard's values still show its first measurement: %s", number, exc)
        return
    amend_from_store(loaded, store, number)


def _repeats(
    space: SearchSpace, ctx: TrialContext, store: ResultStore, config: TrialConfig, original: StoredTrial,
    *, name: str, number: int | None, repeats: int, on_result: Callable[[int, TrialResult], None] | None,
) -> tuple[list[int], list[Outcome], bool]:  # fmt: skip
    """Launch the same configuration `repeats` times, each recorded beside the original (refused when
    the space now renders another launch); (row ids, outcomes, interrupted)."""
    ids: list[int] = []
    outcomes: list[Outcome] = []
    for i in range(1, repeats + 1):
        label = f"confirm-{number if number is not None else original.id:04d}-{i}"
        prepared = prepare_launch(config, ctx, label=label)
        chash = key_of(prepared)
        if chash != original.config_hash:
            raise ProfileError(
                f"trial {number} of study {name!r}: {space.path} now renders a different launch "
                f"(config hash {chash}, recorded {original.config_hash}; expected the same space "
                f"file and SGLang version as the study)"
            )
        result = run_trial(config, ctx, label=label, prepared=prepared)
        if result.outcome is Outcome.INTERRUPTED:
            return ids, outcomes, True
        _, row_id = record_repeat(
            store,
            space,
            result,
            study=name,
            params=original.params,
            config_hash=chash,
            original_id=original.id,
        )
        if row_id is not None:
            ids.append(row_id)
        outcomes.append(result.outcome)
        if on_result is not None:
            on_result(i, result)
    return ids, outcomes, False
