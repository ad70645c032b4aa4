"""The stages after a study's launches: run in order when wanted, none after a stop."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tuner.capacity.stage import AFTER_STUDY, FinalistsCapacity
from tuner.space.loader import load_space
from tuner.study.stages import StudyEnd, run_after

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Noted:
    name: str
    want: bool
    ran: list[str] = field(default_factory=list)

    def wanted(self, end: StudyEnd) -> bool:
        return self.want

    def run(self, end: StudyEnd) -> list[str]:
        self.ran.append(end.study)
        return [f"{self.name} of {end.study}"]


def _end(interrupted: bool = False) -> StudyEnd:
    space = load_space(ROOT / "search_spaces" / "tiny-fast-sim.yaml")
    return StudyEnd(space=space, db_url="sqlite://", study="s-v1", interrupted=interrupted)


def test_wanted_stages_run_in_order_and_say_what_they_did() -> None:
    first, skipped, last = Noted("a", True), Noted("b", False), Noted("c", True)
    assert run_after([first, skipped, last], _end()) == ["a of s-v1", "c of s-v1"]
    assert skipped.ran == []


def test_no_stage_runs_after_an_interrupted_study() -> None:
    stage = Noted("a", True)
    assert run_after([stage], _end(interrupted=True)) == [] and stage.ran == []


def test_the_finalists_capacity_is_a_stage_the_space_asks_for() -> None:
    end = _end()
    assert any(isinstance(s, FinalistsCapacity) for s in AFTER_STUDY)
    assert not FinalistsCapacity().wanted(end)
    search = end.space.search.model_copy(
        update={"finalists": end.space.search.finalists.model_copy(update={"capacity": True})}
    )
    from dataclasses import replace

    assert FinalistsCapacity().wanted(replace(end, space=replace(end.space, search=search)))
