"""Builders of whole trial results and their recording: a TrialResult with every part filled.

`make_result` is a measured trial (gate, benchmark, GPUs, secrets in argv and env to redact);
`record` writes one to a store the way the study does, judged by the metrics it carries.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from support.results import make_bench, make_gate

from tuner.bench.types import BenchResult
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
    Verdict,
)
from tuner.metrics import trial_values
from tuner.result import TrialResult
from tuner.store.sql import SqlStore

__all__ = [
    *("CET", "T0", "make_bench", "make_config", "make_gate", "make_launch", "make_result", "record"),
    "verdict",
]

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=timezone.utc)
CET = timezone(timedelta(hours=2))


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
    bench: BenchResult | None = None,
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
        gate=make_gate() if ok else None,
        bench=(bench or make_bench()) if ok else None,
        min_free_mib=(2100, 1900) if ok else None,
        log_excerpt="server ready" if ok else "",
        started_at=T0.astimezone(CET),
        finished_at=finished_at,
        timings=StageTimings(launch_s=212.5, gate_s=4.2, bench_s=60.0, overhead_s=1.5),
    )
    return replace(result, **changes)


def verdict(
    outcome: Outcome = Outcome.OK, *, feasible: bool | None = None, result: TrialResult | None = None
) -> Verdict:
    """A verdict on `result` (its metrics as the judge computes them; none without a result)."""
    ok = outcome is Outcome.OK
    metrics = trial_values(result) if result is not None else {}
    feasible = ok if feasible is None else feasible
    return Verdict(outcome=outcome, values=(), constraints={}, feasible=feasible, metrics=metrics)


def record(store: SqlStore, result: TrialResult | None = None, **kwargs: Any) -> int:
    result = result or make_result()
    args: dict[str, Any] = dict(
        study="glm5-v1",
        trial_number=0,
        params={"mem": 0.85},
        config_hash="h1",
        verdict=verdict(result.outcome, result=result),
    )
    args.update(kwargs)
    return store.record(result, **args)


