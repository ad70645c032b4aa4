"""No rendered flag is deprecated in the release it is rendered for: every knob, every built-in table."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tuner.config import CudaGraph, TrialConfig
from tuner.errors import FlagError
from tuner.sglang.flags import current_spelling, render_flags, validate_flags
from tuner.sglang.options import builtin_table, known_versions

SPACES = Path(__file__).resolve().parents[2] / "search_spaces"


def _configs() -> list[TrialConfig]:
    return [
        TrialConfig(mem_fraction_static=0.8, cuda_graph=CudaGraph(enabled=False)),
        TrialConfig(mem_fraction_static=0.8, cuda_graph=CudaGraph(max_bs=64, bs=(1, 2, 4))),
        TrialConfig(sparse_prefill_backend="fa3", sparse_decode_backend="fa3"),
    ]


def _deprecated(argv: tuple[str, ...], version: str) -> list[str]:
    table = builtin_table(version)
    return [t for t in argv if t.startswith("--") and (s := table.find(t)) is not None and s.is_deprecated]


def test_there_are_31_tables() -> None:
    assert len(known_versions()) == 31


@pytest.mark.parametrize("version", known_versions())
def test_no_knob_renders_a_deprecated_flag(version: str) -> None:
    table = builtin_table(version)
    rendered = 0
    for config in _configs():
        try:
            argv = render_flags(config, table, port=30000)
        except FlagError:  # the release has no option for this knob (sparse backends before NSA)
            continue
        rendered += 1
        assert _deprecated(argv, version) == [], argv
        assert validate_flags(argv, table) == ()
    assert rendered >= 2


@pytest.mark.parametrize("version", known_versions())
def test_fixed_flags_of_the_shipped_spaces_render_current_spellings(version: str) -> None:
    table = builtin_table(version)
    for path in sorted(SPACES.glob("*.yaml")):
        fixed = (yaml.safe_load(path.read_text()) or {}).get("fixed_flags") or {}
        for name, value in fixed.items():
            if table.find(f"--{name}") is None:
                continue  # not in this release at all: validate_flags names the replacement
            try:
                argv = render_flags(TrialConfig(), table, fixed={name: value}, port=30000)
            except FlagError:
                continue
            assert _deprecated(argv, version) == [], (path.name, argv)


def test_aliases_and_deprecated_switches_become_their_current_twins() -> None:
    new = builtin_table("0.5.23")
    assert current_spelling("--nsa-decode-backend", builtin_table("0.5.16")) == ("--dsa-decode-backend",)
    assert current_spelling("--disable-cuda-graph", new) == (
        "--disable-decode-cuda-graph",
        "--disable-prefill-cuda-graph",
    )
    assert current_spelling("--tp-size", new) == ("--tp-size",)
    argv = render_flags(TrialConfig(), builtin_table("0.5.16"), fixed={"nsa-decode-backend": "fa3"}, port=1)
    assert argv[:2] == ("--dsa-decode-backend", "fa3")
    old = builtin_table("0.5.9")
    assert current_spelling("--disable-cuda-graph", old) == ("--disable-cuda-graph",)
