"""Reference agreement against real simulator servers: record from a good one, catch a late drift."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.cli import tuner_in
from support.sim import REPO

pytestmark = pytest.mark.integration

TINY = ["--model-path", "/models/tiny", "--sim-seed", "1"]




def test_a_drift_late_in_the_answer_fails_the_reference_check(sim_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    good, drifting = sim_factory(*TINY), sim_factory(*TINY, "--sim-inject", "drift_at=20")
    good.wait_ready()
    drifting.wait_ready()
    space = tmp_path / "space.yaml"
    space.write_text((REPO / "search_spaces" / "tiny-fast-sim.yaml").read_text())
    refs = tmp_path / "refs.json"
    recorded = tuner_in(REPO, "gate", "--url", good.url, "--space", str(space), "--record", str(refs))
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    assert len(json.loads(refs.read_text())["answers"]) == 5
    same = tuner_in(REPO, "gate", "--url", good.url, "--space", str(space), "--reference", str(refs))
    assert same.returncode == 0 and "agrees of 64" in same.stdout, same.stdout
    given = ("--space", str(space), "--reference", str(refs), "--json")
    bad = tuner_in(REPO, "gate", "--url", drifting.url, *given)
    assert bad.returncode == 1
    result = json.loads(bad.stdout)
    assert result["verdict"] == "wrong_answer"
    assert "first differs at token 20 of 64" in result["reason"]
    assert {a["first_mismatch"] for a in result["reference"]["agreements"]} == {20}
