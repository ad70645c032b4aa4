"""Scenario files: every mistake is one line naming the file, the key and what was expected."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tuner.errors import ConfigError
from tuner.sim.scenario import builtin_names, load_scenario, parse_scenario

ROOT = Path(__file__).resolve().parents[2]
BASE = yaml.safe_load((ROOT / "tuner/sim/scenarios/tiny-fast.yaml").read_text())


def _with(path: str, value: Any) -> dict[str, Any]:
    raw = copy.deepcopy(BASE)
    node = raw
    *parents, last = path.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    if value is _DELETE:
        del node[last]
    else:
        node[last] = value
    return raw


_DELETE = object()

CASES = [
    ("gpus.total_mib", "81559", "gpus.total_mib: expected an integer > 0 (got '81559')"),
    ("gpus.total_mib", -5, "gpus.total_mib: expected an integer > 0 (got -5)"),
    ("gpus.count", 0, "gpus.count: expected an integer >= 1 (got 0)"),
    ("gpus.compute_capability", 9.0, "gpus.compute_capability: expected a string (got 9.0)"),
    ("gpus.compute_capability", "sm90", 'gpus.compute_capability: expected a quoted "MAJOR.MINOR"'),
    ("gpus.name", _DELETE, "gpus.name: expected a string (required) (got 'nothing')"),
    ("gpus.colour", "green", "gpus.colour: expected one of the keys name, compute_capability"),
    ("model.weights_mib_per_gpu", 0, "model.weights_mib_per_gpu: expected a number > 0 (got 0)"),
    ("model.sparse_attention", "yes", "model.sparse_attention: expected true or false (got 'yes')"),
    ("model.default_kv_dtype", "int3", "model.default_kv_dtype: expected one of fp8_e4m3"),
    ("model.reference_tp", 1.5, "model.reference_tp: expected an integer >= 1 (got 1.5)"),
    ("memory.eager_act_mib_per_req", -1, "memory.eager_act_mib_per_req: expected a number >= 0 (got -1)"),
    ("memory", [1, 2], "memory: expected a mapping (got list)"),
    ("perf.noise_pct", -50, "perf.noise_pct: expected a number in [0, 10] (got -50)"),
    ("perf.prefill_tok_s", 0, "perf.prefill_tok_s: expected a number > 0 (got 0)"),
    (
        "perf.graph_per_req_extra_ms",
        -1.0,
        "perf.graph_per_req_extra_ms: expected a value >= -per_req_step_ms",
    ),
    ("backends.fa3", "explodes", "backends.fa3.behaviour: expected one of ok, nan, nan_batched, garbage"),
    (
        "backends.fa3",
        {"behaviour": "ok", "speed": 2},
        "backends.fa3.speed: expected one of the keys behaviour",
    ),
    ("backends.fa3", {"decode_factor": -1}, "backends.fa3.decode_factor: expected a number > 0 or a mapping"),
    (
        "backends.fa3",
        {"decode_factor": {"big": 1.0}},
        "backends.fa3.decode_factor.big: expected a batch size",
    ),
    (
        "backends.fa3",
        {"decode_factor": {8: 0}},
        "backends.fa3.decode_factor.8: expected a factor > 0 (got 0)",
    ),
    ("backends.fa3", {"prefill_factor": "fast"}, "backends.fa3.prefill_factor: expected a number > 0"),
    ("backends.fa3", {"nan_min_batch": 4}, "backends.fa3.behaviour: expected nan or nan_batched when"),
    (
        "backends.fa3",
        {"behaviour": "nan", "nan_min_batch": 0},
        "backends.fa3.nan_min_batch: expected an integer >= 1",
    ),
    ("backends.fa3", {"kv_dtype": "fp9"}, "backends.fa3.kv_dtype: expected one of fp8_e4m3"),
    ("flavour", "mild", "flavour: expected one of the keys name, description, gpus"),
    ("backends", ["ok"], "backends: expected a mapping {backend name: behaviour or rule} (got list)"),
]


# ids stable across processes (pytest-xdist compares the workers' collections)
CASE_IDS = [f"{p}={'<deleted>' if v is _DELETE else repr(v)}"[:40] for p, v, _ in CASES]


@pytest.mark.parametrize(("path", "value", "message"), CASES, ids=CASE_IDS)
def test_bad_scenario_is_one_line_naming_file_key_and_expectation(
    path: str, value: Any, message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_scenario(_with(path, value), "my-scenario.yaml")
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith("scenario: my-scenario.yaml: ")
    assert message in text, text


def test_bad_yaml_and_missing_file_are_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpus: [unclosed\n")
    with pytest.raises(ConfigError) as info:
        load_scenario(str(bad))
    assert "\n" not in str(info.value) and str(bad) in str(info.value)
    with pytest.raises(ConfigError, match="no such file"):
        load_scenario(str(tmp_path / "missing.yaml"))


def test_the_simulator_exits_2_with_the_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "s.yaml"
    bad.write_text(yaml.safe_dump(_with("gpus.total_mib", "lots")))
    proc = subprocess.run(
        [sys.executable, "-m", "tuner.sim", "--model-path", "m", "--sim-scenario", str(bad)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"tuner.sim: error: scenario: {bad}: gpus.total_mib: expected an integer > 0 (got 'lots')"
    )


@pytest.mark.parametrize("name", builtin_names())
def test_shipped_scenarios_are_valid(name: str) -> None:
    assert load_scenario(name).name == name


def test_backend_rules_parse_factors_and_nan_conditions() -> None:
    s = load_scenario("dsv32-fp8-h200")
    sparse = s.backend("flashmla_sparse")
    assert sparse.decode_factor == ((1, 1.1), (64, 0.85)) and sparse.prefill_factor == 0.8
    assert sparse.nan_min_batch == 64 and sparse.nan_graph_only
    assert load_scenario("glm5-nvfp4-sm120").backend("flashmla_kv").nan_min_batch == 2  # nan_batched
