"""A trial's result: what the stages produced for one configuration, success or failure.

It sits above the stages (it holds a GateResult and a BenchResult) and below everything that
reads a result (metrics, the judge, the store, the study), so no value type depends on a stage.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from tuner.bench.types import BenchResult
from tuner.config import (
    Failure,
    GpuInfo,
    LaunchSpec,
    Outcome,
    ServerFacts,
    ServerLoad,
    StageTimings,
    TrialConfig,
)
from tuner.gate.checks import GateResult

__all__ = ["TrialResult"]


@dataclass(frozen=True, kw_only=True, slots=True)
class TrialResult:
    """Everything one trial produced, success or failure."""

    config: TrialConfig
    launch: LaunchSpec | None
    outcome: Outcome
    failure: Failure | None = None
    sglang_version: str
    gpus: tuple[GpuInfo, ...] = ()
    server: ServerFacts | None = None
    gate: GateResult | None = None
    bench: BenchResult | None = None
    load: ServerLoad | None = None  # the scheduler's batch under the benchmark (its log lines)
    min_free_mib: tuple[int, ...] | None = None
    log_excerpt: str = ""
    started_at: datetime
    finished_at: datetime
    timings: StageTimings = field(default_factory=StageTimings)
    # metrics a stage measured beyond the benchmark's objective point (the capacity objective's load search)
    stage_metrics: Mapping[str, float | None] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()  # kept but noisy: e.g. the benchmark client starved by other processes
    effective: TrialConfig | None = None  # what SGLang reports it ran, when that differs from `config`
    effective_key: str | None = None  # the launch key of `effective` (the key of what ran)

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.OK
