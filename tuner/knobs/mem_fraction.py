"""The static memory fraction (--mem-fraction-static): the share of GPU memory for weights and KV.

A plain param selects it by its flag: `name: mem-fraction-static` (or `flag:`), read as the kind
written (float range, or categorical numbers). Every value must lie in (0, 1]: SGLang sizes the KV
pool from it (KV bytes = fraction x total - weights - reserve), so a range outside is refused at the
line of the end that leaves it. It sets TrialConfig.mem_fraction_static, rendered as
--mem-fraction-static in every release.

Physics (what a failure proves): a larger fraction leaves less memory beside the pool for the
CUDA graphs and the activations, so every OOM holds for every larger fraction; a smaller one
leaves a smaller KV pool, so "not enough memory" holds for every smaller fraction. Backend and
wrong-answer failures say nothing of it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from tuner.config import TrialConfig
from tuner.knobs.protocol import Options, Scope, Shape

_SCOPES: Mapping[str, Scope] = MappingProxyType(
    {
        "oom_at_load": "up",
        "oom_at_capture": "up",
        "oom_under_load": "up",
        "not_enough_memory": "down",
        "pair_broken": "free",
        "backend_unsupported": "free",
        "pair_unsupported": "free",
    }
)


def problem(value: object) -> str | None:
    """Why `value` is not a --mem-fraction-static (a number in (0, 1]), or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1.0:
        return "expected a number in (0, 1]"
    return None


@dataclass(frozen=True, slots=True)
class MemFraction:
    """The mem-fraction-static knob (tuner.knobs.protocol.Knob)."""

    kind: str = "mem_fraction"
    name: str = "mem-fraction-static"
    flag: str | None = "mem-fraction-static"
    shape: Shape = "written"
    owned: frozenset[str] = frozenset({"mem_fraction_static"})
    role: str = "fraction"
    scopes: Mapping[str, Scope] = field(default_factory=lambda: _SCOPES)
    fields: tuple[str, ...] = ("mem_fraction_static",)
    dests: Mapping[str, tuple[str, ...]] = field(
        default_factory=lambda: MappingProxyType({"mem_fraction_static": ("mem_fraction_static",)})
    )

    def restore(self, data: Mapping[str, Any]) -> dict[str, Any]:
        return {"mem_fraction_static": data.get("mem_fraction_static")}

    def size(self, value: Any) -> float | None:
        return None if isinstance(value, bool) or not isinstance(value, (int, float)) else float(value)

    def encode(self, raw: object) -> float:
        number = float(raw.strip()) if isinstance(raw, str) else raw
        if isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number):
            raise ValueError("a finite number")
        return float(number)

    def check(self, value: Any, options: Options) -> str | None:
        return problem(value) or (
            f"{options.note} has no --{self.flag}" if options.choices("mem_fraction_static") is None else None
        )

    def apply(self, value: Any, config: TrialConfig) -> TrialConfig:
        return replace(config, mem_fraction_static=float(value))

    def show(self, value: Any) -> str:
        return f"{float(value):g}"


KNOB = MemFraction()
