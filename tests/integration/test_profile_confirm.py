"""`python -m tuner confirm`: repeats are recorded with confirm_of, and the export shows median and spread."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tuner.report.frame import load_study_data, trial_figures

if TYPE_CHECKING:
    from profile_study import ProfileStudy

pytestmark = pytest.mark.integration


def test_confirm_records_three_repeats_and_export_reports_their_spread(
    profile_study: ProfileStudy, tmp_path: Path
) -> None:
    db = profile_study.copy_db(tmp_path / "confirm.db")
    done = profile_study.tuner(
        "confirm",
        "--space",
        str(profile_study.space),
        "--db",
        str(db),
        "--best",
        "--repeats",
        "3",
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    data = load_study_data(f"sqlite:///{db}", profile_study.study)
    originals = [r for r in data.rows if r.confirm_of is None]
    repeats = [r for r in data.rows if r.confirm_of is not None]
    assert len(originals) == len(load_study_data(profile_study.url).rows)
    assert len(repeats) == 3
    (original_id,) = {r.confirm_of for r in repeats}
    original = next(r for r in originals if r.id == original_id)
    assert all(r.config_hash == original.config_hash and r.trial_number is None for r in repeats)
    assert all(r.kv_tokens == original.kv_tokens for r in repeats)  # same launch, same KV pool
    assert "original + 3 repeat(s)" in done.stdout and "n=4" in done.stdout
    # the dashboard's values and attributes of the trial: the same median as every view
    figures = trial_figures(data, original)
    trial = next(t for t in data.trials if t.number == original.trial_number)
    assert trial.values == pytest.approx([figures.values[m] for m in data.metric_names])
    assert trial.user_attrs["measurements"] == 4 == figures.runs
    assert trial.user_attrs["output_throughput"] == pytest.approx(figures.values["output_throughput"])
    assert trial.user_attrs["measured_range"] == figures.spread()

    exported = profile_study.tuner(
        "export", "--db", str(db), "--trial", str(original.trial_number), "--format", "json"
    )
    assert exported.returncode == 0, exported.stderr
    spread = json.loads(exported.stdout)["confirmations"]
    assert spread["repeats"] == 3 and spread["failed"] == []
    tput = spread["spread"]["output_throughput"]
    assert tput["n"] == 4 and tput["min"] <= tput["median"] <= tput["max"]
    assert spread["spread"]["kv_tokens"] == {
        "median": original.kv_tokens,
        "min": original.kv_tokens,
        "max": original.kv_tokens,
        "n": 4,
    }
    script = profile_study.tuner("export", "--db", str(db), "--trial", str(original.trial_number))
    assert "# re-validated: original + 3 repeat(s)" in script.stdout
    assert "#   output throughput: median" in script.stdout and "n=4)" in script.stdout


def test_confirm_refuses_a_space_that_now_renders_another_launch(
    profile_study: ProfileStudy, tmp_path: Path
) -> None:
    changed = tmp_path / "tiny-fast-sim.yaml"
    changed.write_text(
        profile_study.space.read_text().replace("model-path: /models/tiny", "model-path: /models/other")
    )
    db = profile_study.copy_db(tmp_path / "refused.db")  # the shared study stays as it was measured
    done = profile_study.tuner(
        "confirm", "--space", str(changed), "--db", str(db), "--best", "--repeats", "1"
    )
    assert done.returncode == 2
    assert "now renders a different launch" in done.stderr and "Traceback" not in done.stderr
