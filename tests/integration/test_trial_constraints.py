"""`trial` judges a configuration by the space's constraints, as the study does."""

from __future__ import annotations

import json
from pathlib import Path

from support.cli import tiny_space, tuner_in


def test_trial_reports_a_missed_constraint_with_value_and_bound(tmp_path: Path) -> None:
    space = tiny_space(tmp_path)
    text = space.read_text()
    assert "\nconstraints:" not in text
    space.write_text(text + '\nconstraints: ["min_free_vram_mib >= 99999999"]\n')
    done = tuner_in(tmp_path, "trial", "--space", str(space))
    assert done.returncode == 1, done.stdout + done.stderr
    line = done.stdout.strip().splitlines()[-1]
    assert line.startswith("slo_violation (missed min_free_vram_mib = "), line
    assert "bound >= 99,999,999" in line
    as_json = tuner_in(tmp_path, "trial", "--space", str(space), "--json")
    verdict = json.loads(as_json.stdout)["verdict"]
    assert verdict["outcome"] == "slo_violation" and verdict["feasible"] is False
    assert verdict["missed"][0].startswith("min_free_vram_mib = ")
