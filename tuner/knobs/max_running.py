"""The running-request cap (--max-running-requests): the most requests the scheduler runs at once.

A plain param selects it by its flag: `name: max-running-requests` (or `flag:`), read as the kind
written (categorical of whole numbers, or an int range); null leaves SGLang's default (derived
from the KV pool). It sets the flag itself, in every release 0.5.2-0.5.23.

Physics (what a failure proves): the request-to-token table that SGLang takes from the memory
pool before the KV cache grows with the cap, the decode graphs captured are at least those of a
smaller cap, and the running batch's activations grow with it: "not enough memory", a capture
OOM and an OOM under load each hold for every larger cap. An OOM at load (weights and pool) is
held to the same cap; wrong answers and unsupported backends say nothing of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from tuner.config import TrialConfig
from tuner.knobs._flagged import set_flag, whole, whole_problem
from tuner.knobs.protocol import Options, Scope, Shape

FLAG = "max-running-requests"
_WHAT = "a whole number of requests >= 1"
_SCOPES: Mapping[str, Scope] = MappingProxyType(
    {
        "oom_under_load": "up",
        "oom_at_capture": "up",
        "not_enough_memory": "up",
        "pair_broken": "free",
        "backend_unsupported": "free",
        "pair_unsupported": "free",
    }
)


@dataclass(frozen=True, slots=True)
class MaxRunning:
    """The max-running-requests knob (tuner.knobs.protocol.Knob)."""

    kind: str = "max_running_requests"
    name: str = FLAG
    flag: str | None = FLAG
    shape: Shape = "written"
    owned: frozenset[str] = frozenset({"max_running_requests"})
    role: str = "running"
    scopes: Mapping[str, Scope] = field(default_factory=lambda: _SCOPES)
    fields: tuple[str, ...] = ()
    dests: Mapping[str, tuple[str, ...]] = field(
        default_factory=lambda: MappingProxyType({"value": ("max_running_requests",)})
    )

    def restore(self, data: Mapping[str, Any]) -> dict[str, Any]:
        return {}

    def size(self, value: Any) -> float | None:
        return None if isinstance(value, bool) or not isinstance(value, int) else float(value)

    def encode(self, raw: object) -> int:
        return whole(raw, what=_WHAT, low=1)

    def check(self, value: Any, options: Options) -> str | None:
        return whole_problem(value, options, FLAG, what=_WHAT, low=1)

    def apply(self, value: Any, config: TrialConfig) -> TrialConfig:
        return set_flag(config, FLAG, value)

    def show(self, value: Any) -> str:
        return "SGLang's running-request cap" if value is None else f"at most {int(value):,} running requests"


KNOB = MaxRunning()
