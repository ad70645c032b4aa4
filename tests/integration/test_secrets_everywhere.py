"""Secrets under every name stay out of every file the tuner writes and every view it prints.

PGPASSWORD, a password in DATABASE_URL, HF_AUTH and a 3-character token: a study with them
runs, and the database, the run folder, `studies --show-space` (still valid YAML), `trial --json`,
the HTML report and the three export formats hold none of them.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tuner.cli import main
from tuner.interrupts import INTERRUPTS

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


def _readable(path: Path) -> str:
    """A written file as text, without the base64 of embedded images: random bytes there spell a
    3-character secret now and then (in a report with its plots inlined, about once in 250 kB)."""
    if path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n":
        return ""
    text = path.read_bytes().decode("utf-8", "replace")
    return re.sub(r"data:image/[a-z+]+;base64,[A-Za-z0-9+/=]+", "data:image", text)


@pytest.fixture
def signals() -> Iterator[None]:
    """`main` installs the stop handlers: put the test runner's back afterwards."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)
    INTERRUPTS.clear()


def _view(tmp: Path, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """A read-only command run in this process (quicker than a new interpreter); its stdout."""
    capsys.readouterr()
    assert main(list(args)) == 0
    return capsys.readouterr().out


def test_no_secret_reaches_a_file_or_a_view(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, signals: None
) -> None:
    space = (ROOT / "search_spaces" / "tiny-fast-sim.yaml").read_text().replace("gpu_busy_policy", ENV, 1)
    (tmp_path / "space.yaml").write_text(space)
    single = _tuner(tmp_path, "trial", "--space", "space.yaml", "--json")
    assert single.returncode == 0, single.stderr[-2000:]
    assert not _leaks(single.stdout + single.stderr)
    assert '"PGPASSWORD": "***"' in single.stdout
    run = _tuner(tmp_path, "run", "--space", "space.yaml", "--db", "exp.db", "--trials", "1", "--plain")
    assert run.returncode == 0, run.stderr[-2000:]
    monkeypatch.chdir(tmp_path)
    shown = _view(tmp_path, capsys, "studies", "--db", "exp.db", "--show-space", "tiny-fast-sim-v1")
    stored = yaml.safe_load(shown)  # still YAML: its workload and SLO lines survive
    assert stored["env"]["PGPASSWORD"] == "***" and stored["bench"]["workload"]["input_len"] == 16
    assert stored["env"]["DATABASE_URL"] == "postgresql://me:***@db.example:5432/x"
    views = [shown]
    for fmt in ("sh", "yaml", "json"):
        views.append(_view(tmp_path, capsys, "export", "--db", "exp.db", "--best", "--format", fmt))
    _view(tmp_path, capsys, "report", "--db", "exp.db", "--html", "r.html")
    assert all(v.strip() for v in views)
    assert not [(i, _leaks(v)) for i, v in enumerate(views) if _leaks(v)]
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p.name != "space.yaml"]
    leaked = [str(p) for p in written if _leaks(_readable(p))]
    assert not leaked, leaked
