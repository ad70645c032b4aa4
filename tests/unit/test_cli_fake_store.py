"""The commands open their store through the opener `main` is handed: `status`, `studies` and `report`
run on a FakeStore, and their database file never gains a tuner table (only Optuna's, read by URL)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from support.fakes import FakeStore
from support.stored import record

from tuner.cli import main
from tuner.store.capacity import CapacityRecord
from tuner.store.protocol import ResultStore


class Opener:
    """A StoreOpener handing out one FakeStore (its URL the command's) and counting what it opened."""

    def __init__(self) -> None:
        self.store = FakeStore()
        self.asked: list[tuple[str, bool]] = []

    def __call__(self, url: str, *, create: bool = True) -> ResultStore:
        self.asked.append((url, create))
        self.store.url = url  # Optuna's trials are read from the same URL (none here)
        return self.store  # type: ignore[return-value]  # a ResultStore by its shape


def _tuner_tables(db: Path) -> list[str]:
    if not db.exists():
        return []
    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'tuner%'")
        return [r[0] for r in rows]
    finally:
        con.close()


@pytest.fixture
def opener() -> Opener:
    made = Opener()
    row = record(made.store, trial_number=0)  # type: ignore[arg-type]
    made.store.save_capacity(
        CapacityRecord(
            study="glm5-v1", trial_number=0, row_id=row, config_hash="h1", knob="request_rate",
            slos=("ttft_p99_ms<=2000",), capacity=6.5, outcome="ok",
            points=({"load": 6.5, "passed": True, "runs": 1}, {"load": 9.0, "passed": False, "runs": 1,
                     "why": "ttft_p99_ms=2,400 (want <=2000)", "limits": ["slo:ttft_p99_ms<=2000"]}),
        )
    )  # fmt: skip
    return made


def test_status_shows_the_trials_and_capacity_of_the_store_it_is_handed(
    opener: Opener, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "exp.db"
    assert main(["status", "--db", str(db)], stores=opener) == 0
    shown = capsys.readouterr().out
    assert "study glm5-v1" in shown and "capacity under SLO: #0: 6.5 req/s" in shown
    assert opener.asked and all(create is False for _, create in opener.asked)
    assert _tuner_tables(db) == []


def test_studies_lists_the_studies_of_the_store_it_is_handed(
    opener: Opener, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record(opener.store, study="other-v1", trial_number=0, config_hash="h2")  # type: ignore[arg-type]
    db = tmp_path / "exp.db"
    assert main(["studies", "--db", str(db)], stores=opener) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[0] for line in lines] == ["glm5-v1", "other-v1"]
    assert _tuner_tables(db) == []


def test_report_writes_its_files_from_the_store_it_is_handed(
    opener: Opener, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "exp.db"
    db.touch()  # the report refuses a SQLite file that does not exist before it opens anything
    out = tmp_path / "report"
    assert main(["report", "--db", str(db), "--out", str(out)], stores=opener) == 0
    written = {p.name for p in out.iterdir()}
    assert {"trials.csv", "capacity.csv", "capacity_0.png"} <= written
    assert "6.5" in (out / "capacity.csv").read_text()
    assert _tuner_tables(db) == []
