"""Reading an installed SGLang's options, against a stub `sglang` package in a subprocess."""

from __future__ import annotations

import json
import logging
import sys
import textwrap
from pathlib import Path

import pytest

from tuner.errors import ConfigError
from tuner.sglang.introspect import (
    compact_entries,
    detect_sglang_version,
    installed_option_table,
    option_table_for,
    parse_with_installed,
)
from tuner.sglang.options import builtin_table

PY = sys.executable
REFERENCE = Path(__file__).resolve().parents[3] / "shared" / "reference" / "sglang-args"

STUB_SERVER_ARGS = """
import argparse


class DeprecatedAliasStoreAction(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)


class FancyStore(argparse._StoreAction):
    pass


def human_readable_int(text):
    return int(text)


class ServerArgs:
    @staticmethod
    def add_cli_args(parser):
        print("noise on stdout while importing, as real SGLang does")
        parser.add_argument("--model-path", "--model", type=str, required=True)
        parser.add_argument("--mem-fraction-static", type=float)
        parser.add_argument("--cuda-graph-bs-decode", type=int, nargs="+")
        parser.add_argument("--dsa-decode-backend", type=str, choices=["fa3", "trtllm"])
        parser.add_argument("--nsa-decode-backend", dest="dsa_decode_backend", type=str,
                            action=DeprecatedAliasStoreAction)
        parser.add_argument("--enable-metrics", action="store_true")
        parser.add_argument("--enable-tf32", action=argparse.BooleanOptionalAction)
        parser.add_argument("--context-bucket", type=human_readable_int, action=FancyStore)
        parser.add_argument("--sampling-backend", choices={"b", "a", "c"})
"""


def make_stub(root: Path, *, version: str = "0.5.99", server_args: str = STUB_SERVER_ARGS) -> Path:
    pkg = root / "sglang" / "srt"
    pkg.mkdir(parents=True)
    (root / "sglang" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "server_args.py").write_text(textwrap.dedent(server_args))
    dist = root / f"sglang-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    return root


@pytest.fixture
def stub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = make_stub(tmp_path / "site")
    monkeypatch.setenv("PYTHONPATH", str(root))
    return root


def test_version_comes_from_package_metadata(stub: Path) -> None:
    assert detect_sglang_version(PY) == "0.5.99"


def test_no_sglang_means_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTHONPATH", raising=False)
    assert detect_sglang_version(PY) is None


def test_missing_interpreter_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        detect_sglang_version(str(tmp_path / "no-python"))


def test_installed_table_maps_actions_like_the_builtin_tables(stub: Path, tmp_path: Path) -> None:
    table = installed_option_table(PY, "0.5.99", cache_dir=tmp_path / "cache")
    assert table.source == "installed" and table.version == "0.5.99"
    rows = {o.opts[0]: (o.dest, o.kind, o.nargs, o.value_type, o.choices) for o in table.options}
    assert "-h" not in rows and "--help" not in rows
    assert rows["--model-path"] == ("model_path", "store", None, "str", None)
    assert rows["--mem-fraction-static"] == ("mem_fraction_static", "store", None, "float", None)
    assert rows["--cuda-graph-bs-decode"] == ("cuda_graph_bs_decode", "store", "+", "int", None)
    assert rows["--dsa-decode-backend"] == ("dsa_decode_backend", "store", None, "str", ("fa3", "trtllm"))
    assert rows["--nsa-decode-backend"][:2] == ("dsa_decode_backend", "alias")
    assert rows["--enable-metrics"] == ("enable_metrics", "store_true", 0, "str", None)
    assert rows["--enable-tf32"][1] == "bool_optional"
    assert rows["--context-bucket"] == ("context_bucket", "store", None, "int", None)  # by its base class
    assert rows["--sampling-backend"][4] == ("a", "b", "c")  # a set's choices, sorted
    assert table.find("--model") is table.find("--model-path")


def test_table_is_cached_per_version(stub: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    first = installed_option_table(PY, "0.5.99", cache_dir=cache)
    data = json.loads((cache / "0.5.99.json").read_text())
    assert data["sglang_version"] == "0.5.99" and len(data["entries"]) == len(first.options)
    monkeypatch.delenv("PYTHONPATH")  # SGLang gone: only the cache can answer
    assert installed_option_table(PY, "0.5.99", cache_dir=cache) == first


def test_default_cache_dir_follows_xdg(stub: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    installed_option_table(PY, "0.5.99")
    assert (tmp_path / "xdg" / "sglang-tuner" / "options" / "0.5.99.json").is_file()


def test_stale_cache_is_read_again(stub: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "0.5.99.json").write_text('{"format": 0, "entries": []}')
    assert len(installed_option_table(PY, "0.5.99", cache_dir=cache).options) == 9


def test_other_installed_version_is_a_config_error(stub: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"expected version 0\.5\.23, got 0\.5\.99"):
        installed_option_table(PY, "0.5.23", cache_dir=tmp_path)


def test_import_failure_is_a_config_error_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_stub(tmp_path / "site", server_args="import torch_that_is_missing\n")
    monkeypatch.setenv("PYTHONPATH", str(root))
    with pytest.raises(
        ConfigError, match=r"importing sglang\.srt\.server_args failed .*torch_that_is_missing"
    ):
        installed_option_table(PY, "0.5.99", cache_dir=tmp_path / "cache")
    assert not (tmp_path / "cache" / "0.5.99.json").exists()


def test_hanging_import_times_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_stub(tmp_path / "site", server_args="import time\ntime.sleep(30)\n")
    monkeypatch.setenv("PYTHONPATH", str(root))
    with pytest.raises(ConfigError, match=r"within 0\.5 s"):
        installed_option_table(PY, "0.5.99", cache_dir=tmp_path / "cache", timeout_s=0.5)


def test_real_parser_answers_per_argv(stub: Path) -> None:
    errors = parse_with_installed(
        PY,
        [
            ["--model-path", "/m", "--cuda-graph-bs-decode", "1", "2"],
            ["--model-path", "/m", "--dsa-decode-backend", "flashmla"],
            ["--mem-fraction-static", "0.8"],
        ],
    )
    assert errors[0] is None
    assert "invalid choice: 'flashmla'" in (errors[1] or "")
    assert "required: --model-path" in (errors[2] or "")


def test_option_table_for_prefers_the_installed_parser(stub: Path, tmp_path: Path) -> None:
    table = option_table_for(None, PY, cache_dir=tmp_path)
    assert table.source == "installed" and table.version == "0.5.99"


def test_option_table_for_falls_back_to_builtin_when_import_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    root = make_stub(tmp_path / "site", version="0.5.16", server_args="raise ImportError('no CUDA')\n")
    monkeypatch.setenv("PYTHONPATH", str(root))
    with caplog.at_level(logging.INFO, logger="tuner.sglang.introspect"):
        table = option_table_for(None, PY, cache_dir=tmp_path / "cache")
    assert table == builtin_table("0.5.16")
    assert "falling back to the built-in option table of 0.5.16" in caplog.text


def test_option_table_for_without_python_or_version_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PYTHONPATH", raising=False)
    assert option_table_for("0.5.9", None).source == "builtin"
    with pytest.raises(ConfigError, match="none installed in .* and none given"):
        option_table_for(None, PY)


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="shared/reference/sglang-args is not beside the repo")
@pytest.mark.parametrize("version", ["0.5.4", "0.5.13", "0.5.16", "0.5.23"])
def test_compaction_rules_match_the_builtin_tables(version: str) -> None:
    dump = json.loads((REFERENCE / f"{version}.json").read_text())
    entries = compact_entries(dump["options"])
    builtin = builtin_table(version)
    assert [tuple(e[0]) for e in entries] == [o.opts for o in builtin.options]
    assert [(e[1], e[2], e[3], e[4]) for e in entries] == [
        (o.dest, o.kind, o.nargs, o.value_type) for o in builtin.options
    ]
