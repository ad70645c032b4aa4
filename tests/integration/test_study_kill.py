"""Kill `python -m tuner run` at every phase, run it again: the study completes exactly, nothing is left.

The run is a real process driving real simulator servers over HTTP. It is
killed (SIGKILL: no chance to clean up; SIGINT: graceful) when its plain
output says it reached a phase, then the same command is run again.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import optuna
import psutil
import pytest
from optuna.trial import TrialState
from support.cli import tiny_space

from tuner.store.sql import SqlStore
from tuner.study import finalists

# SIGKILL and SIGINT of whole studies at every stage, and two workers: they run with the storms (make chaos)
pytestmark = [pytest.mark.integration, pytest.mark.chaos]

ROOT = Path(__file__).resolve().parents[2]
BUDGET = 2


def _start(tmp: Path) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "tuner", "run", "--space", str(tiny_space(tmp)),
           "--db", str(tmp / "exp.db"), "--trials", str(BUDGET), "--plain"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(cmd, cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)


def _lines_until(proc: subprocess.Popen[str], marker: str, timeout_s: float = 60.0) -> Iterator[str]:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    for line in proc.stdout:
        yield line
        if marker in line:
            return
        if time.monotonic() > deadline:
            break
    raise AssertionError(f"{marker!r} never appeared")


def _sim_processes(tmp: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            cmd = proc.info["cmdline"] or []
            ours = "tuner.sim" in cmd and str(tmp) in proc.environ().get("TUNER_SIM_STATE_DIR", "")
            if ours and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def _finish(tmp: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "tuner", "run", "--space", str(tmp / "space.yaml"),
         "--db", str(tmp / "exp.db"), "--trials", str(BUDGET), "--plain"],
        cwd=tmp, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stderr


def _check_study(tmp: Path) -> None:
    url = f"sqlite:///{tmp / 'exp.db'}"
    study = optuna.load_study(study_name="tiny-fast-sim-v1", storage=url)
    states = [t.state for t in study.trials]
    assert states.count(TrialState.COMPLETE) == BUDGET
    assert TrialState.RUNNING not in states and TrialState.WAITING not in states
    rows = SqlStore(url).trials("tiny-fast-sim-v1")
    numbers = [r.trial_number for r in rows]
    assert len(numbers) == len(set(numbers)), f"duplicated rows: {numbers}"
    complete = {t.number for t in study.trials if t.state is TrialState.COMPLETE}
    assert complete <= set(numbers), "a finished trial has no row"
    assert not _sim_processes(tmp), "a server survived"
    assert not list((tmp / "runs").glob("*/live/*.json")), "a live-server record was left"


@pytest.mark.parametrize("marker", ["trial 0: launch", "trial 0: gate", "trial 0: bench", "trial 0: teardown",
                                    "trial 0: ok"])
def test_sigkill_then_rerun_completes_exactly(tmp_path: Path, marker: str) -> None:
    proc = _start(tmp_path)
    for _ in _lines_until(proc, marker):
        pass
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    _finish(tmp_path)
    _check_study(tmp_path)


@pytest.mark.parametrize("marker", ["trial 0: gate", "trial 0: bench"])
def test_sigint_tears_down_records_interrupted_and_resumes(tmp_path: Path, marker: str) -> None:
    proc = _start(tmp_path)
    for _ in _lines_until(proc, marker):
        pass
    os.kill(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    assert not _sim_processes(tmp_path), "SIGINT left a server running"
    rows = SqlStore(f"sqlite:///{tmp_path / 'exp.db'}").trials("tiny-fast-sim-v1")
    assert [r.outcome.value for r in rows] == ["interrupted"]
    _finish(tmp_path)
    _check_study(tmp_path)


def test_two_workers_share_one_study(tmp_path: Path) -> None:
    space = tiny_space(tmp_path)
    cmd = [sys.executable, "-m", "tuner", "run", "--space", str(space),
           "--db", str(tmp_path / "exp.db"), "--trials", "4", "--plain"]
    workers = [subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True) for _ in range(2)]
    outputs = [w.communicate(timeout=180)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0], outputs
    url = f"sqlite:///{tmp_path / 'exp.db'}"
    study = optuna.load_study(study_name="tiny-fast-sim-v1", storage=url)
    # the budget counts launches: a finalist's repeat (two trials within the margin, noise decides)
    # takes a trial's place, and a reused configuration is told without one
    state = study.user_attrs.get(finalists.STATE_ATTR) or {}
    assert finalists.launch_counts(study.get_trials(deepcopy=False), state) == (4, 0)
    assert all(t.state is TrialState.COMPLETE for t in study.trials)
    rows = SqlStore(url).trials("tiny-fast-sim-v1")
    # one row per trial; a finalist's repeat is a row of its own, linked to the trial's (confirm_of)
    numbers = [r.trial_number for r in rows if r.confirm_of is None]
    assert None not in numbers and len(numbers) == len(set(numbers))
    assert all(r.trial_number is None and r.confirm_of in {x.id for x in rows} for r in rows if r.confirm_of)
