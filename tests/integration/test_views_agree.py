"""A real study on the simulator, one trial re-measured: status, trials.csv, front.csv, the HTML page
and the export show the same figure for every trial (the median of its measurements)."""

from __future__ import annotations

import csv
import html
import json
import re
import sqlite3
import statistics
from pathlib import Path

import pytest
from support.cli import tiny_space, tuner_in

from tuner.metrics import formatted

pytestmark = pytest.mark.integration


@pytest.mark.timeout(900)  # a study, a confirm and four views, each a subprocess: slow only when busy
def test_every_view_shows_one_figure_per_trial(tmp_path: Path) -> None:
    space = tiny_space(tmp_path)
    run = tuner_in(
        tmp_path, "run", "--space", str(space), "--trials", "4", "--seed", "2", "--plain", timeout_s=600
    )
    assert run.returncode == 0, run.stderr
    con = sqlite3.connect(tmp_path / "experiments.db")
    measured = con.execute(
        "SELECT id, trial_number FROM tuner_trials WHERE outcome IN ('ok', 'slo_violation') "
        "AND confirm_of IS NULL ORDER BY trial_number"
    ).fetchall()
    assert measured, run.stderr
    row_id, number = measured[0]
    confirm = tuner_in(
        tmp_path, "confirm", "--space", str(space), "--trial", str(number), "--repeats", "2", timeout_s=600
    )
    assert confirm.returncode == 0, confirm.stderr
    runs = [
        v
        for (v,) in con.execute(
            "SELECT output_throughput FROM tuner_trials WHERE id = ? OR confirm_of = ?", (row_id, row_id)
        )
    ]
    assert len(runs) == 3
    median = statistics.median(runs)

    report = tuner_in(tmp_path, "report", "--out", "rep", "--html", "report.html", timeout_s=600)
    assert report.returncode == 0, report.stderr
    trials = {int(r["trial"]): r for r in csv.DictReader((tmp_path / "rep" / "trials.csv").open())}
    assert float(trials[number]["output_throughput"]) == pytest.approx(median)
    assert int(trials[number]["runs"]) == 3
    assert float(trials[number]["output_throughput_min"]) == pytest.approx(min(runs))
    page = html.unescape((tmp_path / "report.html").read_text())
    for n, rec in trials.items():
        if rec["output_throughput"]:
            shown = formatted("output_throughput", float(rec["output_throughput"]))
            assert re.search(
                rf"<td class='num'>{n}</td>.*?<td class='num'>{re.escape(shown)}</td>", page, re.S
            )
    status = tuner_in(tmp_path, "status")
    line = next(ln for ln in status.stdout.splitlines() if re.match(rf"\s*{number}\*?\s", ln))
    assert f"{median:,.0f}" in line and "median of 3 runs" in status.stdout

    export = tuner_in(tmp_path, "export", "--best", "--format", "json")
    assert export.returncode == 0, export.stderr
    profile = json.loads(export.stdout)
    chosen = trials[profile["trial"]]
    assert profile["metrics"]["output_throughput"] == pytest.approx(float(chosen["output_throughput"]))
    front = {int(r["trial"]): r for r in csv.DictReader((tmp_path / "rep" / "front.csv").open())}
    listed = [c for c in profile["context"] if c.startswith("  #")]
    assert len(listed) == len({r["output_throughput"] for r in front.values()})
    for n, rec in front.items():
        shown = formatted("output_throughput", float(rec["output_throughput"]))
        mine = [c for c in listed if re.match(rf"  #(\d+,)*{n}[,:]", c)]  # "#1,6:" when #6 reused #1
        assert len(mine) == 1 and f"output throughput {shown} tok/s" in mine[0], listed
        assert float(rec["output_throughput"]) == pytest.approx(float(trials[n]["output_throughput"]))
