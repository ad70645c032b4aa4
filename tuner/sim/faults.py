"""Faults of a misbehaving server during the benchmark, injected on purpose (`--sim-inject`).

Benchmark requests are told apart by `ignore_eos` (the gate never sets it), so a whole trial runs
through launch and gate and meets the fault in the benchmark:

- http_error_rate=F: that share of benchmark requests is answered HTTP 500, spread evenly;
- bad_usage=negative|huge|text: usage.completion_tokens becomes -5, 1e30 or "four";
- freeze_at=bench: the first benchmark request stops the server's process group (SIGSTOP), as a
  server frozen by a debugger or a stuck driver; only SIGKILL ends it.
"""

from __future__ import annotations

import math
import os
import signal
from dataclasses import dataclass
from typing import Any

BAD_USAGE = {"negative": -5, "huge": 1e30, "text": "four"}
FREEZE_POINTS = ("bench",)


@dataclass(eq=False, kw_only=True, slots=True)
class BenchFaults:
    """The injected faults and how many benchmark requests have arrived."""

    http_error_rate: float = 0.0
    bad_usage: str | None = None
    freeze_at: str | None = None
    seen: int = 0

    def fails(self, body: dict[str, Any]) -> bool:
        """Called for every generation request: True when it is to be answered HTTP 500."""
        if not body.get("ignore_eos"):
            return False
        n = self.seen
        self.seen += 1
        if self.freeze_at == "bench":
            os.killpg(os.getpgid(0), signal.SIGSTOP)
        rate = self.http_error_rate
        return bool(rate) and math.floor((n + 1) * rate) > math.floor(n * rate)

    def usage(self, body: dict[str, Any], usage: dict[str, Any]) -> dict[str, Any]:
        """The usage object a benchmark request gets (corrupted when bad_usage is injected)."""
        if self.bad_usage is None or not body.get("ignore_eos"):
            return usage
        return {**usage, "completion_tokens": BAD_USAGE[self.bad_usage]}
