"""The simulator's attention backends for a dense model (no sparse attention): per-backend speed by
phase and batch, backends of another GPU architecture unsupported, NaN needing backend x graphs x
batch; the shipped Llama-3-70B landscape is decided by the backend pair."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from tuner.errors import ConfigError
from tuner.sim.landscape import best, evaluate
from tuner.sim.oracle import Outcome
from tuner.sim.resolve import Launch
from tuner.sim.scenario import Scenario, load_scenario, parse_scenario
from tuner.sim.spacefile import launch_from_argv, read_space

ROOT = Path(__file__).resolve().parents[2]
SPACE = ROOT / "search_spaces" / "llama3-70b-h200-sim.yaml"


@pytest.fixture(scope="module")
def llama() -> Scenario:
    return load_scenario("llama3-70b-h200-tp4")


def _launch(scenario: Scenario, *argv: str) -> Launch:
    return launch_from_argv(scenario, "0.5.23", ["--model-path", "/m", "--tp-size", "4", *argv])


def test_each_phase_runs_at_its_own_backend_speed(llama: Scenario) -> None:
    fa3 = _launch(llama, "--attention-backend", "fa3")
    mixed = _launch(llama, "--prefill-attention-backend", "fa3", "--decode-attention-backend", "flashinfer")
    default = _launch(llama)
    assert (fa3.prefill_backend, fa3.decode_backend) == ("fa3", "fa3")
    assert (mixed.prefill_backend, mixed.decode_backend) == ("fa3", "flashinfer")
    assert fa3.prefill_factor == mixed.prefill_factor == 0.8
    assert fa3.decode_factor_at(8) < mixed.decode_factor_at(8)  # fa3 decodes faster at small batches
    assert fa3.decode_factor_at(128) > mixed.decode_factor_at(128)  # flashinfer at large ones
    assert default.prefill_factor == 1.0 and default.behaviour == "ok"


def test_a_backend_of_another_architecture_is_unsupported(llama: Scenario) -> None:
    trt = _launch(llama, "--attention-backend", "trtllm_mha")
    assert trt.behaviour == "unsupported" and "Blackwell" in trt.unsupported_error
    half = _launch(llama, "--prefill-attention-backend", "fa3", "--decode-attention-backend", "fa4")
    assert half.behaviour == "unsupported" and "SM10x" in half.unsupported_error
    raw = yaml.safe_load((ROOT / "tuner/sim/scenarios/llama3-70b-h200-tp4.yaml").read_text())
    blackwell = copy.deepcopy(raw)
    blackwell["gpus"]["compute_capability"] = "10.0"
    b200 = parse_scenario(blackwell, "b200")
    assert _launch(b200, "--attention-backend", "trtllm_mha").behaviour == "ok"
    assert _launch(b200, "--attention-backend", "fa3").behaviour == "unsupported"


def test_nan_needs_the_backend_a_graph_and_a_large_batch(llama: Scenario) -> None:
    flashinfer = _launch(llama, "--attention-backend", "flashinfer")
    assert flashinfer.nan_at(256, graph=True)
    assert not flashinfer.nan_at(256, graph=False) and not flashinfer.nan_at(255, graph=True)
    assert not _launch(llama, "--attention-backend", "fa3").nan_at(512, graph=True)


def test_a_bad_architecture_list_is_one_line() -> None:
    raw = yaml.safe_load((ROOT / "tuner/sim/scenarios/llama3-70b-h200-tp4.yaml").read_text())
    raw["backends"]["fa3"]["sm_majors"] = "nine"
    with pytest.raises(ConfigError, match=r"backends\.fa3\.sm_majors"):
        parse_scenario(raw, "bad.yaml")


def test_the_shipped_dense_landscape_is_decided_by_the_backend_pair() -> None:
    space = read_space(SPACE)
    scored = evaluate(space, space.scenario())
    top = best(scored)
    assert top is not None
    outcomes = {s.prediction.outcome for s in scored}
    assert {Outcome.OK, Outcome.NAN, Outcome.UNSUPPORTED} <= outcomes
    by_pair: dict[str, float] = {}
    for s in scored:
        if s.prediction.outcome is Outcome.OK:
            pair = str(s.point["attention_backends"])
            by_pair[pair] = max(by_pair.get(pair, 0.0), s.prediction.output_tok_s)
    assert len(by_pair) >= 4
    # fa3 prefills fastest, flashinfer decodes a busy batch fastest: the mixed pair beats both alone
    assert top.point["attention_backends"] == "fa3/flashinfer"
    assert by_pair["fa3/flashinfer"] > 1.05 * max(by_pair["fa3/fa3"], by_pair["flashinfer/flashinfer"])


def test_the_shipped_dense_space_loads_and_renders_the_pair() -> None:
    from tuner.space import load_space
    from tuner.space.sampling import config_from_params

    space = load_space(SPACE)
    config = config_from_params(
        space, {"mem-fraction-static": 0.9, "cuda_graph": "max:128", "attention_backends": "fa3/flashinfer"}
    )
    assert ("prefill-attention-backend", "fa3") in config.flags
    assert read_space(SPACE).argv(
        {"mem-fraction-static": 0.9, "cuda_graph": "max:128", "attention_backends": "fa3/fa3"}
    )[-2:] == ["--attention-backend", "fa3"]
