"""The in-process search benchmark (benchmarks/search_efficiency.py): one scenario, one seed, small budget."""

from __future__ import annotations

import pytest
from search_efficiency import score, split_settings  # benchmarks/ is on the test path (pyproject.toml)
from search_strategies import STRATEGIES
from search_world import World, world

from tuner.config import Outcome

BUDGET = 4  # below what finalists need: a short run, every launch explores


@pytest.fixture(scope="module")
def sm120() -> World:
    return world("glm5-nvfp4-sm120")


def test_the_oracle_world_knows_the_true_best_and_the_failure_causes(sm120: World) -> None:
    assert len(sm120.points) == 320 and sm120.best == pytest.approx(169.4, abs=0.1)
    assert sm120.front_hv > 0
    rules, causes = sm120.failure_causes()
    assert 0 < causes <= rules
    outcomes = {s.failure.outcome for s in sm120.shots if s.failure}
    assert outcomes == {Outcome.NAN, Outcome.GARBAGE, Outcome.OOM}
    capture = next(s for s in sm120.shots if s.failure and s.failure.stage == "capture")
    assert "out of memory" in capture.failure.message.lower() if capture.failure else False


def test_the_tuner_never_launches_into_a_region_an_earlier_failure_proved_bad(sm120: World) -> None:
    run = STRATEGIES["tuner"](sm120, 1, BUDGET)
    s = score(sm120, run, 1)
    assert s.launches == BUDGET  # the run ends at its budget
    assert s.proven_bad == 0
    assert s.asks >= s.launches  # pruned asks spend no launch
    assert 0.0 <= s.hv <= 1.0 + 1e-9 and s.wasted <= BUDGET


@pytest.mark.parametrize("strategy", ["release", "tpe", "random", "grid", "tier", "scoot"])
def test_every_other_strategy_spends_exactly_its_budget(sm120: World, strategy: str) -> None:
    s = score(sm120, STRATEGIES[strategy](sm120, 1, BUDGET), 1)
    assert s.launches == BUDGET and 0 <= s.wasted <= BUDGET and 0.0 <= s.hv <= 1.0 + 1e-9


def test_a_tweak_reads_a_bool_and_a_tuple_as_the_constant_it_sets() -> None:
    from search_efficiency import _tweak

    from tuner.search import feasible, surrogate

    undo = _tweak([("feasible.SPLIT_ROLES", "false"), ("surrogate.LENGTHS", "(0.2, 0.9)")])
    try:
        assert feasible.SPLIT_ROLES is False  # bool("false") would be True
        assert surrogate.LENGTHS == (0.2, 0.9)
    finally:
        for mod, name, old in undo:
            setattr(mod, name, old)
    assert feasible.SPLIT_ROLES is True and surrogate.LENGTHS != (0.2, 0.9)
    with pytest.raises(SystemExit, match="not a bool"):
        _tweak([("feasible.SPLIT_ROLES", "maybe")])


def test_a_variant_setting_may_carry_a_tuple() -> None:
    got = split_settings("strategy.NOISE_SD=(0.01, 0.02),strategy.AVERAGE=true,")
    assert got == ["strategy.NOISE_SD=(0.01, 0.02)", "strategy.AVERAGE=true"]
    assert split_settings("") == []
