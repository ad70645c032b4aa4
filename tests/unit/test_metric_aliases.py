"""bench_serving's names in objectives and constraints, and its result format from our measurements."""

from __future__ import annotations

import json

import pytest

from tests.unit.test_bench_metrics import make_record
from tuner.bench.metrics import compute_metrics
from tuner.bench.serving_json import BENCH_SERVING_KEYS, bench_serving_record
from tuner.bench.settings import BenchSettings, LoadPoint
from tuner.bench.types import LoadPointResult
from tuner.errors import ConfigError
from tuner.metrics import ALIASES, METRICS, bench_values, canonical
from tuner.space.goals import Objective, Slo

# sglang.bench_serving 0.5.23's result keys, in its order (benchmark/serving.py, the `result` dict).
SGLANG_KEYS = [
    "tag",
    "backend",
    "dataset_name",
    "request_rate",
    "max_concurrency",
    "sharegpt_output_len",
    "random_input_len",
    "random_output_len",
    "random_range_ratio",
    "server_info",
    "duration",
    "completed",
    "total_input_tokens",
    "total_input_text_tokens",
    "total_input_vision_tokens",
    "total_output_tokens",
    "total_output_tokens_retokenized",
    "request_throughput",
    "input_throughput",
    "output_throughput",
    "total_throughput",
    "mean_e2e_latency_ms",
    "median_e2e_latency_ms",
    "std_e2e_latency_ms",
    "p90_e2e_latency_ms",
    "p95_e2e_latency_ms",
    "p99_e2e_latency_ms",
    "mean_ttft_ms",
    "median_ttft_ms",
    "std_ttft_ms",
    "p90_ttft_ms",
    "p95_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "std_tpot_ms",
    "p90_tpot_ms",
    "p95_tpot_ms",
    "p99_tpot_ms",
    "mean_itl_ms",
    "median_itl_ms",
    "std_itl_ms",
    "p90_itl_ms",
    "p95_itl_ms",
    "p99_itl_ms",
    "concurrency",
    "accept_length",
    "max_output_tokens_per_s",
    "max_concurrent_requests",
]


def test_every_alias_names_a_registered_metric() -> None:
    assert all(target in METRICS for target in ALIASES.values())
    assert canonical("p99_ttft_ms") == "ttft_p99_ms" and canonical("ttft_p99_ms") == "ttft_p99_ms"


def test_a_constraint_and_an_objective_in_bench_serving_names_work() -> None:
    slo = Slo.model_validate("p99_ttft_ms <= 2000")
    assert (slo.metric, slo.op, slo.bound) == ("ttft_p99_ms", "<=", 2000.0)
    objective = Objective.model_validate("median_e2e_latency_ms")
    assert (objective.metric, objective.direction) == ("e2e_p50_ms", "minimize")
    with pytest.raises((ConfigError, ValueError), match="bench_serving"):
        Slo.model_validate("p42_ttft_ms <= 1")


def _point() -> LoadPointResult:
    records = [
        make_record(index=0, sent=0.0, ttft=0.1, gaps=(0.01, 0.02, 0.03), out=4),
        make_record(index=1, sent=0.2, ttft=0.3, gaps=(0.05,), out=2),
    ]
    metrics = compute_metrics(records, t0_s=0.0, t1_s=2.0, concurrency=2)
    return LoadPointResult(
        point=LoadPoint(concurrency=2),
        metrics=metrics,
        records=tuple(records),
        warmup_requests=0,
        flushed=True,
    )


def test_the_bench_serving_record_has_exactly_its_keys_and_agrees_with_the_nested_form() -> None:
    point = _point()
    record = bench_serving_record(point, BenchSettings())
    assert list(record) == SGLANG_KEYS == list(BENCH_SERVING_KEYS)
    m = point.metrics
    assert record["duration"] == m.duration_s and record["completed"] == m.completed
    assert record["p99_ttft_ms"] == m.ttft.p99_ms and record["median_itl_ms"] == m.itl.median_ms
    assert record["p95_e2e_latency_ms"] == m.e2e.p95_ms and record["std_tpot_ms"] == m.tpot.std_ms
    nested = bench_values(m)
    for alias, name in ALIASES.items():
        assert record[alias] == pytest.approx(nested[name]), alias
    assert json.loads(json.dumps(record))["max_concurrency"] == 2
