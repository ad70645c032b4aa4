"""Every kind of space-file mistake is one ConfigError line naming the key and file:line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.errors import ConfigError
from tuner.space.loader import load_space

BASE = """\
name: t
sglang_version: "0.5.9"
fixed_flags:
  model-path: /m
params:
  - name: mem-fraction-static
    kind: float
    low: 0.8
    high: 0.95
  - kind: cuda_graph
    choices: [off, 64]
  - kind: backend_pair
    choices: [trtllm/trtllm]
"""  # the next line appended is line 14

BASELINE = "  - {mem-fraction-static: 0.85, cuda_graph: off, sparse_backends: trtllm/trtllm"


def edit(old: str, new: str) -> str:
    assert old in BASE
    return BASE.replace(old, new, 1)


# (id, yaml text, key expected in the message, line, phrase expected in the message)
CASES = [
    ("unknown-top-key", BASE + "colour: blue\n", "colour", 14, "unknown key; allowed: name, version"),
    (
        "unknown-param-key",
        edit("    high: 0.95\n", "    high: 0.95\n    hihg: 1\n"),
        "hihg",
        10,
        "unknown key",
    ),
    ("duplicate-key", BASE + "name: again\n", "name", 14, "duplicate key (first given on line 1)"),
    ("wrong-type", BASE + "budget:\n  n_trials: many\n", "budget.n_trials", 15, "expected an integer"),
    (
        "grace-shorter-than-two-heartbeats",
        BASE + "workers:\n  heartbeat: 30s\n  grace: 45s\n",
        "workers.grace",
        16,
        "at least twice heartbeat (30 s), got 45 s",
    ),
    (
        "inverted-range",
        edit("low: 0.8", "low: 0.96"),
        "mem-fraction-static.high",
        9,
        "high must be ≥ low 0.96",
    ),
    ("empty-range", edit("high: 0.95", "high: 0.8"), "mem-fraction-static.high", 9, "empty range"),
    (
        "mem-fraction-above-1",
        edit("high: 0.95", "high: 1.3"),
        "mem-fraction-static.high",
        9,
        "expected a number in (0, 1] (got 1.3)",
    ),
    (
        "step-does-not-divide",
        edit("    high: 0.95\n", "    high: 0.95\n    step: 0.04\n"),
        "mem-fraction-static.step",
        10,
        "does not divide the range [0.8, 0.95]",
    ),
    (
        "log-low-not-positive",
        BASE + "  - {flag: chunked-prefill-size, kind: int, low: 0, high: 8192, log: true}\n",
        "chunked-prefill-size.low",
        14,
        "log: true needs low > 0",
    ),
    (
        "duplicate-param",
        BASE + "  - {name: cuda_graph, kind: cuda_graph, choices: [off]}\n",
        "cuda_graph.name",
        14,
        "duplicate param name 'cuda_graph'",
    ),
    (
        "unknown-kind",
        BASE + "  - {name: x, kind: list}\n",
        "params[3].kind",
        14,
        "expected one of float, int",
    ),
    (
        "unknown-flag-pinned",
        edit("  model-path: /m\n", "  model-path: /m\n  dsa-prefill-backend: trtllm\n"),
        "dsa-prefill-backend",
        5,
        "unknown flag --dsa-prefill-backend for SGLang 0.5.9; it exists in SGLang 0.5.13",
    ),
    (
        "unknown-flag-auto",
        edit('"0.5.9"', "auto")
        .replace("    choices: [trtllm/trtllm]\n", "    choices: [trtllm/trtllm]\n")
        .replace("  model-path: /m\n", "  model-path: /m\n  enable-nan-detection: true\n"),
        "enable-nan-detection",
        5,
        "for SGLang 0.5.23 (the newest known release, checked because sglang_version is auto",
    ),
    (
        "flag-param-unknown",
        BASE + "  - {flag: cuda-graph-bs-decode, kind: bool}\n",
        "cuda-graph-bs-decode.flag",
        14,
        "unknown flag",
    ),
    (
        "bad-backend-choice",
        edit("[trtllm/trtllm]", "[trtllm/flashinfer_sparse_mla]"),
        "sparse_backends.choices",
        13,
        "decode backend 'flashinfer_sparse_mla' is not valid for SGLang 0.5.9",
    ),
    (
        "bad-flag-choice",
        BASE + "  - {flag: kv-cache-dtype, kind: categorical, choices: [fp8_e4m3, nvfp4]}\n",
        "kv-cache-dtype.choices",
        14,
        "expected one of auto, fp8_e5m2",
    ),
    (
        "bool-on-valued-flag",
        BASE + "  - {flag: chunked-prefill-size, kind: bool}\n",
        "chunked-prefill-size.kind",
        14,
        "cannot be kind bool",
    ),
    (
        "cuda-graph-not-ascending",
        edit("[off, 64]", "[off, [4, 2, 1]]"),
        "cuda_graph.choices",
        11,
        "strictly ascending",
    ),
    (
        "condition-unknown-param",
        BASE + "  - {flag: chunked-prefill-size, kind: int, low: 1, high: 8, when: {nope: 1}}\n",
        "when.nope",
        14,
        "condition on unknown param 'nope'",
    ),
    (
        "condition-later-param",
        edit("    high: 0.95\n", "    high: 0.95\n    when: {cuda_graph: off}\n"),
        "when.cuda_graph",
        10,
        "params may only depend on params defined before them",
    ),
    (
        "condition-bad-value",
        BASE + "  - {flag: chunked-prefill-size, kind: int, low: 1, high: 8, when: {cuda_graph: 32}}\n",
        "when.cuda_graph",
        14,
        "max:32 is not a value of cuda_graph",
    ),
    (
        "forbidden-unknown-param",
        BASE + "forbidden:\n  - {bogus: 1}\n",
        "forbidden[0].bogus",
        15,
        "forbidden combination on unknown param 'bogus'",
    ),
    (
        "forbidden-unknown-value",
        BASE + "forbidden:\n  - {sparse_backends: tilelang/tilelang}\n",
        "forbidden[0].sparse_backends",
        15,
        "tilelang/tilelang is not a value of sparse_backends",
    ),
    (
        "baseline-unknown-param",
        BASE + "baselines:\n" + BASELINE + ", extra: 1}\n",
        "baselines[0].extra",
        15,
        "unknown param 'extra'",
    ),
    (
        "baseline-out-of-range",
        BASE + "baselines:\n" + BASELINE.replace("0.85", "0.99") + "}\n",
        "baselines[0].mem-fraction-static",
        15,
        "0.99 is outside the space",
    ),
    (
        "baseline-missing-param",
        BASE + "baselines:\n  - {mem-fraction-static: 0.85, cuda_graph: off}\n",
        "baselines[0].sparse_backends",
        15,
        "missing",
    ),
    (
        "baseline-forbidden",
        BASE + "forbidden:\n  - {cuda_graph: off}\nbaselines:\n" + BASELINE + "}\n",
        "baselines[0]",
        17,
        "baseline is forbidden",
    ),
    (
        "objective-unknown",
        BASE + "objectives: [throughput]\n",
        "objectives[0]",
        14,
        "unknown metric 'throughput'",
    ),
    (
        "objective-direction",
        BASE + "objectives:\n  - {metric: kv_tokens, direction: minimize}\n",
        "objectives[0].direction",
        15,
        "expected maximize",
    ),
    (
        "slo-syntax",
        BASE + "constraints:\n  - ttft_p99_ms == 2000\n",
        "constraints[0]",
        15,
        'expected "METRIC <= NUMBER"',
    ),
    (
        "slo-metric",
        BASE + "constraints:\n  - ttft_p42_ms <= 2000\n",
        "constraints[0]",
        15,
        "unknown metric 'ttft_p42_ms'",
    ),
    ("bad-duration", BASE + "budget:\n  timeout: 8 hours\n", "budget.timeout", 15, "expected a duration"),
    ("engine-kind", BASE + "engine:\n  kind: vllm\n", "engine.kind", 15, "expected one of sglang, sim"),
    ("sim-without-scenario", BASE + "engine:\n  kind: sim\n", "engine.scenario", 15, "needs a scenario"),
    (
        "sim-version-mismatch",
        BASE + "engine: {kind: sim, scenario: tiny-fast, sim_sglang_version: '0.5.23'}\n",
        "sglang_version",
        2,
        "differs from engine.sim_sglang_version 0.5.23",
    ),
    (
        "env-not-string",
        BASE + "env:\n  NCCL_MIN_NCHANNELS: 4\n",
        "env.NCCL_MIN_NCHANNELS",
        15,
        "env value must be a string; quote it",
    ),
    (
        "env-unset-var",
        BASE + "env:\n  HF_TOKEN: ${TUNER_TEST_SURELY_UNSET}\n",
        "env.HF_TOKEN",
        15,
        "environment variable TUNER_TEST_SURELY_UNSET is not set",
    ),
    (
        "fixed-flag-is-param",
        edit("  model-path: /m\n", "  model-path: /m\n  mem-fraction-static: 0.9\n"),
        "fixed_flags.mem-fraction-static",
        5,
        "also searched by param 'mem-fraction-static'",
    ),
    (
        "fixed-flag-port",
        edit("  model-path: /m\n", "  model-path: /m\n  port: 30000\n"),
        "fixed_flags.port",
        5,
        "set by the tuner for every trial",
    ),
    (
        "fixed-flag-bad-value",
        edit("  model-path: /m\n", "  model-path: /m\n  tp-size: eight\n"),
        "fixed_flags.tp-size",
        5,
        "expected an integer (got 'eight')",
    ),
    (
        "model-path-missing",
        edit("  model-path: /m\n", "  tp-size: 8\n"),
        "fixed_flags",
        4,
        "model-path is required",
    ),
    ("bad-version", edit('"0.5.9"', "latest"), "sglang_version", 2, "expected auto or a release"),
    ("version-too-old", edit('"0.5.9"', '"0.4.0"'), "sglang_version", 2, "no option table is known"),
    (
        "gate-bad-regex",
        BASE + "gate:\n  prompts:\n    - {name: x, prompt: hi, expect_regex: '('}\n",
        "gate.prompts[0].expect_regex",
        16,
        "not a valid regular expression",
    ),
    (
        "bench-objective-point",
        BASE + "bench:\n  objective_point: 3\n",
        "bench.objective_point",
        15,
        "must index one of the 1 load points",
    ),
    ("gpus-type", BASE + "gpus: [0, one]\n", "gpus", 14, "expected all or a list of GPU indices"),
    ("yaml-syntax", BASE + "budget: {n_trials: 3\n", "", 15, "not valid YAML"),
]


@pytest.mark.parametrize(("text", "key", "line", "phrase"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_mistake_reports_key_file_and_line(
    tmp_path: Path, text: str, key: str, line: int, phrase: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_space(path, environ={})
    message = str(info.value)
    assert "\n" not in message
    assert message.endswith(f"in {path}:{line}") or f"in {path}:{line}" in message, message
    assert key in message, message
    assert phrase in message, message


def test_base_document_itself_is_valid(tmp_path: Path) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text(BASE)
    assert load_space(path, environ={}).study_name == "t-v1"


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read space file"):
        load_space(tmp_path / "absent.yaml")
