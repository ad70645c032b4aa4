"""The KV-cache dtype as a knob object: selected by its flag, each choice checked against the
release's own dtypes at its line, sampled as written, set as its flag, spelled per release, and
held by each failure rule as its physics says (wider holds fewer tokens; a broken pair is per dtype)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import optuna
import pytest

from tuner.config import CudaGraph, Outcome, TrialConfig
from tuner.errors import ConfigError, FlagError
from tuner.knobs.registry import knob_flagged, knob_of
from tuner.search.candidates import candidates
from tuner.search.evidence import Evidence, knobs_of
from tuner.search.rules import covering, rules_from
from tuner.sglang.flags import render_flags, validate_flags
from tuner.sglang.knobs import flag_context, knob_options
from tuner.sglang.options import builtin_table
from tuner.space.loader import SearchSpace, load_space
from tuner.space.sampling import config_from_params, suggest

HEAD = 'name: t\nsglang_version: "{version}"\nfixed_flags:\n  model-path: /m\n{fixed}params:\n'
PARAM = "  - name: kv-cache-dtype\n    kind: categorical\n    choices: [{choices}]\n"  # choices: line 8


def space(
    tmp_path: Path, choices: str, *, version: str = "0.5.17", fixed: str = "", extra: str = ""
) -> SearchSpace:
    path = tmp_path / "space.yaml"
    path.write_text(HEAD.format(version=version, fixed=fixed) + PARAM.format(choices=choices) + extra)
    return load_space(path)


def test_a_plain_param_on_the_flag_is_the_knob(tmp_path: Path) -> None:
    (param,) = space(tmp_path, "null, auto, fp8_e4m3").params
    assert param.knob == "kv_cache_dtype" and knob_flagged("kv-cache-dtype") is knob_of("kv_cache_dtype")
    assert param.choices == (None, "auto", "fp8_e4m3")


@pytest.mark.parametrize(
    ("version", "choice", "refused"),
    [("0.5.3", "bf16", True), ("0.5.4", "bf16", False), ("0.5.20", "fp4_e2m1", False),
     ("0.5.21", "fp4_e2m1", True), ("0.5.15", "nvfp4", True), ("0.5.16", "nvfp4", False)],
)  # fmt: skip
def test_each_choice_is_one_of_the_release_s_own_dtypes_at_its_line(
    tmp_path: Path, version: str, choice: str, refused: bool
) -> None:
    if not refused:
        assert space(tmp_path, f"fp8_e4m3, {choice}", version=version).params[0].choices[1] == choice
        return
    with pytest.raises(ConfigError) as err:
        space(tmp_path, f"fp8_e4m3, {choice}", version=version)
    text = str(err.value)
    assert "space.yaml:8" in text and f"{choice!r} is not a KV-cache dtype of SGLang {version}" in text


def test_a_name_that_is_no_dtype_and_a_switch_are_refused_at_their_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"expected a KV-cache dtype name.*space.yaml:8"):
        space(tmp_path, "fp8_e4m3, 8")
    path = tmp_path / "b.yaml"
    path.write_text(HEAD.format(version="0.5.17", fixed="") + "  - {flag: kv-cache-dtype, kind: bool}\n")
    with pytest.raises(ConfigError, match=r"cannot be kind bool: use kind categorical.*b.yaml:6"):
        load_space(path)


def test_a_fixed_dtype_beside_the_param_is_refused_at_its_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"also searched by param 'kv-cache-dtype'.*space.yaml:5"):
        space(tmp_path, "fp8_e4m3", fixed="  kv-cache-dtype: auto\n")


def test_sampled_as_written_and_set_as_its_flag_in_param_order(tmp_path: Path) -> None:
    s = space(tmp_path, "null, fp8_e4m3", extra="  - {name: disable-radix-cache, kind: bool}\n")
    trial = optuna.create_study().ask()
    config, params = suggest(s, trial)
    dist = trial.distributions["kv-cache-dtype"]
    assert isinstance(dist, optuna.distributions.CategoricalDistribution) and dist.choices == (
        None,
        "fp8_e4m3",
    )
    picked = config_from_params(s, {"kv-cache-dtype": "fp8_e4m3", "disable-radix-cache": True})
    assert picked.flags == (("kv-cache-dtype", "fp8_e4m3"), ("disable-radix-cache", True))
    default = config_from_params(s, {"kv-cache-dtype": None, "disable-radix-cache": False})
    assert default.flags == (("disable-radix-cache", False),)  # null: SGLang's default, no flag
    (block, _) = candidates(s).blocks
    assert block.role == "kv_dtype"


@pytest.mark.parametrize("version", ["0.5.2", "0.5.17", "0.5.23"])
def test_rendered_and_validated_for_each_release(version: str) -> None:
    table = builtin_table(version)
    argv = render_flags(knob_of("kv_cache_dtype").apply("fp8_e4m3", TrialConfig()), table, port=1)
    assert argv[:2] == ("--kv-cache-dtype", "fp8_e4m3")
    validate_flags(argv, table)


def test_a_stored_dtype_a_later_release_dropped_fails_its_argparser() -> None:
    argv = render_flags(
        knob_of("kv_cache_dtype").apply("fp4_e2m1", TrialConfig()), builtin_table("0.5.21"), port=1
    )
    with pytest.raises(FlagError, match="fp4_e2m1"):
        validate_flags(argv, builtin_table("0.5.21"))


def _config(kv: str | None, pair: str = "fa3", **flags: object) -> TrialConfig:
    extra = [("kv-cache-dtype", kv)] if kv else []
    return TrialConfig(
        mem_fraction_static=0.8, cuda_graph=CudaGraph(enabled=False),
        flags=(*extra, ("attention-backend", pair), *((k, v) for k, v in flags.items())),  # type: ignore[misc]
    )  # fmt: skip


def _rules(cfg: TrialConfig, outcome: Outcome, **kw: object) -> tuple:  # type: ignore[type-arg]
    return rules_from(Evidence(trial=0, knobs=knobs_of(cfg), outcome=outcome, message="x", **kw))  # type: ignore[arg-type]


def test_not_enough_memory_holds_for_wider_dtypes_and_a_broken_pair_for_its_own() -> None:
    tight = _rules(_config("fp8_e4m3"), Outcome.NOT_ENOUGH_MEMORY, stage="load")
    assert covering(tight, knobs_of(_config("bfloat16"))) and not covering(tight, knobs_of(_config("nvfp4")))
    assert not covering(tight, knobs_of(_config("auto")))  # no width: that dtype only
    nan = _rules(_config("fp8_e4m3"), Outcome.NAN)
    assert covering(nan, knobs_of(_config("fp8_e4m3"))) and not covering(nan, knobs_of(_config("bfloat16")))
    assert "KV fp8_e4m3" in nan[0].describe()


def test_an_unsupported_backend_holds_for_every_dtype_but_not_for_an_unknown_flag() -> None:
    rules = _rules(_config("fp8_e4m3"), Outcome.UNSUPPORTED, backend="fa3")
    assert covering(rules, knobs_of(_config("bfloat16")))
    held = _rules(_config(None, **{"enable-foo": True}), Outcome.UNSUPPORTED, backend="fa3")
    assert covering(held, knobs_of(_config("bfloat16", **{"enable-foo": True})))
    assert not covering(held, knobs_of(_config(None)))  # a flag no knob describes: held equal


def test_the_surrogate_sees_a_dtype_s_width(tmp_path: Path) -> None:
    s = space(tmp_path, "fp8_e4m3, nvfp4, bfloat16")
    found = candidates(s)
    (block,) = found.blocks
    (column,) = block.num
    width = {p["kv-cache-dtype"]: num[column] for p, num in zip(found.params, found.num, strict=True)}
    assert width["nvfp4"] == 0.0 and width["bfloat16"] == 1.0 and 0 < width["fp8_e4m3"] < 1  # log bytes
    (named,) = candidates(space(tmp_path, "auto, fp8_e4m3")).blocks
    assert named.num == ()  # auto has no width: the level alone


# SGLang's argparser dumps per release: shared/reference/sglang-args beside the repo, or $TUNER_SGLANG_ARGS
REFERENCE = Path(
    os.environ.get("TUNER_SGLANG_ARGS")
    or Path(__file__).resolve().parents[3] / "shared" / "reference" / "sglang-args"
)
DUMPS = sorted(REFERENCE.glob("*.json")) if REFERENCE.is_dir() else []


@pytest.mark.skipif(not DUMPS, reason="shared/reference/sglang-args is not beside the repo")
def test_the_flag_knobs_take_what_each_release_s_own_parser_takes() -> None:
    every = {
        c
        for d in DUMPS
        for o in json.loads(d.read_text())["options"]
        if o["dest"] == "kv_cache_dtype"
        for c in o["choices"]
    }
    for dump in DUMPS:
        data = json.loads(dump.read_text())
        (kv,) = [o for o in data["options"] if o["dest"] == "kv_cache_dtype"]
        options = knob_options(flag_context(data["sglang_version"]))
        for name in every:
            refused = knob_of("kv_cache_dtype").check(name, options) is not None
            assert refused == (name not in kv["choices"]), (dump.name, name)
        for kind, value in (("chunked_prefill", 8192), ("max_running_requests", 256)):
            assert any(o["dest"] in knob_of(kind).owned and o["type"] == "int" for o in data["options"])
            assert knob_of(kind).check(value, options) is None
