"""The stages after a study's launches that measure capacity (tuner/study/stages.run_after runs them)."""

from __future__ import annotations

from tuner.study.stages import AfterStage, StudyEnd


class FinalistsCapacity:
    """`search.finalists.capacity`: the SLO capacity of each finalist (else of the --best choice)."""

    name = "finalists' capacity"

    def wanted(self, end: StudyEnd) -> bool:
        return bool(end.space.search.finalists.capacity)

    def run(self, end: StudyEnd) -> list[str]:
        from tuner.capacity.run import finalists_capacity

        done = finalists_capacity(end.space, db_url=end.db_url, study=end.study, stores=end.stores)
        return [f"capacity {record.line()}" for record in done]


AFTER_STUDY: tuple[AfterStage, ...] = (FinalistsCapacity(),)
