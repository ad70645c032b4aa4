"""What the benchmark stage runs: workload, load points, timeouts (the `bench:` section of a space file).

Each model declares its keys, defaults and bounds once; the space loader validates the file
against them and code builds them by field name (see tuner.settings).
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, ValidationInfo, model_validator

from tuner.host import STARVED_WAIT_SHARE
from tuner.settings import Duration, Settings, mistake, non_empty, space_dir

MAX_LEN = 1 << 20  # tokens of one prompt or answer: more than any released context window
MAX_PROMPTS = 100_000  # requests of one load point
MAX_LOAD_POINTS = 64  # load points of one benchmark stage (each runs for minutes)
MAX_POINT_TOKENS = 1 << 26  # prompt tokens one load point builds in memory (about 64 M)


class WorkloadKind(str, Enum):
    """Where prompts come from."""

    RANDOM = "random"  # token-id prompts of fixed or ranged length (no tokenizer needed)
    SHAREGPT = "sharegpt"  # a ShareGPT-format JSON file
    JSONL = "jsonl"  # SGLang auto_benchmark JSONL or the user's own JSONL


class Api(str, Enum):
    """Which endpoint the load goes to."""

    COMPLETIONS = "completions"  # /v1/completions (accepts token-id prompts)
    CHAT = "chat"  # /v1/chat/completions
    GENERATE = "generate"  # SGLang's native /generate (input_ids; bench_serving's --backend sglang)


class Workload(Settings):
    """The requests of one benchmark run."""

    kind: WorkloadKind = Field(default=WorkloadKind.RANDOM, strict=False)
    input_len: int = Field(default=1024, ge=1, le=MAX_LEN)
    output_len: int = Field(default=1024, ge=1, le=MAX_LEN)
    range_ratio: float = Field(default=1.0, gt=0.0, le=1.0)  # lengths uniform on [max(1, L*ratio), L]
    path: Path | None = Field(default=None, strict=False)  # in a space file: relative to the file
    api: Api = Field(default=Api.COMPLETIONS, strict=False)
    seed: int = Field(default=1, ge=0, le=2**32 - 1)  # numpy's generators take seeds below 2**32

    @model_validator(mode="before")
    @classmethod
    def _dataset_path(cls, data: Any, info: ValidationInfo) -> Any:
        folder = space_dir(info)
        if folder is None or not isinstance(data, dict):
            return data  # built in code: taken as given
        kind, path = data.get("kind", WorkloadKind.RANDOM.value), data.get("path")
        if kind in (WorkloadKind.SHAREGPT.value, WorkloadKind.JSONL.value) and path is None:
            raise mistake(f"a {kind} workload needs a path to its dataset", at=("path",))
        if isinstance(path, str) and path and not Path(path).is_absolute():
            return {**data, "path": str(folder / path)}
        return data


class LoadPoint(Settings):
    """One load level: a fixed concurrency, or a request rate (Poisson / gamma), or both."""

    concurrency: int | None = Field(default=64, ge=1, le=MAX_PROMPTS)
    request_rate: float | None = Field(default=None, gt=0.0, le=1e6)  # requests/s; None = all at once
    burstiness: float = Field(default=1.0, gt=0.0, le=1e3)  # gamma shape; 1.0 = Poisson
    num_prompts: int | None = Field(default=None, ge=1, le=MAX_PROMPTS)  # None = 5 x concurrency (≥ 32)

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


class RequestTimeouts(Settings):
    """Per-request and per-stage limits, in seconds (reference bench-metrics P19)."""

    connect_s: Duration = Field(default=10.0, validation_alias="connect")
    first_byte_s: Duration = Field(default=600.0, validation_alias="first_byte")
    idle_read_s: Duration = Field(default=60.0, validation_alias="idle_read")
    stage_deadline_s: Duration = Field(default=3600.0, validation_alias="stage_deadline")


class SelfCheckSettings(Settings):
    """When the client's own figures say the measurement is not the server's (`bench.self_check`).

    A client bottleneck (its CPU time near a core, or its event loop lagging while it is not
    waiting for a CPU) makes the trial an infrastructure fault; starvation by other processes
    (the loop lagging while the client was runnable but not running) only marks it noisy.
    """

    cpu_share: float = Field(default=0.7, gt=0.0, le=1.0)  # client CPU time / wall: above, client-bound
    loop_lag_p99_s: Duration = Field(default=0.005, gt=0, validation_alias="loop_lag_p99")
    # run-queue wait / runnable time: past it, the client was starved
    starved_wait_share: float = Field(default=STARVED_WAIT_SHARE, gt=0.0, le=1.0)
    # starved: noisy only past this lag (calibrated: below it repeats agreed, see bench/selfcheck.py)
    noisy_lag_p99_s: Duration = Field(default=0.025, gt=0, validation_alias="noisy_lag_p99")
    min_samples: int = Field(default=50, ge=1)  # lag samples (10 ms each) before judging at all


class BenchSettings(Settings):
    """The whole benchmark stage of one trial."""

    enabled: bool = True
    workload: Workload = Field(default_factory=Workload)
    load_points: Annotated[tuple[LoadPoint, ...], non_empty("load point")] = Field(
        default=(LoadPoint(),), strict=False, max_length=MAX_LOAD_POINTS
    )
    warmup_requests: int | None = Field(default=None, ge=0, le=MAX_PROMPTS)  # None = one per concurrency slot
    flush_cache: bool = True
    settle_s: Duration = Field(default=1.0, validation_alias="settle")  # pause before the measured window
    timeouts: RequestTimeouts = Field(default_factory=RequestTimeouts)
    self_check: SelfCheckSettings = Field(default_factory=SelfCheckSettings)
    objective_point: int = -1  # which load point's metrics feed the objectives
    # a load point with a larger share of failed requests fails the trial as bench_errors
    max_failed_fraction: float = Field(default=0.0, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _prompts_fit_in_memory(self) -> BenchSettings:
        if self.workload.kind is not WorkloadKind.RANDOM:
            return self
        for point in self.load_points:
            tokens = point.prompts * self.workload.input_len
            if tokens > MAX_POINT_TOKENS:
                raise mistake(
                    f"load point {point.label}: {point.prompts} prompts of {self.workload.input_len} tokens "
                    f"is {tokens:,} prompt tokens to build; expected at most {MAX_POINT_TOKENS:,}",
                    at=("load_points",),
                )
        return self

    @model_validator(mode="after")
    def _objective_point_exists(self) -> BenchSettings:
        count = len(self.load_points)
        if not -count <= self.objective_point < count:
            raise mistake(
                f"must index one of the {count} load points (got {self.objective_point})",
                at=("objective_point",),
            )
        return self
