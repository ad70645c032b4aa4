"""Which attention backends SGLang ships kernels for, per GPU, and the support prior the search takes
from it (a prior, never a rule: a launch that runs wins over the table)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import optuna
import pytest
from support.stored import make_result

from tuner.objectives import judge
from tuner.search import feasible
from tuner.search.acquire import log_norm_cdf
from tuner.search.feasible import Mechanism, Outcome, log_p_feasible, support_prior
from tuner.search.sampler import _support, space_candidates
from tuner.sglang.backend_support import built_for, sm_major
from tuner.space.loader import load_space, suggest
from tuner.space.sampling import sampler_params
from tuner.study.learn import evidence_attrs

ROOT = Path(__file__).resolve().parents[2]
SM120 = ROOT / "search_spaces" / "glm5-nvfp4-sm120-sim.yaml"


@pytest.mark.parametrize(
    ("capability", "major"),
    [("9.0", 9), ("12.0", 12), ("10.3", 10), ("gfx942", None), ("", None), (None, None)],
)
def test_the_cuda_major_is_read_from_a_compute_capability_and_nothing_else(
    capability: str | None, major: int | None
) -> None:
    assert sm_major(capability) == major


def test_the_table_says_what_sglang_ships_per_architecture() -> None:
    assert built_for("fa3", 9) is True and built_for("fa3", 10) is False and built_for("fa3", 12) is False
    assert (
        built_for("trtllm", 10) is True
        and built_for("trtllm", 9) is False
        and built_for("trtllm", 12) is False
    )
    assert built_for("flashmla_sparse", 12) is False and built_for("flashmla_kv", 9) is True
    assert built_for("tilelang", 12) is True and built_for("triton", 12) is True
    assert built_for("aiter", 9) is False  # ROCm code
    assert built_for("some_new_backend", 9) is None and built_for("fa3", None) is None


def test_the_prior_is_low_for_a_pair_with_a_backend_not_built_for_the_gpu() -> None:
    prior = support_prior([(True,), (False,), (True, False), (None,)])
    p = [float(np.exp(log_p_feasible_of(m))) for m in prior]
    assert p[0] == pytest.approx(feasible.BUILT_P, abs=1e-6)
    assert p[1] == pytest.approx(feasible.NOT_BUILT_P, abs=1e-6)
    assert p[2] == pytest.approx(feasible.BUILT_P * feasible.NOT_BUILT_P, abs=1e-6)
    assert p[3] >= feasible.BUILT_P  # nothing known: the plain prior, as sure as a built backend


def log_p_feasible_of(label_mean: float) -> float:
    return float(log_norm_cdf(np.asarray([label_mean / np.sqrt(feasible.LABEL_NOISE)]))[0])


def _study_with(space_path: Path, launches: list[tuple[str, str | None, bool]]) -> optuna.Study:
    space = load_space(space_path)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(directions=["maximize", "maximize"])
    for pair, capability, ok in launches:
        params = {"mem-fraction-static": 0.85, "cuda_graph": "off", "sparse_backends": pair}
        study.enqueue_trial(sampler_params(space, params))
        trial = study.ask()
        suggest(space, trial)
        trial.set_user_attr("compute_capability", capability)
        trial.set_user_attr("outcome", "ok" if ok else "unsupported")
        trial.set_user_attr("failure", None if ok else "unsupported")
        trial.set_user_attr("feasible", ok)
        if ok:
            study.tell(trial, [1000.0, 1e5])
        else:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
    return study


def test_the_sampler_takes_the_gpu_from_the_launches_and_prefers_backends_built_for_it() -> None:
    space = load_space(SM120)
    found, features = space_candidates(space)
    unknown = _study_with(SM120, [("tilelang/tilelang", None, True)])
    assert _support(found, unknown.get_trials(deepcopy=False)) is None  # no launch told its GPU
    study = _study_with(SM120, [("tilelang/tilelang", "12.0", True)])
    prior = _support(found, study.get_trials(deepcopy=False))
    assert prior is not None
    pairs = [str(p["sparse_backends"]) for p in found.params]
    rows = list(range(len(pairs)))
    log_p = log_p_feasible(
        features, found.blocks, [], features, priors={Mechanism.SUPPORT: prior}, test_rows=rows
    )
    by_pair: dict[str, float] = {}
    for pair, lp in zip(pairs, log_p, strict=True):
        by_pair[pair] = max(by_pair.get(pair, -np.inf), float(np.exp(lp)))
    for pair in ("trtllm/trtllm", "flashmla_kv/flashmla_kv", "flashmla_sparse/flashmla_kv"):
        assert by_pair[pair] < 0.3 * by_pair["tilelang/tilelang"], pair


def test_a_launch_that_ran_outweighs_the_table() -> None:
    space = load_space(SM120)
    found, features = space_candidates(space)
    study = _study_with(SM120, [("tilelang/tilelang", "12.0", True)])
    prior = _support(found, study.get_trials(deepcopy=False))
    assert prior is not None
    pairs = [str(p["sparse_backends"]) for p in found.params]
    ran = next(i for i, p in enumerate(pairs) if p == "trtllm/trtllm")
    failed = next(i for i, p in enumerate(pairs) if p == "tilelang/tilelang")
    seen = [Outcome(index=ran, failed=None), Outcome(index=failed, failed=Mechanism.SUPPORT)]
    rows = [
        i
        for i, p in enumerate(pairs)
        if p in ("trtllm/trtllm", "tilelang/tilelang") and i not in (ran, failed)
    ]
    log_p = log_p_feasible(
        features, found.blocks, seen, features.take(rows), priors={Mechanism.SUPPORT: prior}, test_rows=rows
    )
    p = {pairs[i]: float(np.exp(v)) for i, v in zip(rows, log_p, strict=True)}
    assert p["trtllm/trtllm"] > p["tilelang/tilelang"]


def test_a_launched_trial_keeps_the_gpu_it_ran_on() -> None:
    result = make_result()
    attrs = evidence_attrs(result, judge(result, (), ()))
    assert attrs["compute_capability"] == "12.0"
    bare = replace(result, gpus=())
    assert evidence_attrs(bare, judge(bare, (), ()))["compute_capability"] is None
