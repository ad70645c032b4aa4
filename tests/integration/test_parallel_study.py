"""`run --parallel 4` on a simulated 8-GPU node with a TP-2 space: four trials at once on disjoint GPUs.

The parent is a real `python -m tuner run` process; its workers are real `run --gpus SET`
processes driving real simulator servers, which publish per-GPU memory in the state files
by the CUDA_VISIBLE_DEVICES the tuner gave them. The run is stopped with SIGTERM while the
first four trials run, then resumed to the end of its budget.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import psutil
import pytest
from optuna.trial import TrialState

from tuner.store.rows import StoredTrial
from tuner.store.sql import SqlStore
from tuner.study.learn import launched as was_launched

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SPACE = ROOT / "tests" / "fixtures" / "spaces" / "tiny-tp2-8gpu-sim.yaml"
STUDY = "tiny-tp2-8gpu-sim-v1"
BUDGET = 4  # one round of four after the stop: the test stays short
TOTAL_MIB = 81559


def _cmd(tmp: Path) -> list[str]:
    return [sys.executable, "-m", "tuner", "run", "--space", str(SPACE), "--db", str(tmp / "exp.db"),
            "--parallel", "4", "--trials", str(BUDGET), "--plain"]


def _ours(tmp: Path) -> list[psutil.Process]:
    """Live processes of this test's study: workers and servers (found by their command or state dir)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            cmd = " ".join(proc.info["cmdline"] or [])
            env = proc.environ() if "tuner" in cmd else {}
            mine = str(tmp) in cmd or str(tmp) in env.get("TUNER_SIM_STATE_DIR", "")
            if mine and proc.pid != os.getpid() and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def _overlap(a: StoredTrial, b: StoredTrial) -> bool:
    return a.started_at < b.finished_at and b.started_at < a.finished_at


def _most_at_once(rows: list[StoredTrial]) -> int:
    edges = sorted([(r.started_at, 1) for r in rows] + [(r.finished_at, -1) for r in rows])
    now = most = 0
    for _, step in edges:  # at equal times an end (-1) sorts first: touching is not overlapping
        now += step
        most = max(most, now)
    return most


def _gpus(row: StoredTrial) -> tuple[int, ...]:
    assert row.launch is not None
    return tuple(row.launch["gpus"])


@pytest.mark.chaos  # four workers stopped and resumed: run with the storms (make chaos)
def test_parallel_four_tp2_trials_on_eight_gpus_stop_and_resume(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(_cmd(tmp_path), cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    assert proc.stdout is not None
    seen: list[str] = []
    serving: set[str] = set()  # workers whose server is ready and whose trial has not ended
    deadline = time.monotonic() + 150  # generous: a loaded 2-core machine starts five Pythons slowly
    for line in proc.stdout:  # stop once all four workers have a server up at the same time
        seen.append(line)
        worker = line.split("]")[0]
        if ": launch ready" in line or re.search(r"\] trial \d+: (gate|bench) ", line):
            serving.add(worker)  # its server is up (the ready line can be skipped when start-up is quick)
        elif re.search(r"\] trial \d+: (?!render|wait_gpus|launch|gate|bench|teardown)", line):
            serving.discard(worker)  # the trial ended (its outcome line)
        if len(serving) == 4 or time.monotonic() > deadline:
            break
    assert len(serving) == 4, "".join(seen)
    os.kill(proc.pid, signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, "".join(seen) + out
    assert not _ours(tmp_path), "a worker or a server survived SIGTERM of the parent"
    url = f"sqlite:///{tmp_path / 'exp.db'}"
    first = SqlStore(url).trials(STUDY)
    assert "interrupted" in {r.outcome.value for r in first}, out

    done = subprocess.run(_cmd(tmp_path), cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr

    study = optuna.load_study(study_name=STUDY, storage=url)
    states = [t.state for t in study.trials]
    launched = [
        t for t in study.trials
        if t.state is TrialState.COMPLETE and was_launched(t.user_attrs)
    ]
    assert len(launched) == BUDGET, "the budget is not exact"
    assert TrialState.RUNNING not in states and TrialState.WAITING not in states
    rows = [r for r in SqlStore(url).trials(STUDY) if r.launch is not None]
    for row in rows:
        gpus = _gpus(row)
        assert len(gpus) == 2 and set(gpus) <= set(range(8))
        if row.outcome.value == "ok":  # the server really held memory on the GPUs it was given
            assert row.min_free_mib_per_gpu is not None and max(row.min_free_mib_per_gpu) < TOTAL_MIB - 1000
            assert [g["index"] for g in row.gpus] == list(gpus)
    for a in rows:
        for b in rows:
            if a.id < b.id and _overlap(a, b):
                shared = set(_gpus(a)) & set(_gpus(b))
                assert not shared, f"trials {a.trial_number} and {b.trial_number} overlap on GPUs {shared}"
    assert _most_at_once(rows) == 4, "four trials never ran at once"
    assert not _ours(tmp_path), "a worker or a server was left behind"
    assert not list((tmp_path / "runs").glob("*/live/*.json")), "a live-server record was left"
