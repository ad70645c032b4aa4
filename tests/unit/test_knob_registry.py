"""Every knob object keeps the protocol: found by its module, its dests real SGLang options, its
encoding stable, and what it sets never invisible to the failure rules (no rule fails open)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.config import CudaGraph, FlagValue, Outcome, TrialConfig
from tuner.errors import ConfigError
from tuner.knobs.protocol import MEMORY_KINDS, ROLES, Knob
from tuner.knobs.registry import knob_of, knob_owning, knobs
from tuner.search.evidence import Evidence, knobs_of
from tuner.search.rules import RuleKind, rules_from
from tuner.sglang.options import builtin_table, known_versions
from tuner.space.loader import load_space

# Two values each knob must tell apart (any two the newest release accepts).
SAMPLES: dict[str, tuple[object, object]] = {
    "attention_backends": ("fa3/fa3", "fa3/flashinfer"),
    "backend_pair": ("trtllm/fa3", "fa3/fa3"),
    "chunked_prefill": (8192, -1),
    "cuda_graph": ("max:64", "off"),
    "kv_cache_dtype": ("fp8_e4m3", "bfloat16"),
    "max_running_requests": (64, 256),
    "mem_fraction": (0.8, 0.9),
}


def test_the_registry_finds_every_knob_module() -> None:
    found = {k.kind for k in knobs()}
    assert {"attention_backends", "backend_pair", "cuda_graph", "mem_fraction"} <= found
    assert all(isinstance(k, Knob) for k in knobs())
    assert set(SAMPLES) == found  # a new knob adds its samples here


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_each_owned_dest_is_an_option_of_some_release(kind: str) -> None:
    knob = knob_of(kind)
    for dest in knob.owned:
        assert any(builtin_table(v).by_dest(dest) for v in known_versions()), dest
        assert knob_owning(dest) is knob


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_encoding_is_stable_and_refuses_junk(kind: str) -> None:
    knob = knob_of(kind)
    for value in SAMPLES[kind]:
        assert knob.encode(knob.encode(value)) == knob.encode(value)
        assert knob.show(knob.encode(value))
    for junk in (None, ["a"], "a/b/c", "a b/c"):
        with pytest.raises(ValueError):
            knob.encode(junk)


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_the_rules_see_every_value_a_knob_sets(kind: str) -> None:
    knob = knob_of(kind)
    base = TrialConfig()
    a, b = (knob.apply(knob.encode(v), base) for v in SAMPLES[kind])
    assert a != b and knobs_of(a) != knobs_of(b) and knobs_of(a) != knobs_of(base)


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_each_knob_states_its_physics_for_rule_kinds_the_rules_know(kind: str) -> None:
    knob = knob_of(kind)
    assert knob.role in ROLES
    assert set(knob.scopes) <= {k.value for k in RuleKind}, set(knob.scopes) - {k.value for k in RuleKind}
    assert set(knob.scopes.values()) <= {"up", "down", "free", "equal"}
    bounded = any(s in ("up", "down") for s in knob.scopes.values())
    sizes = [knob.size(knob.encode(v)) for v in SAMPLES[kind]]
    assert not bounded or all(s is not None for s in sizes)  # a bounded scope compares sizes


def test_the_backends_are_memory_neutral_and_the_fraction_and_graphs_one_knob_each() -> None:
    for knob in knobs():
        if knob.role == "backends":
            assert all(knob.scopes.get(k) == "free" for k in MEMORY_KINDS)
    assert [k.kind for k in knobs() if k.role == "fraction"] == ["mem_fraction"]
    assert [k.kind for k in knobs() if k.role == "graphs"] == ["cuda_graph"]


def test_a_flag_param_on_a_knobs_option_is_refused_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        'name: t\nsglang_version: "0.5.17"\nfixed_flags:\n  model-path: /m\nparams:\n'
        "  - kind: attention_backends\n    choices: [fa3]\n"
        "  - flag: decode-attention-backend\n    kind: categorical\n    choices: [triton, fa3]\n"
    )
    with pytest.raises(
        ConfigError, match=r"set through the attention_backends knob; use a param of kind.*s.yaml:8"
    ):
        load_space(path)


@pytest.mark.parametrize(
    ("param", "line", "phrase"),
    [
        ("    kind: float\n    low: 0.0\n    high: 0.9\n", 8, "low: expected a number in (0, 1] (got 0.0)"),
        ("    kind: categorical\n    choices: [0.8, 1.5]\n", 8, "expected a number in (0, 1] (got 1.5)"),
        ("    kind: bool\n", 7, "use kind float or categorical"),
    ],
)
def test_the_memory_fraction_is_a_knob_selected_by_its_flag(
    tmp_path: Path, param: str, line: int, phrase: str
) -> None:
    path = tmp_path / "s.yaml"
    head = 'name: t\nsglang_version: "0.5.17"\nfixed_flags:\n  model-path: /m\nparams:\n'
    path.write_text(head + "  - name: mem-fraction-static\n" + param)
    with pytest.raises(ConfigError) as err:
        load_space(path)
    assert phrase in str(err.value) and f"s.yaml:{line}" in str(err.value)
    path.write_text(head + "  - flag: mem-fraction-static\n    kind: categorical\n    choices: [0.8, 0.9]\n")
    (got,) = load_space(path).params
    assert got.knob == "mem_fraction" and got.choices == (0.8, 0.9)


def test_a_trial_config_field_no_rule_reader_knows_is_held_equal_by_every_rule() -> None:
    from dataclasses import dataclass

    @dataclass(frozen=True, kw_only=True, slots=True)
    class Grown(TrialConfig):  # a knob object's new field, before knobs_of learns to read it
        new_knob: str | None = None

    a, b = Grown(mem_fraction_static=0.8, new_knob="a"), Grown(mem_fraction_static=0.8, new_knob="b")
    assert knobs_of(a) != knobs_of(b)
    assert knobs_of(Grown(mem_fraction_static=0.8)) == knobs_of(TrialConfig(mem_fraction_static=0.8))


@pytest.mark.parametrize(
    ("outcome", "stage", "backend"),
    [
        (Outcome.UNSUPPORTED, None, "fa3"),  # a named backend
        (Outcome.UNSUPPORTED, None, None),  # the pair
        (Outcome.NAN, None, None),
        (Outcome.OOM, "load", None),
        (Outcome.OOM, "capture", None),
        (Outcome.OOM, "serving", None),
        (Outcome.NOT_ENOUGH_MEMORY, "load", None),
    ],
)
def test_a_flag_no_knob_describes_is_part_of_every_rule_s_scope(
    outcome: Outcome, stage: str | None, backend: str | None
) -> None:
    def config(*flags: tuple[str, FlagValue]) -> TrialConfig:
        return TrialConfig(
            mem_fraction_static=0.8, cuda_graph=CudaGraph(max_bs=64),
            sparse_prefill_backend="fa3", sparse_decode_backend="trtllm", flags=flags,
        )  # fmt: skip

    failed = config(("enable-foo", True), ("max-running-requests", 64))
    ev = Evidence(trial=0, knobs=knobs_of(failed), outcome=outcome, stage=stage, backend=backend, message="x")
    (rule,) = rules_from(ev)
    assert rule.covers(knobs_of(failed))
    assert not rule.covers(knobs_of(config(("max-running-requests", 64))))
    assert not rule.covers(knobs_of(config(("enable-foo", False), ("max-running-requests", 64))))
