"""Backend pairs: every pair the sampler asks for is one the space allows (the prefill backend, then a
decode backend the space pairs with it); studies whose decode backend was sampled over all of them
(`name.decode`) still resume and warm-start."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import TrialState, create_trial

from tuner.space import load_space
from tuner.space.sampling import forbidden_reason, joined_params, sampler_params, suggest
from tuner.study.storage import make_sampler
from tuner.study.warm import WarmStart

SPACE = load_space(Path(__file__).resolve().parents[1] / "fixtures" / "spaces" / "tiny-failing-sim.yaml")
PAIRS = ("trtllm/trtllm", "fa3/trtllm", "fa3/fa3", "trtllm/fa3", "flashmla_sparse/trtllm",
         "trtllm/flashmla_sparse")  # fmt: skip
PER_ROLE = {
    "mem-fraction-static": FloatDistribution(0.5, 0.95, step=0.05),
    "cuda_graph": CategoricalDistribution(["off", "max:8", "max:16"]),
    "sparse_backends.prefill": CategoricalDistribution(["trtllm", "fa3", "flashmla_sparse"]),
    "sparse_backends.decode": CategoricalDistribution(["trtllm", "fa3", "flashmla_sparse"]),
}


def old_trial(prefill: str, decode: str, value: float) -> optuna.trial.FrozenTrial:
    """A trial as an earlier release recorded it: the pair sampled per role."""
    params = {"mem-fraction-static": 0.8, "cuda_graph": "off", "sparse_backends.prefill": prefill,
              "sparse_backends.decode": decode}  # fmt: skip
    return create_trial(
        params=params, distributions=PER_ROLE, values=[value, 1000.0], state=TrialState.COMPLETE,
        user_attrs={"feasible": True, "outcome": "ok"},
    )  # fmt: skip


@pytest.mark.parametrize("kind", ["tpe", "random"])
def test_every_pair_asked_is_one_the_space_allows(kind: str) -> None:
    space = SPACE
    if kind == "random":
        space = replace(SPACE, sampler=SPACE.sampler.model_copy(update={"kind": "random"}))
    study = optuna.create_study(directions=["maximize", "maximize"], sampler=make_sampler(space, seed=3))
    seen = set()
    for i in range(60):
        trial = study.ask()
        _, params = suggest(space, trial)
        assert forbidden_reason(space, params) is None
        assert params["sparse_backends"] in PAIRS
        prefill, decode = params["sparse_backends"].split("/")
        assert trial.params == {**trial.params, "sparse_backends.prefill": prefill,
                                f"sparse_backends.decode.{prefill}": decode}  # fmt: skip
        assert joined_params(space, trial.params) == params
        seen.add(params["sparse_backends"])
        study.tell(trial, [float(i % 7), 1.0])
    assert len(seen) == len(PAIRS)  # every pair reachable, including those a per-role ask rarely drew


def test_a_study_sampled_per_role_resumes_with_its_trials_joined() -> None:
    study = optuna.create_study(directions=["maximize", "maximize"], sampler=make_sampler(SPACE, seed=1))
    for i, (prefill, decode) in enumerate([("trtllm", "trtllm"), ("fa3", "trtllm"), ("fa3", "fa3")] * 3):
        study.add_trial(old_trial(prefill, decode, 100.0 + i))
    for frozen in study.trials:
        assert joined_params(SPACE, frozen.params)["sparse_backends"] in PAIRS
    for _ in range(10):  # the sampler mixes the old trials' params with the new pair param
        trial = study.ask()
        _, params = suggest(SPACE, trial)
        assert forbidden_reason(SPACE, params) is None
        study.tell(trial, [1.0, 1.0])


def test_a_trial_enqueued_per_role_is_asked_per_role() -> None:
    study = optuna.create_study(directions=["maximize", "maximize"])
    enqueued = {"mem-fraction-static": 0.7, "cuda_graph": "max:8", "sparse_backends.prefill": "fa3",
                "sparse_backends.decode": "trtllm"}  # fmt: skip
    study.enqueue_trial(enqueued)
    trial = study.ask()
    fixed = study.trials[trial.number].system_attrs.get("fixed_params")
    config, params = suggest(SPACE, trial, fixed=fixed)
    assert params["sparse_backends"] == "fa3/trtllm" and config.sparse_prefill_backend == "fa3"
    assert sampler_params(SPACE, enqueued) == {"mem-fraction-static": 0.7, "cuda_graph": "max:8",
                                               "sparse_backends.prefill": "fa3",
                                               "sparse_backends.decode.fa3": "trtllm"}  # fmt: skip
    study.enqueue_trial(sampler_params(SPACE, enqueued))  # enqueued now: asked the way it is sampled now
    trial = study.ask()
    fixed = study.trials[trial.number].system_attrs.get("fixed_params")
    _, params = suggest(SPACE, trial, fixed=fixed)
    assert params["sparse_backends"] == "fa3/trtllm" and "sparse_backends.decode" not in trial.params


def test_warm_start_from_a_study_sampled_per_role(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/old.db"
    old = optuna.create_study(study_name="old", storage=url, directions=["maximize", "maximize"])
    old.add_trial(old_trial("fa3", "trtllm", 120.0))
    warm = WarmStart(url=url, study="old")
    (ev,) = warm.evidence(SPACE)
    assert (ev.knobs.prefill, ev.knobs.decode) == ("fa3", "trtllm")
    study = optuna.create_study(directions=["maximize", "maximize"])
    study.enqueue_trial(sampler_params(SPACE, joined_params(SPACE, old.trials[0].params)))
    trial = study.ask()
    _, params = suggest(SPACE, trial, fixed=study.trials[0].system_attrs.get("fixed_params"))
    assert params["sparse_backends"] == "fa3/trtllm"
