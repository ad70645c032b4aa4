"""`python -m tuner run` with no --space resumes the database's unfinished study, and says which."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.cli import tuner_in

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]




def test_run_alone_resumes_from_the_stored_space(tmp_path: Path) -> None:
    space = tmp_path / "space.yaml"
    space.write_text((ROOT / "search_spaces" / "tiny-fast-sim.yaml").read_text())
    db = str(tmp_path / "experiments.db")
    first = tuner_in(tmp_path, "run", "--space", str(space), "--trials", "1", "--seed", "3", "--plain")
    assert first.returncode == 0, first.stderr
    again = tuner_in(tmp_path, "run", "--trials", "2", "--plain")
    assert again.returncode == 0, again.stderr
    assert f"resuming study tiny-fast-sim-v1 (1/6 launches; space {space})" in again.stderr
    assert "2/2 launches finished" in again.stdout
    space.write_text(space.read_text().replace("input_len: 16", "input_len: 32"))
    changed = tuner_in(tmp_path, "run", "--db", db, "--plain")
    assert changed.returncode == 2
    why = "changed since study 'tiny-fast-sim-v1' began (bench.workload.input_len: 16 -> 32)"
    assert why in changed.stderr


def test_a_bare_run_on_a_finished_study_exits_0_with_its_summary(tmp_path: Path) -> None:
    space = tmp_path / "space.yaml"
    text = (ROOT / "search_spaces" / "tiny-fast-sim.yaml").read_text()
    space.write_text(text.replace("n_trials: 6", "n_trials: 1"))
    first = tuner_in(tmp_path, "run", "--space", str(space), "--seed", "3", "--plain")
    assert first.returncode == 0, first.stderr
    again = tuner_in(tmp_path, "run", "--plain")
    assert again.returncode == 0, again.stderr
    assert "error" not in again.stderr
    assert "is complete" in again.stderr and "1/1 launches finished" in again.stdout
    assert "Pareto front" in again.stdout  # the summary, as `run --space` prints it
    with_space = tuner_in(tmp_path, "run", "--space", str(space), "--plain")
    assert with_space.returncode == 0 and "1/1 launches finished" in with_space.stdout
