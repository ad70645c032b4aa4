"""One short study on the simulator, made once per test session and shared.

The `profile_study` fixture is registered for every test by tests/conftest.py;
import names from here only under TYPE_CHECKING (an earlier import would keep
pytest from rewriting this module's asserts).

`python -m tuner run` on search_spaces/tiny-fast-sim.yaml, 4 trials, as a real
subprocess, in a session temp folder (its runs/ folder holds the simulator's
GPU state). Tests that add rows (confirm) work on `copy_db()`. The finalists are
off in this study: whether two of its trials land within their margin is up to the
machine's noise, and a repeat would take a trial's place in the budget.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SPACE = REPO / "search_spaces" / "tiny-fast-sim.yaml"
TRIALS = 4


@dataclass(frozen=True)
class ProfileStudy:
    """Where the shared study lives."""

    workdir: Path
    db: Path
    study: str
    space: Path = SPACE

    @property
    def url(self) -> str:
        return f"sqlite:///{self.db}"

    def tuner(
        self, *args: str, timeout: float = 120, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """`python -m tuner ARGS`, run in the study's folder (where its runs/ folder is)."""
        return tuner(*args, cwd=self.workdir, timeout=timeout, env=env)

    def copy_db(self, dest: Path) -> Path:
        """A consistent copy (WAL included) for a test that writes."""
        src = sqlite3.connect(self.db)
        dst = sqlite3.connect(dest)
        try:
            src.backup(dst)
        finally:
            src.close()
            dst.close()
        return dest


def tuner(
    *args: str, cwd: Path, timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`python -m tuner ARGS` as the user would run it."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "tuner", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
    )


@pytest.fixture(scope="session")
def profile_study(tmp_path_factory: pytest.TempPathFactory) -> ProfileStudy:
    workdir = tmp_path_factory.mktemp("profile-study")
    db = workdir / "experiments.db"
    data = yaml.safe_load(SPACE.read_text())
    data.setdefault("search", {})["finalists"] = {"count": 0}
    space = workdir / SPACE.name
    space.write_text(yaml.safe_dump(data, sort_keys=False))
    done = tuner(
        "run",
        "--space",
        str(space),
        "--db",
        str(db),
        "--trials",
        str(TRIALS),
        "--plain",
        cwd=workdir,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return ProfileStudy(workdir=workdir, db=db, study="tiny-fast-sim-v1", space=space)
