"""The ResultStore contract, run against SqlStore on a SQLite file and on in-memory SQLite.

Gate and benchmark results are stand-in dataclasses of the shape tuner.gate and
tuner.bench produce (enums, None, nested tuples, paths, datetimes), so the store
is checked against what it must handle generically, not against one version of them.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from enum import Enum
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tuner.bench.settings import LoadPoint
from tuner.config import (
    CudaGraph,
    Failure,
    GpuInfo,
    LaunchSpec,
    Outcome,
    Phase,
    ServerFacts,
    StageTimings,
    TrialConfig,
    TrialResult,
)
from tuner.errors import StoreError
from tuner.store import SqlStore

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=timezone.utc)
CET = timezone(timedelta(hours=2))


class Verdict(str, Enum):
    PASS = "pass"
    NAN = "nan"


class ErrorKind(str, Enum):
    TIMEOUT = "timeout"


@dataclass(frozen=True, kw_only=True, slots=True)
class GateAnswer:
    name: str
    text: str
    tokens: int
    passed: bool
    finish_reason: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class GateResult:
    verdict: Verdict
    reason: str
    answers: tuple[GateAnswer, ...]
    nan_log_lines: tuple[str, ...] = ()
    burst_size: int | None = None
    duration_s: float = 0.0


@dataclass(frozen=True, kw_only=True, slots=True)
class BenchMetrics:
    completed: int
    failed: int
    duration_s: float
    output_throughput: float
    total_throughput: float
    request_throughput: float
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    tpot_p50_ms: float | None
    tpot_p99_ms: float | None
    itl_p50_ms: float | None
    itl_p99_ms: float | None
    e2e_p50_ms: float | None
    e2e_p99_ms: float | None
    concurrency: float | None


@dataclass(frozen=True, kw_only=True, slots=True)
class RequestRecord:
    index: int
    success: bool
    ttft_ms: float | None
    e2e_ms: float | None
    output_tokens: int
    itl_ms: tuple[float, ...]
    error: str | None = None
    error_kind: ErrorKind | None = None
    sent_at: datetime | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class LoadPointResult:
    point: LoadPoint
    metrics: BenchMetrics | None
    records: tuple[RequestRecord, ...]
    trace_path: Path | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class BenchResult:
    points: tuple[LoadPointResult, ...]
    crashed: bool = False
    client_bound: bool = False
    client_cpu_share: float = 0.1
    loop_lag_p99_ms: float | None = None
    duration_s: float = 60.0


def make_metrics(scale: float = 1.0) -> BenchMetrics:
    return BenchMetrics(
        completed=320,
        failed=0,
        duration_s=55.0,
        output_throughput=1500.0 * scale,
        total_throughput=3000.0 * scale,
        request_throughput=5.5 * scale,
        ttft_p50_ms=80.0,
        ttft_p99_ms=None,  # missing stays missing
        tpot_p50_ms=12.0,
        tpot_p99_ms=float("nan"),  # NaN is missing too
        itl_p50_ms=11.0,
        itl_p99_ms=30.0,
        e2e_p50_ms=9000.0,
        e2e_p99_ms=12000.0,
        concurrency=60.5 * scale,
    )


def make_records(n: int, *, itl_len: int = 3) -> tuple[RequestRecord, ...]:
    return tuple(
        RequestRecord(
            index=i,
            success=i % 10 != 9,
            ttft_ms=50.0 + i % 7 if i % 10 != 9 else None,
            e2e_ms=900.0 + i % 13,
            output_tokens=256,
            itl_ms=tuple(10.0 + j for j in range(itl_len)),
            error="read timeout" if i % 10 == 9 else None,
            error_kind=ErrorKind.TIMEOUT if i % 10 == 9 else None,
            sent_at=T0 + timedelta(milliseconds=i),
        )
        for i in range(n)
    )


def make_bench(*, n_records: int = 4, client_bound: bool = False) -> BenchResult:
    return BenchResult(
        points=(
            LoadPointResult(
                point=LoadPoint(concurrency=8), metrics=make_metrics(0.25), records=make_records(2)
            ),
            LoadPointResult(
                point=LoadPoint(concurrency=64),
                metrics=make_metrics(),
                records=make_records(n_records),
                trace_path=Path("/runs/t1/c64.jsonl"),
            ),
        ),
        client_bound=client_bound,
    )


def make_gate() -> GateResult:
    return GateResult(
        verdict=Verdict.PASS,
        reason="all answers correct",
        answers=(
            GateAnswer(name="capital", text="Paris", tokens=2, passed=True, finish_reason="stop"),
            GateAnswer(name="arithmetic", text="42", tokens=1, passed=True),
        ),
        nan_log_lines=(),
        burst_size=16,
        duration_s=4.2,
    )


def make_config(mem: float = 0.85) -> TrialConfig:
    return TrialConfig(
        mem_fraction_static=mem,
        cuda_graph=CudaGraph(enabled=True, bs=(1, 2, 4, 8)),
        sparse_prefill_backend="flashmla_sparse",
        sparse_decode_backend="flashmla_kv",
        flags=(("chunked-prefill-size", 8192), ("enable-metrics", True)),
    )


def make_launch(*, api_key: str = "sk-test-0000", hf_token: str = "hf_test_1111") -> LaunchSpec:
    return LaunchSpec(
        argv=("python", "-m", "sglang.launch_server", "--mem-fraction-static", "0.85", "--api-key", api_key),
        env=(("CUDA_VISIBLE_DEVICES", "0,1"), ("HF_TOKEN", hf_token)),
        port=30001,
        gpus=(0, 1),
        log_path=Path("/runs/t1/server.log"),
        sglang_version="0.5.9",
    )


def make_result(
    outcome: Outcome = Outcome.OK,
    *,
    finished_at: datetime = T0 + timedelta(minutes=5),
    bench: Any = None,  # a stand-in BenchResult or the real one
    **changes: Any,
) -> TrialResult:
    ok = outcome is Outcome.OK
    failure = (
        None
        if ok
        else Failure(
            outcome=outcome,
            phase=Phase.LAUNCH,
            message=f"{outcome.value} at start",
            excerpt="CUDA out of memory",
            exit_code=1,
        )
    )
    result = TrialResult(
        config=make_config(),
        launch=make_launch(),
        outcome=outcome,
        failure=failure,
        sglang_version="0.5.9",
        gpus=(
            GpuInfo(
                index=0,
                uuid="GPU-aaa",
                name="RTX PRO 6000",
                compute_capability="12.0",
                total_mib=97887,
                driver="580.65",
            ),
            GpuInfo(
                index=1,
                uuid="GPU-bbb",
                name="RTX PRO 6000",
                compute_capability="12.0",
                total_mib=97887,
                driver="580.65",
            ),
        ),
        server=ServerFacts(
            base_url="http://127.0.0.1:30001",
            startup_s=212.5,
            kv_tokens=412_000,
            kv_tokens_log=411_904,
            captured_bs=(1, 2, 4, 8),
            cuda_graph=True,
        )
        if ok
        else None,
        gate=make_gate() if ok else None,  # type: ignore[arg-type]  # stand-in of tuner.gate.GateResult
        bench=(bench or make_bench()) if ok else None,  # type: ignore[arg-type]  # stand-in
        min_free_mib=(2100, 1900) if ok else None,
        log_excerpt="server ready" if ok else "",
        started_at=T0.astimezone(CET),
        finished_at=finished_at,
        timings=StageTimings(launch_s=212.5, gate_s=4.2, bench_s=60.0, overhead_s=1.5),
    )
    return replace(result, **changes)


def record(store: SqlStore, result: TrialResult | None = None, **kwargs: Any) -> int:
    args: dict[str, Any] = dict(
        study="glm5-v1", trial_number=0, params={"mem": 0.85}, config_hash="h1", feasible=True
    )
    args.update(kwargs)
    return store.record(result or make_result(), **args)


@pytest.fixture(params=["file", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlStore]:
    url = f"sqlite:///{tmp_path / 'experiments.db'}" if request.param == "file" else "sqlite://"
    with SqlStore(url, hostname="node-1", pid=4242) as opened:
        yield opened


class TestResultStoreContract:
    def test_full_result_round_trips(self, store: SqlStore) -> None:
        trial_id = record(store, trial_number=3)

        (got,) = store.trials("glm5-v1")
        assert got.id == trial_id
        assert (got.study, got.trial_number, got.attempt) == ("glm5-v1", 3, 1)
        assert got.outcome is Outcome.OK and got.failure_phase is None and got.exit_code is None
        assert got.feasible is True and got.config_hash == "h1" and got.params == {"mem": 0.85}
        assert got.config["cuda_graph"] == {"enabled": True, "max_bs": None, "bs": [1, 2, 4, 8]}
        assert got.config["flags"] == [["chunked-prefill-size", 8192], ["enable-metrics", True]]
        assert got.argv is not None and got.argv[-2:] == ("--api-key", "***")
        assert got.env == {"CUDA_VISIBLE_DEVICES": "0,1", "HF_TOKEN": "***"}
        assert got.launch is not None and got.launch["gpus"] == [0, 1] and got.launch["port"] == 30001
        assert [g["uuid"] for g in got.gpus] == ["GPU-aaa", "GPU-bbb"] and got.gpus[0]["driver"] == "580.65"
        assert (got.startup_s, got.kv_tokens, got.kv_tokens_log) == (212.5, 412_000, 411_904)
        assert got.captured_bs == (1, 2, 4, 8)
        assert got.min_free_mib_per_gpu == (2100, 1900) and got.min_free_mib == 1900
        assert (got.gate_verdict, got.gate_reason) == ("pass", "all answers correct")
        assert got.gate_answers is not None and got.gate_answers[1] == {
            "name": "arithmetic",
            "text": "42",
            "tokens": 1,
            "passed": True,
            "finish_reason": None,
        }
        assert got.gate == {"nan_log_lines": [], "burst_size": 16, "duration_s": 4.2}
        assert got.log_path == "/runs/t1/server.log" and got.log_excerpt == "server ready"
        assert got.timings["launch_s"] == 212.5
        assert got.started_at == T0 and got.started_at.tzinfo == timezone.utc
        assert got.finished_at == T0 + timedelta(minutes=5)
        assert (got.hostname, got.pid, got.dedup_of, got.confirm_of) == ("node-1", 4242, None, None)

    def test_objective_metrics_come_from_the_chosen_point(self, store: SqlStore) -> None:
        record(store)
        record(store, objective_point=0)
        default, first = store.trials("glm5-v1")

        assert default.objective_point == "c64" and first.objective_point == "c8"
        assert default.metrics["output_throughput"] == 1500.0 and first.metrics["output_throughput"] == 375.0
        assert default.metrics["ttft_p99_ms"] is None  # None in, None out
        assert default.metrics["tpot_p99_ms"] is None  # NaN in, None out, never 0
        assert default.metrics["e2e_p99_ms"] == 12000.0 and default.metrics["concurrency"] == 60.5
        assert default.client_bound is False
        assert default.bench is not None
        points = default.bench["points"]
        assert [p["point"]["concurrency"] for p in points] == [8, 64]
        assert [p["n_records"] for p in points] == [2, 4]
        assert points[0]["metrics"]["output_throughput"] == 375.0
        assert points[1]["trace_path"] == "/runs/t1/c64.jsonl"

    def test_failed_trial_round_trips(self, store: SqlStore) -> None:
        record(store, make_result(Outcome.OOM), feasible=False)

        (got,) = store.trials("glm5-v1")
        assert got.outcome is Outcome.OOM and got.failure_phase is Phase.LAUNCH
        assert got.failure_message == "oom at start" and got.exit_code == 1
        assert got.log_excerpt == "CUDA out of memory"  # the failure's excerpt when the result has none
        assert got.feasible is False
        assert got.server is None and got.kv_tokens is None and got.captured_bs is None
        assert got.gate is None and got.gate_verdict is None and got.bench is None
        assert set(got.metrics.values()) == {None}

    def test_request_records_come_back_per_point(self, store: SqlStore) -> None:
        trial_id = record(store)

        frame = store.requests(trial_id)
        assert len(frame) == 6
        assert list(frame["point_label"]) == ["c8"] * 2 + ["c64"] * 4
        assert list(frame["index"]) == [0, 1, 0, 1, 2, 3]
        assert frame["itl_ms"].iloc[0] == [10.0, 11.0, 12.0]
        assert frame["sent_at"].iloc[3] == (T0 + timedelta(milliseconds=1)).isoformat()
        assert store.requests(trial_id + 1).empty

    def test_failed_requests_keep_their_error(self, store: SqlStore) -> None:
        bench = make_bench(n_records=10)
        trial_id = record(store, make_result(bench=bench))

        frame = store.requests(trial_id)
        failed = frame[~frame["success"]]
        assert len(failed) == 1
        assert failed["error_kind"].iloc[0] == "timeout" and failed["error"].iloc[0] == "read timeout"
        assert pd.isna(failed["ttft_ms"].iloc[0])

    def test_find_by_hash_returns_latest_reusable_result(self, store: SqlStore) -> None:
        def at(hour: int) -> datetime:
            return T0 + timedelta(hours=hour)

        ok_id = record(store, make_result(finished_at=at(1)))
        record(store, make_result(Outcome.INTERRUPTED, finished_at=at(2)))
        record(store, make_result(Outcome.INFRA_ERROR, finished_at=at(3)))
        record(store, make_result(finished_at=at(4)), dedup_of=ok_id)
        record(store, make_result(finished_at=at(5), bench=make_bench(client_bound=True)))
        found = store.find_by_hash("glm5-v1", "h1")
        assert found is not None and found.id == ok_id

        oom_id = record(store, make_result(Outcome.OOM, finished_at=at(6)), feasible=False)
        found = store.find_by_hash("glm5-v1", "h1")
        assert found is not None and found.id == oom_id  # a crash says as much about the config

        assert store.find_by_hash("glm5-v1", "other") is None
        assert store.find_by_hash("other-study", "h1") is None

    def test_attempt_counts_runs_of_the_same_config(self, store: SqlStore) -> None:
        record(store)
        record(store)
        record(store, config_hash="h2")
        record(store, study="other")

        assert [t.attempt for t in store.trials("glm5-v1")] == [1, 2, 1]
        assert [t.attempt for t in store.trials("other")] == [1]

    def test_dedup_and_confirm_links(self, store: SqlStore) -> None:
        first = record(store)
        copy = record(store, dedup_of=first, trial_number=1)
        confirm = record(store, confirm_of=first, trial_number=2)

        by_id = {t.id: t for t in store.trials("glm5-v1")}
        assert by_id[copy].dedup_of == first and by_id[copy].confirm_of is None
        assert by_id[confirm].confirm_of == first and by_id[confirm].dedup_of is None

    def test_link_to_missing_trial_is_a_store_error(self, store: SqlStore) -> None:
        with pytest.raises(StoreError, match="experiments database sqlite://"):
            record(store, dedup_of=999)
        assert store.trials("glm5-v1") == ()  # the failed transaction left nothing behind

    def test_studies_are_listed_once_sorted(self, store: SqlStore) -> None:
        assert store.studies() == ()
        record(store, study="b")
        record(store, study="a")
        record(store, study="b")

        assert store.studies() == ("a", "b")

    def test_usable_from_another_thread(self, store: SqlStore) -> None:
        record(store)
        with ThreadPoolExecutor(max_workers=1) as pool:
            assert pool.submit(store.studies).result() == ("glm5-v1",)
