"""The prefill chunk as a knob object: selected by its flag, whole token counts (or -1, no
chunking) checked at their line, sampled as written, set as its flag, and held by each failure
rule as its physics says (an OOM under load holds for larger chunks; the KV pool and the graphs
are sized before any chunk)."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from tuner.config import CudaGraph, Outcome, TrialConfig
from tuner.errors import ConfigError
from tuner.knobs.registry import knob_of
from tuner.search.candidates import candidates
from tuner.search.evidence import Evidence, knobs_of
from tuner.search.rules import covering, rules_from
from tuner.sglang.flags import render_flags, validate_flags
from tuner.sglang.knobs import flag_context, knob_options
from tuner.sglang.options import builtin_table
from tuner.space.loader import SearchSpace, load_space
from tuner.space.sampling import config_from_params, suggest

HEAD = 'name: t\nsglang_version: "0.5.17"\nfixed_flags:\n  model-path: /m\n{fixed}params:\n'


def space(tmp_path: Path, param: str, *, fixed: str = "") -> SearchSpace:
    path = tmp_path / "space.yaml"
    path.write_text(HEAD.format(fixed=fixed) + "  - name: chunked-prefill-size\n" + param)
    return load_space(path)


@pytest.mark.parametrize(
    ("param", "line", "phrase"),
    [
        (
            "    kind: categorical\n    choices: [4096, 0]\n",
            8,
            "expected a whole number of tokens >= 1, or -1",
        ),
        ("    kind: categorical\n    choices: [4096, -2]\n", 8, "(got -2)"),
        ("    kind: categorical\n    choices: [4096, 8192.5]\n", 8, "(got 8192.5)"),
        ("    kind: int\n    low: 0\n    high: 8192\n", 8, "low: expected a whole number of tokens"),
        ("    kind: float\n    low: 1024\n    high: 8192\n", 8, "low: expected a whole number"),
        ("    kind: bool\n", 7, "cannot be kind bool: use kind int or categorical"),
    ],
)
def test_a_bad_chunk_is_refused_at_its_line(tmp_path: Path, param: str, line: int, phrase: str) -> None:
    with pytest.raises(ConfigError) as err:
        space(tmp_path, param)
    assert phrase in str(err.value) and f"space.yaml:{line}" in str(err.value), str(err.value)


def test_a_fixed_chunk_is_checked_as_the_knob_checks_it(tmp_path: Path) -> None:
    path = tmp_path / "f.yaml"
    path.write_text(
        HEAD.format(fixed="  chunked-prefill-size: 0\n")
        + "  - {name: mem-fraction-static, kind: categorical, choices: [0.8]}\n"
    )
    with pytest.raises(ConfigError, match=r"--chunked-prefill-size: expected a whole number.*f.yaml:5"):
        load_space(path)
    path.write_text(
        HEAD.format(fixed="  chunked-prefill-size: -1\n")
        + "  - {name: mem-fraction-static, kind: categorical, choices: [0.8]}\n"
    )
    assert dict(load_space(path).fixed_flags)["chunked-prefill-size"] == -1


def test_an_int_range_is_sampled_as_optuna_ints_and_set_as_its_flag(tmp_path: Path) -> None:
    s = space(tmp_path, "    kind: int\n    low: 2048\n    high: 16384\n    step: 2048\n")
    trial = optuna.create_study().ask()
    config, params = suggest(s, trial)
    assert trial.distributions["chunked-prefill-size"] == optuna.distributions.IntDistribution(
        2048, 16384, step=2048
    )
    assert config.flags == (("chunked-prefill-size", params["chunked-prefill-size"]),)
    (block,) = candidates(s).blocks
    assert block.role == "chunk" and block.num  # featured as a number


def test_a_renamed_param_is_the_knob_and_null_leaves_sglang_s_default(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text(
        HEAD.format(fixed="")
        + "  - {name: chunk, flag: chunked-prefill-size, kind: categorical, choices: [null, -1]}\n"
    )
    s = load_space(path)
    assert s.params[0].knob == "chunked_prefill"
    assert config_from_params(s, {"chunk": None}).flags == ()
    assert config_from_params(s, {"chunk": -1}).flags == (("chunked-prefill-size", -1),)


@pytest.mark.parametrize("version", ["0.5.2", "0.5.9", "0.5.23"])
def test_every_release_takes_it(version: str) -> None:
    knob = knob_of("chunked_prefill")
    assert knob.check(8192, knob_options(flag_context(version))) is None
    argv = render_flags(knob.apply(8192, TrialConfig()), builtin_table(version), port=1)
    assert argv[:2] == ("--chunked-prefill-size", "8192")
    validate_flags(argv, builtin_table(version))


def _config(chunk: int | None, f: float = 0.85, graphs: int | None = 64) -> TrialConfig:
    return TrialConfig(
        mem_fraction_static=f, cuda_graph=CudaGraph(max_bs=graphs),
        flags=(("chunked-prefill-size", chunk),) if chunk is not None else (),
    )  # fmt: skip


def _covered(failed: TrialConfig, outcome: Outcome, stage: str, other: TrialConfig) -> bool:
    rules = rules_from(Evidence(trial=0, knobs=knobs_of(failed), outcome=outcome, stage=stage, message="x"))
    return covering(rules, knobs_of(other)) is not None


def test_an_oom_under_load_holds_for_larger_chunks_and_no_chunking() -> None:
    failed = _config(8192)
    assert _covered(failed, Outcome.OOM, "serving", _config(16384)) and _covered(
        failed, Outcome.OOM, "serving", _config(-1)
    )
    assert not _covered(failed, Outcome.OOM, "serving", _config(4096))
    assert not _covered(failed, Outcome.OOM, "serving", _config(None))  # SGLang's own size: unknown


def test_capture_oom_and_not_enough_memory_hold_for_every_chunk_and_load_oom_for_its_own() -> None:
    failed = _config(8192, f=0.9)
    assert _covered(failed, Outcome.OOM, "capture", _config(1024, f=0.9))
    assert _covered(_config(8192, f=0.6), Outcome.NOT_ENOUGH_MEMORY, "load", _config(None, f=0.6))
    assert _covered(failed, Outcome.OOM, "load", _config(8192, f=0.95))
    assert not _covered(failed, Outcome.OOM, "load", _config(16384, f=0.95))


def test_shown_for_people() -> None:
    knob = knob_of("chunked_prefill")
    assert knob.show(-1) == "no chunked prefill" and "8,192 tokens" in knob.show(8192)


def test_no_chunking_is_not_placed_below_the_smallest_chunk(tmp_path: Path) -> None:
    found = candidates(space(tmp_path, "    kind: categorical\n    choices: [8192, -1]\n"))
    (block,) = found.blocks
    assert block.num == ()  # -1 is the largest chunk, with no number: told apart by its level only
    (sized,) = candidates(space(tmp_path, "    kind: categorical\n    choices: [4096, 16384]\n")).blocks
    assert len(sized.num) == 1
