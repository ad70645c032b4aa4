"""`tuner capacity` on the simulator: relaunch the best trial, bisect load points, store and show it."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _tuner(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tuner", *args], cwd=tmp, capture_output=True, text=True, timeout=180
    )


@pytest.mark.timeout(900)  # five commands, each a subprocess with its own limit: slow only on a busy machine
def test_capacity_of_the_best_trial_is_stored_beside_it_and_shown(tmp_path: Path) -> None:
    space = tmp_path / "space.yaml"
    text = (ROOT / "search_spaces" / "tiny-fast-sim.yaml").read_text()
    space.write_text(text.replace("\nbudget:", '\nconstraints: ["ttft_p99_ms <= 500"]\n\nbudget:'))
    run = _tuner(tmp_path, "run", "--space", str(space), "--trials", "1", "--plain")
    assert run.returncode == 0, run.stderr
    db = tmp_path / "experiments.db"
    before = sqlite3.connect(db).execute("SELECT count(*) FROM tuner_trials").fetchone()
    cap = _tuner(
        tmp_path, "capacity", "--space", str(space), "--best", "--start", "4",
        "--max-points", "3", "--repeats", "1", "--prompts", "12",
    )  # fmt: skip
    assert cap.returncode == 0, cap.stderr
    line = (
        "capacity #0: at least 16 req/s (no load measured failed) within ttft_p99_ms<=500 (3 loads measured"
    )
    assert line in cap.stdout
    assert "4 req/s: ttft_p99_ms=" in cap.stderr  # each load point as it is measured
    con = sqlite3.connect(db)
    assert con.execute("SELECT count(*) FROM tuner_trials").fetchone() == before  # the trial is left as is
    assert con.execute("SELECT capacity, knob FROM tuner_capacity").fetchall() == [(16.0, "request_rate")]
    status = _tuner(tmp_path, "status")
    assert "capacity under SLO: #0: at least 16 req/s" in status.stdout
    export = _tuner(tmp_path, "export", "--best")
    assert (
        "# capacity under SLO: #0: at least 16 req/s" in export.stdout
        and "loads: 4 pass, 8 pass, 16 pass" in export.stdout
    )
