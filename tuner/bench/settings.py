"""What the benchmark stage runs: workload, load points, timeouts (from the space file)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path


class WorkloadKind(str, Enum):
    """Where prompts come from."""

    RANDOM = "random"  # token-id prompts of fixed or ranged length (no tokenizer needed)
    SHAREGPT = "sharegpt"  # a ShareGPT-format JSON file
    JSONL = "jsonl"  # SGLang auto_benchmark JSONL or the user's own JSONL


class Api(str, Enum):
    """Which OpenAI-compatible endpoint the load goes to."""

    COMPLETIONS = "completions"  # /v1/completions (accepts token-id prompts)
    CHAT = "chat"  # /v1/chat/completions


@dataclass(frozen=True, kw_only=True, slots=True)
class Workload:
    """The requests of one benchmark run."""

    kind: WorkloadKind = WorkloadKind.RANDOM
    input_len: int = 1024
    output_len: int = 1024
    range_ratio: float = 1.0  # SGLang semantics: lengths uniform on [max(1, L*ratio), L]; 1.0 = fixed
    path: Path | None = None
    api: Api = Api.COMPLETIONS
    seed: int = 1


@dataclass(frozen=True, kw_only=True, slots=True)
class LoadPoint:
    """One load level: a fixed concurrency, or a request rate (Poisson / gamma), or both."""

    concurrency: int | None = 64
    request_rate: float | None = None  # requests/s; None = all at once (bounded by concurrency)
    burstiness: float = 1.0  # gamma shape; 1.0 = Poisson
    num_prompts: int | None = None  # None = 5 x concurrency (at least 32)

    @property
    def label(self) -> str:
        parts = []
        if self.concurrency is not None:
            parts.append(f"c{self.concurrency}")
        if self.request_rate is not None:
            parts.append(f"r{self.request_rate:g}")
        return "-".join(parts) or "unbounded"

    @property
    def prompts(self) -> int:
        if self.num_prompts is not None:
            return self.num_prompts
        return max(32, 5 * (self.concurrency or 32))


@dataclass(frozen=True, kw_only=True, slots=True)
class RequestTimeouts:
    """Per-request and per-stage limits, in seconds (reference bench-metrics P19)."""

    connect_s: float = 10.0
    first_byte_s: float = 600.0
    idle_read_s: float = 60.0
    stage_deadline_s: float = 3600.0


@dataclass(frozen=True, kw_only=True, slots=True)
class BenchSettings:
    """The whole benchmark stage of one trial."""

    workload: Workload = field(default_factory=Workload)
    load_points: tuple[LoadPoint, ...] = (LoadPoint(concurrency=64),)
    warmup_requests: int | None = None  # None = one per concurrency slot (capped at 32 output tokens)
    flush_cache: bool = True
    settle_s: float = 1.0  # pause after warmup/flush before the measured window starts
    timeouts: RequestTimeouts = field(default_factory=RequestTimeouts)
    objective_point: int = -1  # which load point's metrics feed the objectives
    enabled: bool = True
