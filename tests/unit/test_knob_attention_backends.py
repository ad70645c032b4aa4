"""The attention backend pair as a knob object: read and checked per release at its line, sampled
as a pair the space allows, rendered per release, featured and seen by the failure rules apart."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from tuner.errors import ConfigError
from tuner.knobs.registry import knob_of, knobs
from tuner.search.candidates import candidates
from tuner.search.evidence import knobs_of
from tuner.sglang.flags import render_flags, validate_flags
from tuner.sglang.options import builtin_table
from tuner.space.loader import SearchSpace, load_space
from tuner.space.sampling import config_from_params, parse_set_overrides, suggest

SPACE = """\
name: t
sglang_version: "{version}"
fixed_flags:
  model-path: /m
{fixed}params:
  - name: mem-fraction-static
    kind: float
    low: 0.8
    high: 0.9
    step: 0.05
  - kind: attention_backends
    choices: [{choices}]
"""  # the choices are on line 12 (one fixed flag: 13)


def space(tmp_path: Path, choices: str, *, version: str = "0.5.17", fixed: str = "") -> SearchSpace:
    path = tmp_path / "space.yaml"
    path.write_text(SPACE.format(version=version, choices=choices, fixed=fixed))
    return load_space(path)


def test_the_knob_is_found_and_implements_the_protocol() -> None:
    assert knob_of("attention_backends") in knobs()


def test_a_backend_the_release_lacks_is_refused_at_its_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        space(tmp_path, "fa3/flashinfer, fa3/fa9")
    text = str(err.value)
    assert "space.yaml:12" in text and "'fa9'" in text and "SGLang 0.5.17" in text and "flashinfer" in text


def test_a_backend_of_a_later_release_is_refused_for_an_earlier_one(tmp_path: Path) -> None:
    newer = builtin_table("0.5.23").by_dest("attention_backend")[0].choices or ()
    older = builtin_table("0.5.2").by_dest("attention_backend")[0].choices or ()
    only_new = next(b for b in newer if b not in older)
    space(tmp_path, f"{only_new}", version="0.5.23")
    with pytest.raises(ConfigError, match=f"'{only_new}' is not an attention backend of SGLang 0.5.2"):
        space(tmp_path, f"{only_new}", version="0.5.2")


def test_a_malformed_pair_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="prefill/decode.*space.yaml:12"):
        space(tmp_path, "fa3/fa3/fa3")


def test_the_same_setting_as_a_fixed_flag_is_refused(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"--attention-backend is also searched by param 'attention_backends'.*space.yaml:5"
    ):
        space(tmp_path, "fa3", fixed="  attention-backend: triton\n")


def test_one_backend_is_attention_backend_and_a_mixed_pair_the_per_phase_flags(tmp_path: Path) -> None:
    s = space(tmp_path, "fa3, fa3/flashinfer")
    table = builtin_table("0.5.17")
    same = config_from_params(s, {"mem-fraction-static": 0.85, "attention_backends": "fa3/fa3"})
    mixed = config_from_params(s, {"mem-fraction-static": 0.85, "attention_backends": "fa3/flashinfer"})
    argv = render_flags(same, table, port=30000)
    assert argv[argv.index("--attention-backend") + 1] == "fa3" and "--prefill-attention-backend" not in argv
    argv = render_flags(mixed, table, port=30000)
    assert argv[argv.index("--prefill-attention-backend") + 1] == "fa3"
    assert argv[argv.index("--decode-attention-backend") + 1] == "flashinfer"
    assert "--attention-backend" not in argv
    validate_flags(argv, table)


def test_the_rules_see_each_role(tmp_path: Path) -> None:
    s = space(tmp_path, "fa3, fa3/flashinfer, triton")
    k = {c: knobs_of(config_from_params(s, {"mem-fraction-static": 0.85, "attention_backends": c}))
         for c in ("fa3/fa3", "fa3/flashinfer", "triton/triton")}  # fmt: skip
    assert (k["fa3/fa3"].prefill, k["fa3/fa3"].decode) == ("fa3", "fa3")
    assert (k["fa3/flashinfer"].prefill, k["fa3/flashinfer"].decode) == ("fa3", "flashinfer")
    assert len(set(k.values())) == 3  # no two pairs look alike to the rules


def test_the_sampler_asks_only_pairs_of_the_space(tmp_path: Path) -> None:
    choices = ("fa3/fa3", "fa3/flashinfer", "flashinfer/flashinfer", "triton/triton")
    s = space(tmp_path, ", ".join(choices))
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    seen = set()
    for _ in range(40):
        trial = study.ask()
        config, params = suggest(s, trial)
        assert params["attention_backends"] in choices
        seen.add(params["attention_backends"])
        study.tell(trial, 1.0)
    assert seen == set(choices)


def test_candidates_feature_each_role_and_the_pair(tmp_path: Path) -> None:
    s = space(tmp_path, "fa3, fa3/flashinfer, flashinfer")
    found = candidates(s)
    assert len(found.params) == 3 * 3
    block = next(b for b in found.blocks if b.name == "attention_backends")
    assert len(block.cat) == 3
    levels = {
        p["attention_backends"]: tuple(c[i] for i in block.cat)
        for p, c in zip(found.params, found.cat, strict=True)
    }
    assert levels["fa3/fa3"][0] == levels["fa3/flashinfer"][0]  # same prefill backend
    assert levels["fa3/flashinfer"][1] == levels["flashinfer/flashinfer"][1]  # same decode backend


def test_set_override_takes_one_backend(tmp_path: Path) -> None:
    s = space(tmp_path, "fa3, triton")
    assert parse_set_overrides(s, ["attention_backends=triton"]) == {"attention_backends": "triton/triton"}


PLAIN = """\
name: t
sglang_version: "0.5.17"
fixed_flags:
  model-path: /m
params:
  - name: attention-backend
    kind: categorical
    choices: [triton, {last}]
baselines:
  - {{attention-backend: triton}}
"""  # the choices are on line 8


def test_a_plain_param_on_attention_backend_is_the_pair_of_one_backend(tmp_path: Path) -> None:
    path = tmp_path / "space.yaml"
    path.write_text(PLAIN.format(last="torch_native"))
    s = load_space(path)
    (param,) = s.params
    assert param.knob == "attention_backends"
    assert param.choices == ("triton/triton", "torch_native/torch_native")
    assert s.baselines == ({"attention-backend": "triton/triton"},)
    argv = render_flags(config_from_params(s, dict(s.baselines[0])), builtin_table("0.5.17"), port=30000)
    assert argv[argv.index("--attention-backend") + 1] == "triton"
    assert "--prefill-attention-backend" not in argv and "--decode-attention-backend" not in argv
    assert len(candidates(s).params) == 2


def test_a_plain_param_on_attention_backend_is_checked_against_the_release(tmp_path: Path) -> None:
    path = tmp_path / "space.yaml"
    path.write_text(PLAIN.format(last="fa9"))
    refused = r"'fa9' is not an attention backend of SGLang 0.5.17.*space.yaml:8"
    with pytest.raises(ConfigError, match=refused):
        load_space(path)
