"""`make demo` installs what the demo needs (the core package) and nothing of the development extras."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_demo_installs_the_core_only(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    plan = subprocess.run(
        ["make", "-n", "-C", str(ROOT), "demo", f"VENV={venv}"], capture_output=True, text=True, check=True
    ).stdout
    installs = [line for line in plan.splitlines() if "pip install" in line and "--upgrade pip" not in line]
    assert installs == [f"{venv}/bin/python -m pip install -q -e ."], plan
    assert "[dev]" not in plan and "[notebook]" not in plan
    assert f"{venv}/bin/python -m tuner run --space search_spaces/glm5-nvfp4-sm120-sim.yaml" in plan
