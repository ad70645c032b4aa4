"""What the HTTP side of one running simulator shares (mutable, process-private)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from tuner.sim.engine import Engine
from tuner.sim.faults import BenchFaults
from tuner.sim.memory import MemoryPlan
from tuner.sim.resolve import Launch
from tuner.sim.scenario import Scenario


@dataclass(eq=False, kw_only=True, slots=True)
class ServerState:
    """The live server: launch facts, scheduler, readiness."""

    scenario: Scenario
    launch: Launch
    plan: MemoryPlan
    engine: Engine
    argv: tuple[str, ...]
    status: str = "Starting"  # Starting | Up | Draining | UnHealthy
    active_http: int = 0
    requests_total: int = 0
    started_s: float = field(default_factory=time.time)
    drift_at: int | None = None  # injected: greedy answers differ from this token on
    kv_canary_violation: bool = False  # injected: log one KV-canary violation at the first request
    faults: BenchFaults = field(default_factory=BenchFaults)  # injected: errors, bad usage, a freeze
