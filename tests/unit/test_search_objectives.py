"""The finalists and warm start read the study's own objectives and directions (any metric)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import FrozenTrial, TrialState, create_trial

from tuner.space.goals import Objective
from tuner.space.loader import load_space
from tuner.study.finalists import pick_finalists
from tuner.study.warm import ordered

ROOT = Path(__file__).resolve().parents[2]
PAIRS = [
    (("output_throughput", "maximize"), ("kv_tokens", "maximize")),
    (("output_throughput", "maximize"), ("ttft_p99_ms", "minimize")),
    (("ttft_p99_ms", "minimize"), ("output_throughput", "maximize")),
    (("tpot_p50_ms", "minimize"), ("output_throughput_per_gpu", "maximize")),
    (("output_throughput_per_user", "maximize"), ("e2e_p99_ms", "minimize")),
]


def _trial(number: int, values: list[float], **attrs: object) -> FrozenTrial:
    t = create_trial(
        params={"mem-fraction-static": 0.8 + 0.01 * number},
        distributions={"mem-fraction-static": FloatDistribution(0.5, 0.99)},
        values=values,
        user_attrs={"feasible": True, **attrs},
        state=TrialState.COMPLETE,
    )
    t.number = number
    return t


def _better(direction: str, a: float, b: float) -> bool:
    return a > b if direction == "maximize" else a < b


@pytest.mark.parametrize(("first", "second"), PAIRS)
def test_finalists_are_the_best_by_the_declared_first_objective_within_the_margin(
    first: tuple[str, str], second: tuple[str, str]
) -> None:
    sign = 1.0 if first[1] == "maximize" else -1.0
    best = 1000.0
    trials = [
        _trial(0, [best, 50.0]),
        _trial(1, [best * (1 - 0.02 * sign), 80.0]),  # 2% worse on the first, better or not on the second
        _trial(2, [best * (1 - 0.2 * sign), 90.0]),  # 20% worse on the first: not contested
    ]
    picks = pick_finalists(trials, [first[1], second[1]], 3, margin=0.05)
    assert 2 not in picks and 0 in picks and 1 in picks


@pytest.mark.parametrize(("first", "second"), PAIRS)
def test_warm_start_enqueues_the_earlier_study_best_first_by_this_study_objectives(
    first: tuple[str, str], second: tuple[str, str]
) -> None:
    space = load_space(ROOT / "search_spaces" / "dsv32-fp8-h200-sim.yaml")
    space = replace(space, objectives=(Objective(metric=first[0], direction=first[1]),
                                       Objective(metric=second[0], direction=second[1])))  # fmt: skip
    names = [first[0], second[0]]
    # the earlier study optimised the same two metrics: trial 2 dominates, trial 0 is dominated
    good, bad = (900.0, 300.0) if first[1] == "maximize" else (300.0, 900.0)
    good2, bad2 = (900.0, 300.0) if second[1] == "maximize" else (300.0, 900.0)
    trials = [_trial(0, [bad, bad2]), _trial(1, [good, bad2]), _trial(2, [good, good2])]
    assert [t.number for t in ordered(trials, names, space)][0] == 2
    assert [t.number for t in ordered(trials, names, space)][-1] == 0
    # an earlier study with other objectives: the values come from the metrics its trials recorded
    other = [_trial(n, [1.0, 1.0], **{first[0]: v1, second[0]: v2})
             for n, (v1, v2) in enumerate(((bad, bad2), (good, good2), (good, bad2)))]  # fmt: skip
    got = [t.number for t in ordered(other, ["request_throughput", "kv_tokens"], space)]
    assert got[0] == 1 and got[-1] == 0
    assert _better(first[1], good, bad)
