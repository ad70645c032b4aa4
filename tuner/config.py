"""The values the stages of a trial hand each other.

TrialConfig (what to try) -> LaunchSpec (how to start it) -> ServerFacts
(what the ready server told us) -> GateResult / BenchResult -> TrialResult
(everything, for the store and the sampler). All frozen; no stage mutates
another's output. Gate and benchmark result types live beside the code that
makes them (tuner.gate.run, tuner.bench) and are only referenced here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TypeAlias

from pydantic import Field

from tuner.settings import Duration, Settings

FlagValue: TypeAlias = bool | int | float | str | tuple[int, ...] | tuple[str, ...]

MAX_GPU_INDEX = 1023  # a GPU index above this is a typo, not a machine (CUDA_VISIBLE_DEVICES, NVML)


class Phase(str, Enum):
    """Where in a trial something happened."""

    RENDER = "render"
    WAIT_GPUS = "wait_gpus"
    LAUNCH = "launch"
    GATE = "gate"
    BENCH = "bench"
    TEARDOWN = "teardown"


class Outcome(str, Enum):
    """How a trial ended. Everything but OK is a failure class."""

    OK = "ok"
    BAD_FLAG = "bad_flag"
    OOM = "oom"
    NOT_ENOUGH_MEMORY = "not_enough_memory"
    CAPTURE_FAILED = "capture_failed"
    UNSUPPORTED = "unsupported"
    CRASHED = "crashed"
    HANG = "hang"
    TIMEOUT = "timeout"
    NAN = "nan"
    WRONG_ANSWER = "wrong_answer"
    GARBAGE = "garbage"
    GATE_ERROR = "gate_error"
    CRASHED_DURING_BENCH = "crashed_during_bench"
    BENCH_FAILED = "bench_failed"
    BENCH_ERRORS = "bench_errors"  # more failed benchmark requests than bench.max_failed_fraction allows
    SLO_VIOLATION = "slo_violation"
    INTERRUPTED = "interrupted"
    INFRA_ERROR = "infra_error"
    ENVIRONMENT = "environment"  # the log proves the machine at fault (network, proxy, host RAM, a port)
    PRUNED = "pruned"  # not launched: a failure rule or the memory model proved it would fail

    @property
    def kind(self) -> OutcomeKind:
        """What this outcome means to every reader (its row of OUTCOMES)."""
        return OUTCOMES[self]

    @property
    def measured(self) -> bool:
        """The server ran the benchmark to the end: OK, or measured but missing an SLO."""
        return OUTCOMES[self].measured

    @property
    def retryable(self) -> bool:
        """Not the configuration's doing (interrupted, infrastructure, environment): told FAIL, retried."""
        return OUTCOMES[self].retryable

    @property
    def blames_config(self) -> bool:
        """True when the configuration itself caused the failure (infeasible, not retried).

        INTERRUPTED, INFRA_ERROR and ENVIRONMENT are the machine's or the user's doing: the
        study records them as FAIL and may retry the configuration.
        """
        return self is not Outcome.OK and not OUTCOMES[self].retryable


@dataclass(frozen=True, kw_only=True, slots=True)
class OutcomeKind:
    """The properties of one outcome, read from OUTCOMES by every reader (never an if-chain)."""

    measured: bool = False  # the benchmark ran to the end (OK, SLO_VIOLATION)
    retryable: bool = False  # the machine's or the user's doing: told FAIL, retried, never a rule
    launched: bool = True  # a server was launched for it (PRUNED: not)
    infra: bool = False  # an infrastructure fault: the study pauses, and stops at budget.max_infra_failures
    environment: bool = False  # the log proves the machine at fault: two configurations stop the study


_FAILED = OutcomeKind()  # a failure class the configuration caused
OUTCOMES: dict[Outcome, OutcomeKind] = {
    Outcome.OK: OutcomeKind(measured=True),
    Outcome.BAD_FLAG: _FAILED,
    Outcome.OOM: _FAILED,
    Outcome.NOT_ENOUGH_MEMORY: _FAILED,
    Outcome.CAPTURE_FAILED: _FAILED,
    Outcome.UNSUPPORTED: _FAILED,
    Outcome.CRASHED: _FAILED,
    Outcome.HANG: _FAILED,
    Outcome.TIMEOUT: _FAILED,
    Outcome.NAN: _FAILED,
    Outcome.WRONG_ANSWER: _FAILED,
    Outcome.GARBAGE: _FAILED,
    Outcome.GATE_ERROR: _FAILED,
    Outcome.CRASHED_DURING_BENCH: _FAILED,
    Outcome.BENCH_FAILED: _FAILED,
    Outcome.BENCH_ERRORS: _FAILED,
    Outcome.SLO_VIOLATION: OutcomeKind(measured=True),
    Outcome.INTERRUPTED: OutcomeKind(retryable=True),
    Outcome.INFRA_ERROR: OutcomeKind(retryable=True, infra=True),
    Outcome.ENVIRONMENT: OutcomeKind(retryable=True, environment=True),
    Outcome.PRUNED: OutcomeKind(launched=False),
}
assert set(OUTCOMES) == set(Outcome), "every Outcome has its row in OUTCOMES"

# Outcomes no configuration causes: told FAIL, retried, never a rule (from the table).
NOT_THE_CONFIGURATION = frozenset(o for o, kind in OUTCOMES.items() if kind.retryable)


@dataclass(frozen=True, kw_only=True, slots=True)
class CudaGraph:
    """CUDA-graph setting as one knob: off, a max batch size, or an explicit list."""

    enabled: bool = True
    max_bs: int | None = None
    bs: tuple[int, ...] | None = None

    @property
    def effective_max_bs(self) -> int | None:
        if not self.enabled:
            return None
        if self.bs:
            return max(self.bs)
        return self.max_bs


@dataclass(frozen=True, kw_only=True, slots=True)
class TrialConfig:
    """One configuration to try, in SGLang-version-independent terms.

    `flags` carries any other launch flag by its canonical name without dashes
    (`("chunked-prefill-size", 8192)`); a bool is a store_true switch (True =
    present). None means "leave SGLang's default".
    """

    mem_fraction_static: float | None = None
    cuda_graph: CudaGraph | None = None
    sparse_prefill_backend: str | None = None
    sparse_decode_backend: str | None = None
    flags: tuple[tuple[str, FlagValue], ...] = ()


class LaunchTimeouts(Settings):
    """Time limits of one server's life, in seconds (the `timeouts:` section of a space file)."""

    startup_s: Duration = Field(default=1800.0, gt=0, validation_alias="startup")
    idle_log_s: Duration = Field(default=600.0, gt=0, validation_alias="idle_log")
    ready_poll_s: Duration = Field(default=0.25, gt=0, validation_alias="ready_poll")
    sigint_grace_s: Duration = Field(default=10.0, gt=0, validation_alias="sigint_grace")
    sigterm_grace_s: Duration = Field(default=20.0, gt=0, validation_alias="sigterm_grace")
    release_s: Duration = Field(default=120.0, gt=0, validation_alias="release")


@dataclass(frozen=True, kw_only=True, slots=True)
class LaunchSpec:
    """Exactly how to start one server: the argv list, environment and where it listens."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    host: str = "127.0.0.1"
    port: int
    gpus: tuple[int, ...] = ()
    log_path: Path
    sglang_version: str
    timeouts: LaunchTimeouts = field(default_factory=LaunchTimeouts)
    key: str = ""  # the effective launch (flags without host/port, env, release): same key, same server

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


@dataclass(frozen=True, kw_only=True, slots=True)
class Failure:
    """Why a trial failed, with the evidence."""

    outcome: Outcome
    phase: Phase
    message: str
    excerpt: str = ""
    exit_code: int | None = None
    backend: str | None = None  # the attention backend the log blames (log_events.FailureVerdict)
    backend_role: str | None = None  # "prefill" or "decode", when the log says which
    stage: str | None = None  # load, capture, warmup or serving: where the server failed, if the log says


@dataclass(frozen=True, kw_only=True, slots=True)
class ServerLoad:
    """What the server's scheduler did under the benchmark, from its batch log lines."""

    peak_running: int | None = None  # the most requests it ran at once
    peak_kv_usage: float | None = None  # the largest share of its KV pool in use at once
    retractions: int | None = None  # requests retracted for want of KV cache (None: not known)


@dataclass(frozen=True, kw_only=True, slots=True)
class ServerFacts:
    """What a ready server reported about itself (endpoint first, log as cross-check)."""

    base_url: str
    startup_s: float
    kv_tokens: int | None
    kv_tokens_log: int | None = None
    captured_bs: tuple[int, ...] | None = None
    cuda_graph: bool | None = None
    available_gpu_mem_gb: float | None = None
    sparse_backends: tuple[str, str] | None = None
    weights_gb: float | None = None
    server_version: str | None = None
    max_running_requests: int | None = None  # the most requests its scheduler runs at once


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuInfo:
    """One GPU as NVML (or the simulator) describes it."""

    index: int
    uuid: str
    name: str
    compute_capability: str
    total_mib: int
    driver: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class StageTimings:
    """Seconds spent in each stage; overhead is everything not waiting on the server."""

    wait_gpus_s: float = 0.0
    launch_s: float = 0.0
    gate_s: float = 0.0
    bench_s: float = 0.0
    teardown_s: float = 0.0  # stopping the server and waiting for its GPU memory to come back
    release_s: float = 0.0  # of teardown_s: the wait for the memory, after the processes were gone
    overhead_s: float = 0.0


@dataclass(frozen=True, kw_only=True, slots=True)
class Verdict:
    """What a trial amounts to for the study: stored in its row and told to Optuna."""

    outcome: Outcome  # the result's outcome, or SLO_VIOLATION for a measured trial missing an SLO
    values: tuple[float, ...]  # objective values, pessimistic where not measured
    constraints: dict[str, float]  # <= 0 is feasible; the same keys on every trial
    feasible: bool
    metrics: dict[str, float | None]  # every metric of the result (None = not measured)

    @property
    def retryable(self) -> bool:
        """Not the configuration's doing (interrupted, infrastructure): told FAIL and retried."""
        return self.outcome.retryable

    @property
    def message(self) -> str:
        """One line for the live display."""
        if self.feasible:
            return "feasible"
        return "SLO missed" if self.outcome is Outcome.SLO_VIOLATION else ""
