"""The study's reliability pieces on their own: backoff, a lost store, the order of row and tell, claims."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import optuna
import pytest
import sqlalchemy as sa
from optuna.trial import TrialState
from support.stored import make_result, record

from tuner.config import Outcome
from tuner.errors import InfrastructureError, StoreLostError
from tuner.search.told import concluded
from tuner.space.sections import Budget
from tuner.store.health import StoreWatch, sqlite_path
from tuner.store.sql import SqlStore
from tuner.study.backoff import InfraBackoff
from tuner.study.claims import claim_launch
from tuner.study.durable import finish_recorded, mark_pending, store_guard


def test_infrastructure_faults_back_off_exponentially_and_stop_at_the_cap() -> None:
    slept: list[float] = []
    backoff = InfraBackoff.from_budget(
        Budget(max_infra_failures=4, infra_backoff_s=1.0, infra_backoff_max_s=3.0), slept.append
    )
    backoff.after(Outcome.INFRA_ERROR, "port taken")
    backoff.after(Outcome.INFRA_ERROR, "port taken")
    backoff.after(Outcome.INFRA_ERROR, "port taken")
    assert slept == [1.0, 2.0, 3.0]  # doubling, capped
    with pytest.raises(
        InfrastructureError, match=r"stopped after 4 infrastructure failures in a row \(last: port"
    ):
        backoff.after(Outcome.INFRA_ERROR, "port\ntaken")
    assert InfrastructureError.exit_code == 3


def test_any_other_outcome_resets_the_count() -> None:
    slept: list[float] = []
    backoff = InfraBackoff.from_budget(Budget(), slept.append)
    assert Budget().max_infra_failures == 3
    for outcome in (Outcome.INFRA_ERROR, Outcome.INFRA_ERROR, Outcome.OOM, Outcome.INFRA_ERROR, Outcome.OK):
        backoff.after(outcome)
    assert backoff.failures == 0 and slept == [2.0, 4.0, 2.0]


def test_the_watch_notices_a_deleted_or_replaced_database(tmp_path: Path) -> None:
    db = tmp_path / "exp.db"
    sqlite3.connect(db).close()
    watch = StoreWatch(f"sqlite:///{db}")
    watch.check()
    other = tmp_path / "other.db"
    sqlite3.connect(other).close()
    os.replace(other, db)
    with pytest.raises(StoreLostError, match=f"{db} was replaced"):
        watch.check()
    db.unlink()
    with pytest.raises(StoreLostError, match=f"{db} was deleted"):
        watch.check()
    assert sqlite_path("sqlite://") is None and sqlite_path("postgresql://u@h/db") is None
    StoreWatch("postgresql://u@h/db").check()  # servers: their own errors tell


def test_a_database_error_in_the_loop_is_one_line_naming_the_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'exp.db'}"
    store, watch = SqlStore(url), StoreWatch(url)
    with pytest.raises(StoreLostError, match="exp.db: cannot write: disk I/O"), store_guard(store, watch):
        raise sa.exc.OperationalError("INSERT", {}, sqlite3.OperationalError("disk I/O error"))


def _study(url: str) -> optuna.Study:
    return optuna.create_study(study_name="glm5-v1", storage=url, directions=["maximize"])


def test_a_row_written_before_a_lost_tell_is_finished_on_the_next_start(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'exp.db'}"
    with SqlStore(url) as store:
        study = _study(url)
        trial = study.ask()
        trial.set_constraint("failure", 0.0)
        mark_pending(trial, state=TrialState.COMPLETE, values=(123.0,))
        record(store, make_result(), trial_number=trial.number)
        # the worker dies here: Optuna still says RUNNING, the row says ok
        frozen = study.get_trials(deepcopy=False)[trial.number]
        assert frozen.state is TrialState.RUNNING
        assert finish_recorded(study, store, "glm5-v1", frozen)
        done = study.get_trials(deepcopy=False)[trial.number]
        assert (
            done.state is TrialState.COMPLETE
            and done.values == [123.0]
            and done.constraints == {"failure": 0.0}
        )


def test_a_recorded_failure_whose_tell_was_lost_is_told_fail_not_retried(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'exp.db'}"
    with SqlStore(url) as store:
        study = _study(url)
        trial = study.ask()
        mark_pending(trial, state=TrialState.FAIL, verdict=True)  # an OOM: a result, not a retry
        record(store, make_result(Outcome.OOM), trial_number=trial.number)
        assert finish_recorded(study, store, "glm5-v1", study.get_trials(deepcopy=False)[trial.number])
        done = study.get_trials(deepcopy=False)[trial.number]
        assert done.state is TrialState.FAIL and done.values is None and concluded(done)


def test_without_a_row_or_with_a_pending_fail_the_trial_is_failed_and_retried_as_usual(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'exp.db'}"
    with SqlStore(url) as store:
        study = _study(url)
        no_row = study.ask()
        mark_pending(no_row, state=TrialState.COMPLETE, values=(1.0,))
        failing = study.ask()
        mark_pending(failing, state=TrialState.FAIL)
        record(store, make_result(Outcome.INFRA_ERROR), trial_number=failing.number)
        trials = study.get_trials(deepcopy=False)
        assert not finish_recorded(study, store, "glm5-v1", trials[no_row.number])
        assert not finish_recorded(study, store, "glm5-v1", trials[failing.number])
        assert all(t.state is TrialState.RUNNING for t in study.get_trials(deepcopy=False))


def test_a_launch_key_is_claimed_by_one_running_trial_at_a_time(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'exp.db'}"
    study = _study(url)
    first, second = study.ask(), study.ask()
    for t in (first, second):
        t.set_user_attr("host", "elsewhere")  # a worker on another host: alive as far as we know
    lock = tmp_path / "lock"
    assert claim_launch(study, first, "k1", lock=lock, stop=lambda: False, sleep=lambda s: None) is None
    polls: list[float] = []

    def sleep(seconds: float) -> None:  # the first trial finishes while the second waits
        polls.append(seconds)
        study.tell(first, [1.0])

    assert claim_launch(study, second, "k1", lock=lock, stop=lambda: False, sleep=sleep) == first.number
    assert len(polls) == 1 and second.user_attrs["cfg_hash"] == "k1"
    third = study.ask()
    # a stop request ends the wait at once
    study_trial = study.ask()
    claim_launch(study, study_trial, "k2", lock=lock, stop=lambda: False, sleep=lambda s: None)
    study_trial.set_user_attr("host", "elsewhere")
    assert claim_launch(study, third, "k2", lock=lock, stop=lambda: True, sleep=lambda s: None) is None


def test_a_claim_of_a_dead_worker_on_this_named_host_does_not_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With $TUNER_HOSTNAME set, trials record that name: a dead worker's claim is recognised by it."""
    monkeypatch.setenv("TUNER_HOSTNAME", "node-7")
    url = f"sqlite:///{tmp_path / 'exp.db'}"
    study = _study(url)
    dead, waiting = study.ask(), study.ask()
    lock = tmp_path / "lock"
    assert claim_launch(study, dead, "k1", lock=lock, stop=lambda: False, sleep=lambda s: None) is None
    dead.set_user_attr("host", "node-7")
    dead.set_user_attr("pid", 2**22 + 12345)  # no such process
    slept: list[float] = []
    assert claim_launch(study, waiting, "k1", lock=lock, stop=lambda: bool(slept), sleep=slept.append) is None
    assert slept == []
