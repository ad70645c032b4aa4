"""Goodput and SLO attainment stored with every measured trial of a space with latency constraints."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from support.cli import tiny_space, tuner_in

from tuner.report.goodput import goodput_of
from tuner.store.sql import SqlStore

pytestmark = pytest.mark.integration


def test_a_study_with_latency_constraints_stores_each_trials_goodput(tmp_path: Path) -> None:
    space = tiny_space(tmp_path)
    bounds = '["ttft_p99_ms <= 100000", "tpot_p99_ms <= 100000", "slo_attainment >= 0.5"]'
    space.write_text(space.read_text() + f"\nconstraints: {bounds}\n")
    db = tmp_path / "exp.db"
    done = tuner_in(tmp_path, "run", "--space", str(space), "--db", str(db), "--trials", "2", "--plain")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [r for r in SqlStore(f"sqlite:///{db}").trials("tiny-fast-sim-v1") if r.outcome.measured]
    assert rows and all(r.feasible for r in rows)  # bounds no request misses: every one is good
    with SqlStore(f"sqlite:///{db}") as store:
        for row in rows:
            goodput, attained = row.metrics["request_goodput"], row.metrics["slo_attainment"]
            assert attained == 1.0 and goodput == pytest.approx(row.metrics["request_throughput"])
            duration = next(p["metrics"]["duration_s"] for p in (row.bench or {})["points"])
            again = goodput_of(store.requests(row.id), {"ttft": 100000.0, "tpot": 100000.0}, duration)
            assert again is not None and again.request_goodput == pytest.approx(goodput)
    con = sqlite3.connect(db)
    stored = con.execute("SELECT request_goodput, slo_attainment FROM tuner_trials").fetchall()
    con.close()
    assert stored and all(g is not None and a == 1.0 for g, a in stored)
    status = tuner_in(tmp_path, "report", "--db", str(db), "--out", str(tmp_path / "report"))
    assert status.returncode == 0, status.stderr
    assert "request_goodput" in (tmp_path / "report" / "trials.csv").read_text().splitlines()[0]
