"""Secrets under every name stay out of every file the tuner writes and every view it prints.

PGPASSWORD, a password in DATABASE_URL, HF_AUTH and a 3-character token: a study with them
runs, and the database, the run folder, `studies --show-space` (still valid YAML), `trial --json`,
the HTML report and the three export formats hold none of them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SECRETS = ("pg-Secret-1", "dbpw-Secret-2", "hfa-Secret-3", "Q7z")
ENV = (
    "env:\n"
    '  PGPASSWORD: "pg-Secret-1"\n'
    '  DATABASE_URL: "postgresql://me:dbpw-Secret-2@db.example:5432/x"\n'
    '  HF_AUTH: "hfa-Secret-3"\n'
    '  MY_TOKEN: "Q7z"\n'
    "gpu_busy_policy"
)


def _tuner(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tuner", *args], cwd=tmp, capture_output=True, text=True, timeout=120
    )


def _leaks(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


def test_no_secret_reaches_a_file_or_a_view(tmp_path: Path) -> None:
    space = (ROOT / "search_spaces" / "tiny-fast-sim.yaml").read_text().replace("gpu_busy_policy", ENV, 1)
    (tmp_path / "space.yaml").write_text(space)
    single = _tuner(tmp_path, "trial", "--space", "space.yaml", "--json")
    assert single.returncode == 0, single.stderr[-2000:]
    assert not _leaks(single.stdout + single.stderr)
    assert '"PGPASSWORD": "***"' in single.stdout
    run = _tuner(tmp_path, "run", "--space", "space.yaml", "--db", "exp.db", "--trials", "1", "--plain")
    assert run.returncode == 0, run.stderr[-2000:]
    shown = _tuner(tmp_path, "studies", "--db", "exp.db", "--show-space", "tiny-fast-sim-v1")
    stored = yaml.safe_load(shown.stdout)  # still YAML: its workload and SLO lines survive
    assert stored["env"]["PGPASSWORD"] == "***" and stored["bench"]["workload"]["input_len"] == 16
    assert stored["env"]["DATABASE_URL"] == "postgresql://me:***@db.example:5432/x"
    views = [shown.stdout]
    for fmt in ("sh", "yaml", "json"):
        views.append(_tuner(tmp_path, "export", "--db", "exp.db", "--best", "--format", fmt).stdout)
    assert _tuner(tmp_path, "report", "--db", "exp.db", "--html", "r.html").returncode == 0
    assert all(v.strip() for v in views)
    assert not [(i, _leaks(v)) for i, v in enumerate(views) if _leaks(v)]
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p.name != "space.yaml"]
    leaked = [str(p) for p in written if _leaks(p.read_bytes().decode("utf-8", "replace"))]
    assert not leaked, leaked
