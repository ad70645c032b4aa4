"""The running-request cap as a knob object: selected by its flag, whole request counts checked at
their line, sampled as written, set as its flag, and held by each failure rule as its physics says
(a larger cap takes a larger request table and captures at least the same graphs)."""

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

HEAD = 'name: t\nsglang_version: "0.5.17"\nfixed_flags:\n  model-path: /m\nparams:\n'


def space(tmp_path: Path, param: str) -> SearchSpace:
    path = tmp_path / "space.yaml"
    path.write_text(HEAD + "  - name: max-running-requests\n" + param)
    return load_space(path)


@pytest.mark.parametrize(
    ("param", "line", "phrase"),
    [
        (
            "    kind: categorical\n    choices: [64, 0]\n",
            8,
            "expected a whole number of requests >= 1 (got 0)",
        ),
        ("    kind: categorical\n    choices: [64, -1]\n", 8, "(got -1)"),
        ("    kind: categorical\n    choices: [64, many]\n", 8, "(got many)"),
        ("    kind: int\n    low: 0\n    high: 256\n", 8, "low: expected a whole number of requests"),
        ("    kind: bool\n", 7, "cannot be kind bool: use kind int or categorical"),
    ],
)
def test_a_bad_cap_is_refused_at_its_line(tmp_path: Path, param: str, line: int, phrase: str) -> None:
    with pytest.raises(ConfigError) as err:
        space(tmp_path, param)
    assert phrase in str(err.value) and f"space.yaml:{line}" in str(err.value), str(err.value)


def test_sampled_as_written_and_set_as_its_flag(tmp_path: Path) -> None:
    s = space(tmp_path, "    kind: categorical\n    choices: [null, 64, 256]\n")
    trial = optuna.create_study().ask()
    suggest(s, trial)
    assert trial.distributions["max-running-requests"] == optuna.distributions.CategoricalDistribution(
        [None, 64, 256]
    )
    assert config_from_params(s, {"max-running-requests": 64}).flags == (("max-running-requests", 64),)
    assert config_from_params(s, {"max-running-requests": None}).flags == ()
    (block,) = candidates(s).blocks
    assert block.role == "running"


@pytest.mark.parametrize("version", ["0.5.2", "0.5.13", "0.5.23"])
def test_every_release_takes_it(version: str) -> None:
    knob = knob_of("max_running_requests")
    assert knob.check(128, knob_options(flag_context(version))) is None
    argv = render_flags(knob.apply(128, TrialConfig()), builtin_table(version), port=1)
    assert argv[:2] == ("--max-running-requests", "128")
    validate_flags(argv, builtin_table(version))


def _config(cap: int | None, f: float = 0.85) -> TrialConfig:
    return TrialConfig(
        mem_fraction_static=f, cuda_graph=CudaGraph(max_bs=64),
        flags=(("max-running-requests", cap),) if cap is not None else (),
    )  # fmt: skip


def _rules(failed: TrialConfig, outcome: Outcome, stage: str | None = None) -> tuple:  # type: ignore[type-arg]
    return rules_from(Evidence(trial=0, knobs=knobs_of(failed), outcome=outcome, stage=stage, message="x"))


@pytest.mark.parametrize(
    ("outcome", "stage", "f"),
    [(Outcome.OOM, "serving", 0.9), (Outcome.OOM, "capture", 0.9), (Outcome.NOT_ENOUGH_MEMORY, "load", 0.6)],
)
def test_memory_failures_hold_for_every_larger_cap(outcome: Outcome, stage: str, f: float) -> None:
    rules = _rules(_config(64, f=f), outcome, stage)
    assert covering(rules, knobs_of(_config(256, f=f))) and not covering(rules, knobs_of(_config(32, f=f)))
    assert "max-running-requests >= 64" in rules[0].describe()


def test_a_load_oom_holds_for_its_own_cap_and_a_wrong_answer_for_any() -> None:
    load = _rules(_config(64, f=0.9), Outcome.OOM, "load")
    assert covering(load, knobs_of(_config(64, f=0.95))) and not covering(
        load, knobs_of(_config(256, f=0.95))
    )
    backend = TrialConfig(
        sparse_prefill_backend="a", sparse_decode_backend="b", flags=(("max-running-requests", 64),)
    )
    nan = _rules(backend, Outcome.NAN)
    assert covering(nan, knobs_of(TrialConfig(sparse_prefill_backend="a", sparse_decode_backend="b")))
