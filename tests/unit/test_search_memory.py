"""The memory model and the launch policy: predictions from launches, pruning by rule and prediction."""

from __future__ import annotations

import pytest
from test_search_rules import config, ev

from tuner.config import Outcome
from tuner.search.evidence import Evidence, knobs_of
from tuner.search.memory import fit_memory
from tuner.search.policy import build_policy

TOTAL_MIB = 97_887
WEIGHTS_MIB = 60_000


def launch(trial: int, f: float, graphs: int | None = None) -> Evidence:
    """A launch on a 97,887 MiB GPU: KV = f x total - weights; graphs cost 2 GiB of what is left."""
    kv_mib = f * TOTAL_MIB - WEIGHTS_MIB
    free = TOTAL_MIB - f * TOTAL_MIB - (2048 if graphs else 0)
    base = ev(trial, config(f=f, graphs=graphs), Outcome.OK)
    return Evidence(
        trial=trial, knobs=base.knobs, outcome=Outcome.OK, kv_tokens=int(kv_mib * 10), min_free_mib=int(free)
    )


def test_two_launches_predict_the_line_and_a_shared_slope_serves_other_graph_settings() -> None:
    model = fit_memory([launch(0, 0.80), launch(1, 0.90), launch(2, 0.85, graphs=64)])
    p = model.predict(knobs_of(config(f=0.70)))
    assert p.kv_tokens == pytest.approx((0.70 * TOTAL_MIB - WEIGHTS_MIB) * 10, abs=20)
    assert p.min_free_mib == pytest.approx(TOTAL_MIB * 0.30, abs=5)
    g = model.predict(knobs_of(config(f=0.95, graphs=64)))  # one launch of this setting + the slope
    assert g.min_free_mib == pytest.approx(TOTAL_MIB * 0.05 - 2048, abs=5)
    assert model.predict(knobs_of(config(f=0.9, graphs=8))).kv_tokens is None  # never launched


def test_one_launch_predicts_nothing() -> None:
    assert fit_memory([launch(0, 0.8)]).predict(knobs_of(config(f=0.9))).kv_tokens is None


def test_failures_do_not_enter_the_fit() -> None:
    crashed = Evidence(
        trial=9, knobs=knobs_of(config(f=0.6)), outcome=Outcome.OOM, kv_tokens=1, min_free_mib=1
    )
    model = fit_memory([launch(0, 0.8), launch(1, 0.9), crashed])
    assert model.launches == 2


def test_the_policy_prunes_a_covered_suggestion_with_its_rule_and_evidence() -> None:
    policy = build_policy([ev(4, config(f=0.95, graphs=64), Outcome.OOM, stage="capture")])
    decision = policy.decide(config(f=0.97, graphs=64))
    assert not decision.launch and decision.outcome is Outcome.OOM
    assert decision.rule is not None and decision.rule.evidence == 4 and "trial 4" in decision.reason
    assert policy.decide(config(f=0.9, graphs=64)).launch


def test_the_policy_prunes_what_the_model_says_misses_the_free_vram_floor() -> None:
    policy = build_policy([launch(0, 0.80), launch(1, 0.85)], min_free_mib=8_000)
    miss = policy.decide(config(f=0.95))  # ~4,900 MiB free predicted
    assert (
        not miss.launch
        and miss.outcome is Outcome.SLO_VIOLATION
        and "predicted lowest free VRAM" in miss.reason
    )
    near = policy.decide(config(f=0.915))  # ~8,300 MiB: within the margin, launched
    assert near.launch and near.prediction.min_free_mib is not None
    # kept to what launches proved (the study has nothing else left), a prediction prunes nothing
    proven = build_policy([launch(0, 0.80), launch(1, 0.85)], min_free_mib=8_000, proven_only=True)
    assert proven.decide(config(f=0.95)).launch


def test_pruning_can_be_turned_off() -> None:
    policy = build_policy([ev(0, config(f=0.9), Outcome.OOM, stage="load")], prune=False)
    assert policy.decide(config(f=0.95)).launch
