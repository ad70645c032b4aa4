"""The command line as a user runs it: `python -m tuner ...` as a subprocess, output captured."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TINY_SPACE = REPO / "search_spaces" / "tiny-fast-sim.yaml"


def tuner_in(cwd: Path, *args: str, timeout_s: float = 120.0) -> subprocess.CompletedProcess[str]:
    """Run `python -m tuner ARGS` in `cwd` and wait for it (a hang past `timeout_s` fails the test)."""
    return subprocess.run(
        [sys.executable, "-m", "tuner", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout_s
    )


def tiny_space(folder: Path, name: str = "space.yaml") -> Path:
    """A copy of search_spaces/tiny-fast-sim.yaml in `folder` (tests may edit or move it)."""
    path = folder / name
    path.write_text(TINY_SPACE.read_text())
    return path
