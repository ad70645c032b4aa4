"""`run --parallel 2` runs the study's stages after its launches, as a single worker's `run` does: with
`search.finalists.capacity` the capacity of the best trial is measured and stored once both workers end."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SPACE = ROOT / "tests" / "fixtures" / "spaces" / "tiny-tp2-8gpu-sim.yaml"
SCENARIO = ROOT / "tests" / "fixtures" / "scenarios" / "tiny-8gpu.yaml"


def _space(tmp: Path) -> Path:
    """Two TP-1 workers on two simulated GPUs, short benchmarks, one SLO and the finalists' capacity."""
    text = SPACE.read_text()
    for old, new in (
        ("scenario: ../scenarios/tiny-8gpu.yaml", f"scenario: {SCENARIO}"),
        ("tp-size: 2", "tp-size: 1"),
        ("gpus: [0, 1, 2, 3, 4, 5, 6, 7]", "gpus: [0, 1]"),
        ("parallel: 4", "parallel: 2"),
        ("output_len: 48", "output_len: 8"),
        ("num_prompts: 40", "num_prompts: 8"),
        ("finalists: {count: 0}", "finalists: {count: 0, capacity: true}"),
        ("\nbudget:", '\nconstraints: ["ttft_p99_ms <= 2000"]\n\nbudget:'),
    ):
        assert old in text, old
        text = text.replace(old, new)
    path = tmp / "space.yaml"
    path.write_text(text)
    return path


@pytest.mark.chaos  # two workers, then a whole capacity search (1-3 min): run with the storms (make chaos)
@pytest.mark.timeout(600)
def test_parallel_workers_then_the_finalists_capacity(tmp_path: Path) -> None:
    db = tmp_path / "exp.db"
    cmd = [sys.executable, "-m", "tuner", "run", "--space", str(_space(tmp_path)), "--db", str(db),
           "--trials", "2", "--plain"]  # fmt: skip
    run = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=500)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "2 workers on GPUs 0 | 1" in run.stderr
    con = sqlite3.connect(db)
    try:
        rows = con.execute(
            "SELECT trial_number, config_hash FROM tuner_trials WHERE confirm_of IS NULL"
        ).fetchall()
        measured = con.execute("SELECT config_hash, outcome, slos FROM tuner_capacity").fetchall()
    finally:
        con.close()
    assert len(rows) == 2
    assert len(measured) == 1 and measured[0][0] in {h for _, h in rows}
    assert measured[0][1] == "ok" and "ttft_p99_ms<=2000" in measured[0][2]
    assert "capacity #" in run.stdout
