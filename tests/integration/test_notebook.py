"""notebooks/pareto.ipynb runs headless against a short study and saves a real Pareto PNG."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from profile_study import ProfileStudy

pytestmark = pytest.mark.integration

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "pareto.ipynb"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_notebook_is_committed_without_outputs() -> None:
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code)
    assert "TUNER_DB" in code[0].source and "TUNER_STUDY" in code[0].source
    sql = re.compile(r"\bSELECT\b.*\bFROM\b|sqlite3|sqlalchemy|create_study|suggest_")
    assert not any(sql.search(c.source) for c in code), (
        "the notebook calls tuner.report.frame/export, nothing lower"
    )


def test_notebook_runs_headless_and_saves_the_pareto_png(
    profile_study: ProfileStudy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("TUNER_DB", profile_study.url)
    monkeypatch.setenv("TUNER_STUDY", profile_study.study)
    monkeypatch.setenv("TUNER_PLOT_DIR", str(tmp_path / "plots"))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()  # raises CellExecutionError naming the cell if any cell fails
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    png = tmp_path / "plots" / "pareto.png"
    data = png.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 10_000
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width > 400 and height > 300
    script = (tmp_path / "plots" / "launch.sh").read_text()
    assert script.startswith("#!/usr/bin/env bash") and "exec " in script


def test_report_command_writes_tables_and_plots(profile_study: ProfileStudy, tmp_path: Path) -> None:
    done = profile_study.tuner("report", "--db", str(profile_study.db), "--out", str(tmp_path / "r"))
    assert done.returncode == 0, done.stderr
    names = {p.name for p in (tmp_path / "r").iterdir()}
    assert {"trials.csv", "front.csv", "failures.csv", "pareto.png", "history.png", "latency.png"} <= names
    assert os.path.getsize(tmp_path / "r" / "pareto.png") > 10_000
