"""Stuck studies: tuner deaths are retried until measured, results the store refuses fail their trial."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import optuna
import pytest
import sqlalchemy as sa
from optuna.trial import TrialState

from tuner.errors import ReleaseTimeoutError, StoreError
from tuner.search.told import concluded
from tuner.space.loader import load_space, suggest
from tuner.study.durable import mark_pending
from tuner.study.retry import retry, unrecordable
from tuner.study.runner import StudyRunner

ROOT = Path(__file__).resolve().parents[2]


def _study(tmp: Path) -> optuna.Study:
    return optuna.create_study(study_name="s-v1", storage=f"sqlite:///{tmp / 'exp.db'}")


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_two_deaths_of_the_tuner_do_not_drop_a_configuration(tmp_path: Path) -> None:
    space = replace(load_space(ROOT / "search_spaces" / "tiny-fast-sim.yaml"), log_dir=tmp_path / "runs")
    runner = StudyRunner(space, db_url=f"sqlite:///{tmp_path / 'exp.db'}")
    study = runner.study
    params = {"mem-fraction-static": 0.6, "cuda_graph": "off", "chunked-prefill-size": None}
    study.enqueue_trial(params)
    for death in (1, 2, 3):
        trial = study.ask()
        suggest(space, trial)
        assert trial.params == params, f"death {death}: the configuration was dropped"
        trial.set_user_attr("host", runner.host)
        trial.set_user_attr("pid", _dead_pid())  # its worker was SIGKILLed
        runner._reap_dead_workers()  # noqa: SLF001 - what the next start does first
        waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
        assert len(waiting) == 1 and waiting[0].user_attrs["infra_retries"] == death
        assert waiting[0].user_attrs["retry_reason"] == "worker died"


def test_a_trial_lost_after_its_failure_verdict_was_pending_is_retried_not_a_result(tmp_path: Path) -> None:
    space = replace(load_space(ROOT / "search_spaces" / "tiny-fast-sim.yaml"), log_dir=tmp_path / "runs")
    runner = StudyRunner(space, db_url=f"sqlite:///{tmp_path / 'exp.db'}")
    trial = runner.study.ask()
    suggest(space, trial)
    trial.set_user_attr("host", runner.host)
    trial.set_user_attr("pid", _dead_pid())
    mark_pending(trial, state=TrialState.FAIL, verdict=True)  # died before its row was written
    runner._reap_dead_workers()  # noqa: SLF001
    lost = runner.study.get_trials(deepcopy=False)[trial.number]
    assert lost.state is TrialState.FAIL and not concluded(lost)  # asked again, not counted as a failure
    assert runner.study.get_trials(deepcopy=False, states=(TrialState.WAITING,))


def test_a_result_the_store_cannot_hold_fails_its_trial_with_the_reason_and_is_not_retried(
    tmp_path: Path,
) -> None:
    study = _study(tmp_path)
    trial = study.ask()
    mark_pending(trial, state=TrialState.FAIL, verdict=True)  # the row it was told before was refused
    refused = StoreError("cannot record: Python int too large to convert to SQLite INTEGER")
    with pytest.raises(StoreError, match=r"trial 0: its result could not be recorded .* not launched again"):
        unrecordable(study, trial, refused)
    (told,) = study.get_trials(deepcopy=False)
    assert told.state is TrialState.FAIL and not concluded(told)  # no verdict without its row
    assert "not recorded: cannot record: Python int too large" in told.user_attrs["failure_message"]
    assert not study.get_trials(deepcopy=False, states=(TrialState.WAITING,))


def test_a_fault_of_the_database_itself_is_retried(tmp_path: Path) -> None:
    study = _study(tmp_path)
    trial = study.ask()
    try:
        raise StoreError("experiments database: cannot write: disk I/O error") from sa.exc.OperationalError(
            "INSERT", {}, Exception("disk I/O error")
        )
    except StoreError as exc:
        with pytest.raises(StoreError, match="experiments database: cannot write: disk I/O error"):
            unrecordable(study, trial, exc)  # the fault itself goes on up: it names the database
    (waiting,) = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    assert waiting.user_attrs["retry_reason"] == "not recorded"


def test_retries_are_counted_apart_from_the_configurations_own_failures(tmp_path: Path) -> None:
    study = _study(tmp_path)
    study.enqueue_trial({}, user_attrs={"infra_retries": 4})
    trial = study.ask()
    study.tell(trial, state=TrialState.FAIL)
    retry(study, study.get_trials(deepcopy=False)[0], reason="infra_error")
    (waiting,) = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    assert waiting.user_attrs == {"retry_of": 0, "infra_retries": 5, "retry_reason": "infra_error"}


@pytest.mark.parametrize(
    ("error", "retried"),
    [(RuntimeError("boom"), False), (ReleaseTimeoutError("GPU memory not released after 5 s"), True)],
)
def test_a_launch_that_raises_leaves_its_trial_failed_never_running(
    tmp_path: Path, error: Exception, retried: bool
) -> None:
    space = replace(load_space(ROOT / "search_spaces" / "tiny-fast-sim.yaml"), log_dir=tmp_path / "runs")
    runner = StudyRunner(space, db_url=f"sqlite:///{tmp_path / 'exp.db'}", n_trials=1)

    def execute(*args: object, **kwargs: object) -> object:
        raise error

    runner.execute = execute  # type: ignore[assignment]
    with pytest.raises(type(error)):
        runner.run()
    (told,) = runner.study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
    assert f"not recorded: {type(error).__name__}: {error}" in told.user_attrs["failure_message"]
    assert not runner.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    waiting = runner.study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    assert bool(waiting) is retried
