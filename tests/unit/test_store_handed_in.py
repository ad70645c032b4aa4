"""The store is handed in: the study, the confirmation runs and the reports take a StoreOpener and
write and read only through it (a FakeStore here); open_store is the one factory from the URL."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from support.fakes import FakeStore
from support.stored import make_result, record

from tuner.config import Outcome, TrialConfig
from tuner.errors import ConfigError, StoreError
from tuner.report.frame import load_study_data, with_goodput
from tuner.result import TrialResult
from tuner.space.loader import load_space
from tuner.store.factory import open_store
from tuner.store.protocol import ResultStore
from tuner.study.runner import StudyRunner

ROOT = Path(__file__).resolve().parents[2]


class Opener:
    """A StoreOpener that hands out one FakeStore and remembers what it was asked."""

    def __init__(self) -> None:
        self.store = FakeStore()
        self.asked: list[tuple[str, bool]] = []

    def __call__(self, url: str, *, create: bool = True) -> ResultStore:
        self.asked.append((url, create))
        return self.store  # type: ignore[return-value]  # a ResultStore by its shape


def test_the_study_records_every_trial_through_the_store_it_is_handed(tmp_path: Path) -> None:
    space = replace(load_space(ROOT / "search_spaces" / "tiny-fast-sim.yaml"), log_dir=tmp_path / "runs")
    opener = Opener()
    ran: list[TrialConfig] = []

    def execute(config: TrialConfig, ctx: Any, *, label: str, prepared: Any = None) -> TrialResult:
        ran.append(config)
        return make_result(Outcome.OOM, config=config)

    url = f"sqlite:///{tmp_path / 'exp.db'}"
    runner = StudyRunner(space, db_url=url, n_trials=3, execute=execute, stores=opener)
    runner.run()
    rows = opener.store.trials(space.study_name)
    assert len(rows) == len(ran) >= 1 and opener.asked[0] == (url, True)
    assert all(r.outcome is Outcome.OOM for r in rows)
    with pytest.raises(ConfigError, match="no tuner tables"):  # nothing went around the port
        open_store(url, create=False)


def test_the_reports_read_rows_and_requests_through_the_store_they_are_handed() -> None:
    opener = Opener()
    record(opener.store, trial_number=0)  # type: ignore[arg-type]
    data = load_study_data("sqlite://", stores=opener)  # no Optuna study there: the rows alone
    assert [r.trial_number for r in data.rows] == [0] and data.name == "glm5-v1"
    assert opener.asked == [("sqlite://", False)]
    assert with_goodput(data, stores=opener).goodput == {}  # no latency constraint, nothing read


def test_open_store_opens_the_url_and_refuses_a_missing_database(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'exp.db'}"
    with open_store(url) as store:
        assert store.studies() == ()
    with pytest.raises((ConfigError, StoreError), match="nothere"):
        open_store(f"sqlite:///{tmp_path / 'nothere.db'}", create=False)
