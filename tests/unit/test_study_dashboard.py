"""optuna-dashboard (0.21) reads feasibility only from Optuna's older `constraints` system attribute."""

from __future__ import annotations

from pathlib import Path

import optuna
from optuna.study._constrained_optimization import _CONSTRAINTS_KEY
from optuna.trial import TrialState

from tuner.config import Outcome
from tuner.search.policy import Decision
from tuner.search.told import concluded, measured_values
from tuner.space import load_space
from tuner.space.loader import config_from_params
from tuner.store.sql import SqlStore
from tuner.study.asks import Fate, classify
from tuner.study.tell import Teller, not_launched

SPACE = load_space(Path(__file__).resolve().parents[1] / "fixtures" / "spaces" / "tiny-failing-sim.yaml")


def test_failed_and_pruned_asks_carry_the_list_the_dashboard_greys_them_by(tmp_path: Path) -> None:
    study = optuna.create_study(directions=["maximize", "maximize"])
    store = SqlStore(f"sqlite:///{tmp_path}/e.db")
    teller = Teller(study, store, SPACE, tmp_path)
    params = dict(SPACE.baselines[0]) if SPACE.baselines else {}
    config = config_from_params(SPACE, params)
    failed = study.ask()
    teller.launched(failed, not_launched(config, "0.5.9", Outcome.OOM, "CUDA out of memory"), params, "h1")
    pruned = study.ask()
    decision = Decision(
        launch=False, reason="too much memory", outcome=Outcome.OOM, rule=None, prediction=None
    )
    teller.pruned(pruned, config, params, "h2", decision, "0.5.9")
    for t in study.get_trials():
        listed = t.system_attrs[_CONSTRAINTS_KEY]
        named = {k: v for k, v in t.constraints.items() if not k.isdigit()}
        assert listed == list(named.values()) and any(v > 0 for v in listed)
    assert study.best_trials == []  # Optuna's own view of feasibility is unchanged
    # the dashboard's attributes name each ask's fate in the words of every other view
    assert [t.user_attrs["fate"] for t in study.get_trials()] == ["failed", "pruned by the memory model"]
    # no placeholder values: a failed launch is FAIL, an ask that launched nothing PRUNED, each a verdict
    trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.PRUNED]
    assert all(t.values is None and concluded(t) and measured_values(t) is None for t in trials)
    fates = [a.fate for a in classify(trials, store.trials(study.study_name))]
    assert fates == [Fate.FAILED, Fate.PRUNED_MEMORY]
    store.close()


def test_an_earlier_releases_placeholder_values_are_no_measurement() -> None:
    old = optuna.trial.create_trial(values=[0.0, 0.0], user_attrs={"outcome": "oom", "feasible": False})
    ok = optuna.trial.create_trial(values=[5.0, 9.0], user_attrs={"outcome": "ok", "feasible": True})
    assert concluded(old) and measured_values(old) is None and measured_values(ok) == (5.0, 9.0)
    retried = optuna.trial.create_trial(state=TrialState.FAIL, user_attrs={"pending_tell": {"state": "FAIL"}})
    assert not concluded(retried)  # a FAIL without a verdict: asked again, not a result
