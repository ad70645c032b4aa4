"""Untried configurations: enqueued when the sampler keeps suggesting measured ones; the stop
message counts what is left."""

from __future__ import annotations

import random
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import optuna
import pytest

from tuner.config import TrialConfig
from tuner.space import load_space
from tuner.space.loader import SearchSpace, config_from_params
from tuner.space.params import ParamKind
from tuner.study import fill

ROOT = Path(__file__).resolve().parents[2]
SPACE = load_space(ROOT / "tests" / "fixtures" / "spaces" / "tiny-failing-sim.yaml")  # 10 x 3 x 6 = 180


def every_config(space: SearchSpace) -> list[TrialConfig]:
    return [config_from_params(space, p) for p in fill._enumerate(space)]


def test_the_untried_configuration_is_the_one_never_asked() -> None:
    configs = every_config(SPACE)
    assert len(configs) == len(set(configs)) == 180
    last = configs[97]
    params, left = fill.untried(SPACE, [c for c in configs if c != last], lambda c: True, random.Random(1))
    assert params is not None and config_from_params(SPACE, params) == last
    assert (left.total, left.untried, left.asked, left.ruled_out, left.forbidden) == (180, 1, 179, 0, 0)


def test_nothing_left_counts_what_was_asked_and_what_the_rules_cover() -> None:
    configs = every_config(SPACE)
    asked = configs[:100]

    def runs(c: TrialConfig) -> bool:
        return c.sparse_prefill_backend != "fa3"

    params, left = fill.untried(SPACE, asked, runs, random.Random(1))
    assert params is not None and runs(config_from_params(SPACE, params))
    rest = [c for c in configs[100:] if runs(c)]
    params, left = fill.untried(SPACE, asked + rest, runs, random.Random(1))
    assert params is None and left.untried == 0 and left.asked == 100 + len(rest)
    assert left.ruled_out == 180 - left.asked and left.total == 180
    assert "180 configurations" in left.describe() and "0 are left" in left.describe()


def test_the_draw_is_seeded_and_spread_over_the_untried() -> None:
    draws = [fill.untried(SPACE, [], lambda c: True, random.Random(s))[0] for s in range(20)]
    assert draws[3] == fill.untried(SPACE, [], lambda c: True, random.Random(3))[0]
    assert len({str(d) for d in draws}) > 15


def test_a_continuous_space_is_drawn_from_at_random() -> None:
    params = [replace(p, step=None) if p.kind is ParamKind.FLOAT else p for p in SPACE.params]
    space = replace(SPACE, params=tuple(params))
    found, left = fill.untried(space, [], lambda c: True, random.Random(2))
    assert found is not None and left.total is None and left.untried == 1
    found, left = fill.untried(space, [], lambda c: False, random.Random(2))
    assert found is None and left.ruled_out == fill.DRAWS and "random draws" in left.describe()


class Stuck(optuna.samplers.BaseSampler):
    """A sampler that suggests the same configuration on every ask (the stall, at its worst)."""

    def infer_relative_search_space(self, study: Any, trial: Any) -> dict[str, Any]:
        return {}

    def sample_relative(self, study: Any, trial: Any, search_space: Any) -> dict[str, Any]:
        return {}

    def sample_independent(self, study: Any, trial: Any, name: str, distribution: Any) -> Any:
        if isinstance(distribution, optuna.distributions.CategoricalDistribution):
            return distribution.choices[0]
        return distribution.low


def test_a_study_whose_sampler_repeats_itself_spends_its_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from search_strategies import run_tuner
    from search_world import world

    import tuner.study.runner as runner

    monkeypatch.setattr(runner, "make_sampler", lambda space, seed=None, budget=None: Stuck())
    w = world("tiny-fast")
    run = run_tuner(w, 1, 4, finalists=False)
    assert len(run.steps) == 4 and run.note == ""  # the budget, though the sampler repeats itself
    assert run.extra["reused"] >= fill.FILL_IN_AFTER  # the repeats were reused, not launched
    assert len({s.shot.key for s in run.steps}) == 4  # no launch twice


def test_a_study_that_asked_for_every_configuration_stops_saying_what_is_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from search_strategies import run_tuner
    from search_world import world

    import tuner.study.runner as runner

    monkeypatch.setattr(runner, "make_sampler", lambda space, seed=None, budget=None: Stuck())
    w = world("tiny-fast")
    small = {"mem-fraction-static": {"low": 0.85, "high": 0.9}, "cuda_graph": {"choices": ("off", "max:8")},
             "chunked-prefill-size": {"choices": (None,)}}  # fmt: skip
    params = tuple(replace(p, **small[p.name]) for p in w.space.params)
    w.space = replace(w.space, params=params, baselines=())
    run = run_tuner(w, 1, 10, finalists=False)
    assert len(run.steps) == 4  # the whole space, once each
    assert "of the space's 4 configurations, 4 were asked before" in run.note and "0 are left" in run.note


def test_rules_wider_than_their_failures_that_leave_nothing_are_narrowed_and_the_search_goes_on(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A NaN in captured graphs rules the pair out eagerly too (inferred); where that leaves nothing to
    launch, the study keeps its rules to what the failure showed and launches eager decode."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from search_strategies import run_tuner
    from search_world import World

    import tuner.study.runner as runner

    scenario = (ROOT / "tests" / "fixtures" / "scenarios" / "tiny-failing.yaml").read_text()
    nan = "  flashmla_sparse:\n    behaviour: nan\n"
    assert nan in scenario
    graph_nan = nan + "    nan_min_batch: 1\n    nan_graph_only: true\n"
    (tmp_path / "scenario.yaml").write_text(scenario.replace(nan, graph_nan))
    space = (ROOT / "tests" / "fixtures" / "spaces" / "tiny-failing-sim.yaml").read_text()
    space = space.replace("../scenarios/tiny-failing.yaml", str(tmp_path / "scenario.yaml"))
    space = space.replace("low: 0.50\n    high: 0.95", "low: 0.80\n    high: 0.85")
    space = space.replace("choices: [off, 8, 16]", "choices: [16, 'off']")
    space = space.replace("choices: [trtllm/trtllm, fa3/trtllm, fa3/fa3, trtllm/fa3, flashmla_sparse/trtllm, "
                          "trtllm/flashmla_sparse]", "choices: [trtllm/flashmla_sparse]")  # fmt: skip
    space = space.replace("cuda_graph: off, sparse_backends: trtllm/trtllm", "cuda_graph: 16, "
                          "sparse_backends: trtllm/flashmla_sparse")  # fmt: skip
    (tmp_path / "space.yaml").write_text(space)
    monkeypatch.setattr(runner, "make_sampler", lambda space, seed=None, budget=None: Stuck())
    w = World(tmp_path / "space.yaml")
    assert len(w.points) == 4
    run = run_tuner(w, 1, 4, finalists=False)
    outcomes = [(s.config.cuda_graph.enabled, s.shot.failure is None) for s in run.steps]
    assert outcomes[0] == (True, False)  # graphs of 16: NaN
    # eager decode at both fractions, which the inferred rule covered, was launched and ran; graphs of 16
    # at the other fraction stay ruled out (the failure showed that much)
    assert sorted(outcomes[1:]) == [(False, True), (False, True)]
    assert "3 were asked before, 1 are ruled out" in run.note
