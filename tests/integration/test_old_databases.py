"""Databases written by earlier releases open with this code: status, report, export, then resume.

The fixtures (tests/fixtures/databases, how they were made: its README) are real studies on
tiny-fast-sim written by earlier releases. Each is copied, shown, exported (and the current
release's reported) and resumed by one trial; the row written now carries every metric column.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from support.cli import tiny_space

from tuner.cli import main
from tuner.metrics import BENCH_METRICS
from tuner.search.rules import covering, derive_rules
from tuner.space import load_space
from tuner.store.schema import SCHEMA_VERSION
from tuner.study.learn import study_evidence

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "databases"
STUDY = "tiny-fast-sim-v1"
FAILING = "tiny-failing-sim-v1"


def _copy(name: str, tmp_path: Path) -> Path:
    db = tmp_path / "experiments.db"
    shutil.copyfile(FIXTURES / name, db)
    return db


def _move_stored_space(db: Path, space: Path) -> None:
    """The study's space file as its user keeps it: at a path of this machine."""
    con = sqlite3.connect(db)
    with con:
        moved = json.dumps(str(space))
        con.execute("UPDATE study_user_attributes SET value_json = ? WHERE key = 'space_path'", (moved,))
    con.close()


def _query(db: Path, sql: str) -> list[tuple[object, ...]]:
    con = sqlite3.connect(db)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def _show_and_export(db: Path, trials: int, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--db", str(db)]) == 0
    shown = capsys.readouterr().out
    assert f"study {STUDY}: " in shown and f"of {trials} asks shown" in shown and "Pareto front" in shown
    assert main(["export", "--db", str(db), "--format", "sh"]) == 0
    assert "--mem-fraction-static" in capsys.readouterr().out


def _resumed(db: Path, old: int) -> None:
    assert _query(db, "SELECT version FROM tuner_schema") == [(SCHEMA_VERSION,)]
    rows = _query(db, "SELECT trial_number, output_throughput FROM tuner_trials ORDER BY id")
    # the old trials, and one more launch: a new trial, or a finalist's repeat (a row of no trial)
    assert [r[0] for r in rows[:old]] == list(range(old)) and len(rows) == old + 1
    assert rows[-1][0] in (old, None)
    assert isinstance(rows[-1][1], float) and rows[-1][1] > 0
    columns = {r[1] for r in _query(db, "PRAGMA table_info(tuner_trials)")}
    assert set(BENCH_METRICS) <= columns


@pytest.mark.parametrize("name", ["v1-f66fd35.db", "v2-161f982.db"])
def test_a_database_without_a_stored_space_opens_and_resumes_with_it(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    db = _copy(name, tmp_path)
    _show_and_export(db, 3, capsys)
    assert main(["run", "--space", str(tiny_space(tmp_path)), "--trials", "4"]) == 0
    _resumed(db, 3)


def test_the_current_release_database_resumes_with_run_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    db = _copy("v2-cd5d975.db", tmp_path)
    _move_stored_space(db, tiny_space(tmp_path))
    _show_and_export(db, 5, capsys)
    assert main(["report", "--db", str(db), "--out", str(tmp_path / "report")]) == 0
    assert (tmp_path / "report" / "trials.csv").is_file()
    assert main(["run"]) == 0  # to the stored space's budget of 6
    assert f"resuming study {STUDY} (5/6 launches" in capsys.readouterr().err
    _resumed(db, 5)


def test_a_database_missing_a_metric_column_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """As after an upgrade that added a metric: the column is added on open, old rows hold None."""
    monkeypatch.chdir(tmp_path)
    db = _copy("v2-cd5d975.db", tmp_path)
    _move_stored_space(db, tiny_space(tmp_path))
    con = sqlite3.connect(db)
    with con:
        con.execute("ALTER TABLE tuner_trials DROP COLUMN tpot_p99_ms")
    con.close()
    _show_and_export(db, 5, capsys)
    assert main(["run"]) == 0
    _resumed(db, 5)
    values = [r[0] for r in _query(db, "SELECT tpot_p99_ms FROM tuner_trials ORDER BY id")]
    assert values[:5] == [None] * 5 and isinstance(values[5], float)


def test_an_earlier_releases_failures_with_placeholder_values_stay_off_the_front_and_teach_the_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its failed and pruned asks are COMPLETE with values [0, 0]: never best, still evidence."""
    monkeypatch.chdir(tmp_path)
    db = _copy("v2-d30288c-failures.db", tmp_path)
    space = ROOT / "tests" / "fixtures" / "spaces" / "tiny-failing-sim.yaml"
    _move_stored_space(db, space)
    url = f"sqlite:///{db}"
    old = optuna.load_study(study_name=FAILING, storage=url).get_trials()
    zeros = {t.number for t in old if t.state is TrialState.COMPLETE and not any(t.values)}
    assert zeros and len(zeros) < len(old)  # what the earlier release wrote
    assert main(["status", "--db", str(db)]) == 0
    front = capsys.readouterr().out.rsplit("Pareto front", 1)[1]
    shown = {int(n) for n in front.split("trials [", 1)[1].split("]", 1)[0].split(",")}
    assert shown and not shown & zeros
    assert main(["export", "--db", str(db), "--best", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["trial"] not in zeros
    assert main(["run", "--space", str(space), "--trials", "8", "--plain"]) == 0
    assert "8/8 launches finished" in capsys.readouterr().out  # its 5 launches counted, failures included
    study = optuna.load_study(study_name=FAILING, storage=url)
    assert not {t.number for t in study.best_trials} & zeros
    new = study.get_trials()[len(old):]
    assert new and all(t.values is None or any(t.values) for t in new)  # no placeholder values now
    evidence = study_evidence(load_space(space), study.get_trials())
    for i, ev in enumerate(evidence):  # the old failures' rules keep holding over the resumed launches
        if ev.trial >= len(old):
            assert covering(derive_rules(evidence[:i]), ev.knobs) is None, ev
