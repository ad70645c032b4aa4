"""The tuner's flags against a really installed SGLang's own parser (scripts/ci_real_sglang.sh).

Skipped unless TUNER_SGLANG_PYTHON names a Python with SGLang installed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tuner.config import CudaGraph, TrialConfig
from tuner.errors import FlagError
from tuner.sglang.config_yaml import config_to_argv, config_yaml
from tuner.sglang.flags import render_flags, validate_flags
from tuner.sglang.introspect import detect_sglang_version, installed_option_table, parse_with_installed
from tuner.sglang.options import OptionTable, builtin_table

PYTHON = os.environ.get("TUNER_SGLANG_PYTHON")
pytestmark = [
    pytest.mark.real_sglang,
    pytest.mark.skipif(
        not PYTHON, reason="TUNER_SGLANG_PYTHON is not set (scripts/ci_real_sglang.sh sets it)"
    ),
]

FIXED = {"model-path": "/models/glm-5", "tp-size": 8, "kv-cache-dtype": "fp8_e4m3"}
CONFIGS = (
    TrialConfig(),
    TrialConfig(mem_fraction_static=0.82),
    TrialConfig(cuda_graph=CudaGraph(enabled=False)),
    TrialConfig(cuda_graph=CudaGraph(max_bs=128)),
    TrialConfig(cuda_graph=CudaGraph(bs=(1, 2, 4, 8, 16))),
    TrialConfig(
        mem_fraction_static=0.9,
        cuda_graph=CudaGraph(max_bs=64, bs=(1, 2, 4, 8, 16, 32, 64)),
        sparse_prefill_backend="flashmla_sparse",
        sparse_decode_backend="flashinfer_sparse_mla",
        flags=(("enable-metrics", True), ("chunked-prefill-size", 8192), ("disable-radix-cache", False)),
    ),
    TrialConfig(sparse_prefill_backend="trtllm", sparse_decode_backend="trtllm"),
)
REJECTED = (
    ("--nsa-decode-backend", "fa3"),
    ("--nsa-prefill-backend", "fa3"),
    ("--cuda-graph-bs", "1", "2", "4"),
    ("--cuda-graph-max-bs", "64"),
    ("--enable-nan-detection",),
    ("--cuda-graph-bs-decode", "1,2,4"),
    ("--dsa-decode-backend", "no_such_backend"),
    ("--mem-fraction-static",),
)


@pytest.fixture(scope="module")
def version() -> str:
    assert PYTHON is not None
    found = detect_sglang_version(PYTHON)
    assert found is not None, f"no sglang in {PYTHON}"
    return found


@pytest.fixture(scope="module")
def table(version: str, tmp_path_factory: pytest.TempPathFactory) -> OptionTable:
    assert PYTHON is not None
    return installed_option_table(PYTHON, version, cache_dir=tmp_path_factory.mktemp("cache"))


def _facts(table: OptionTable) -> list[tuple[object, ...]]:
    # Choices built from a Python set come out in hash-seed order: compare them as sets.
    return [
        (o.opts, o.dest, o.kind, o.nargs, o.value_type, tuple(sorted(o.choices)) if o.choices else None)
        for o in table.options
    ]


def test_installed_table_has_the_builtin_facts(version: str, table: OptionTable) -> None:
    assert table.source == "installed"
    assert _facts(table) == _facts(builtin_table(version))


def test_rendered_argvs_are_accepted_by_the_real_parser(table: OptionTable) -> None:
    assert PYTHON is not None
    argvs = [render_flags(config, table, fixed=FIXED, port=30011) for config in CONFIGS]
    for argv in argvs:
        validate_flags(argv, table)
    assert parse_with_installed(PYTHON, argvs) == (None,) * len(argvs)


def test_config_yaml_turned_back_into_tokens_is_accepted_by_the_real_parser(table: OptionTable) -> None:
    assert PYTHON is not None
    argvs = [
        config_to_argv(config_yaml(render_flags(config, table, fixed=FIXED, port=30011), table), table)
        for config in CONFIGS
    ]
    assert parse_with_installed(PYTHON, argvs) == (None,) * len(argvs)


def test_what_the_tuner_rejects_the_real_parser_rejects(table: OptionTable) -> None:
    assert PYTHON is not None
    argvs = [("--model-path", "/m", *bad) for bad in REJECTED]
    for argv in argvs:
        with pytest.raises(FlagError):
            validate_flags(argv, table)
    errors = parse_with_installed(PYTHON, argvs)
    assert all(errors), dict(zip(REJECTED, errors, strict=True))
    assert "ambiguous option: --cuda-graph-bs " in (errors[2] or "")
    assert "unrecognized arguments: --nsa-decode-backend" in (errors[0] or "")


def test_option_cache_is_written(version: str, tmp_path: Path) -> None:
    assert PYTHON is not None
    installed_option_table(PYTHON, version, cache_dir=tmp_path)
    assert (tmp_path / f"{version}.json").is_file()
