"""A study whose objective is the SLO capacity, on the simulator: killed with SIGKILL inside a trial's
load search, run again, it resumes the search from the stored points (none lost, none measured
again), and the export says the capacity and what bound it."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SPACE = ROOT / "search_spaces" / "tiny-capacity-sim.yaml"
BUDGET = 2
KILL_AFTER = 3  # stored load points


def _cmd(tmp: Path) -> list[str]:
    return [sys.executable, "-m", "tuner", "run", "--space", str(tmp / "space.yaml"),
            "--db", str(tmp / "exp.db"), "--trials", str(BUDGET), "--plain"]  # fmt: skip


def _points(db: Path) -> list[tuple[str, float]]:
    if not db.exists():
        return []
    try:
        con = sqlite3.connect(db, timeout=1)
        try:
            rows = con.execute("SELECT config_hash, load FROM tuner_capacity_points ORDER BY id").fetchall()
        finally:
            con.close()
    except sqlite3.OperationalError:  # the table is not there yet, or the writer holds the lock
        return []
    return [(str(h), float(x)) for h, x in rows]


@pytest.mark.timeout(600)
@pytest.mark.chaos  # a SIGKILL inside a load search, then a resume: run with the storms (make chaos)
def test_sigkill_inside_a_load_search_resumes_it_without_losing_or_repeating_points(tmp_path: Path) -> None:
    (tmp_path / "space.yaml").write_text(SPACE.read_text())
    db = tmp_path / "exp.db"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(_cmd(tmp_path), cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 240
    while len(_points(db)) < KILL_AFTER and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before its load search was killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)
    before = _points(db)
    assert len(before) >= KILL_AFTER
    first_hash = before[0][0]
    assert all(h == first_hash for h, _ in before), "killed inside the first launch's search"

    done = subprocess.run(_cmd(tmp_path), cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    after = _points(db)
    assert after[: len(before)] == before, "a stored point was lost"
    resumed = [x for h, x in after[len(before) :] if h == first_hash]
    far = [x for _, x in before[:-1]]  # cold-start bracketing loads, far below any boundary: one run each
    assert not set(far) & set(resumed), f"measured again after the restart: {sorted(set(far) & set(resumed))}"
    assert resumed and before[0][1] not in resumed, "the search started over"
    assert len(before) + len(resumed) <= 10 + 1  # max_runs, and one closing run at the capacity at most

    study = optuna.load_study(study_name="tiny-capacity-sim-v1", storage=f"sqlite:///{db}")
    states = [t.state for t in study.trials]
    assert states.count(TrialState.COMPLETE) == BUDGET and TrialState.RUNNING not in states
    assert study.user_attrs.get("objective_spec", [{}])[0].get("capacity", {}).get("load") == "request_rate"
    con = sqlite3.connect(db)
    stored = con.execute("SELECT config_hash, capacity, outcome FROM tuner_capacity").fetchall()
    assert first_hash in {h for h, _, _ in stored} and all(o == "ok" for _, _, o in stored)
    export = subprocess.run([sys.executable, "-m", "tuner", "export", "--best", "--db", str(db),
                             "--space", str(tmp_path / "space.yaml")], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert export.returncode == 0, export.stderr
    line = next(x for x in export.stdout.splitlines() if x.startswith("# capacity under SLO:"))
    assert " req/s within ttft_p99_ms<=300, tpot_p99_ms<=40, bound by " in line, line


@pytest.mark.timeout(300)
def test_one_trial_of_a_capacity_space_measures_its_capacity(tmp_path: Path) -> None:
    (tmp_path / "space.yaml").write_text(SPACE.read_text())
    done = subprocess.run([sys.executable, "-m", "tuner", "trial", "--space", str(tmp_path / "space.yaml")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=240)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    line = done.stdout.strip().splitlines()[-1]
    assert line.startswith("ok ") and " capacity_request_rate=" in line, line
    assert not (tmp_path / "experiments.db").exists()  # one trial stores nothing
