"""The prefill chunk (--chunked-prefill-size): the most prompt tokens one prefill step takes.

A plain param selects it by its flag: `name: chunked-prefill-size` (or `flag:`), read as the kind
written (categorical of whole numbers, or an int range); null leaves SGLang's default (sized from
the GPU's memory) and -1 turns chunking off (a whole prompt in one step). It sets the flag
itself, in every release 0.5.2-0.5.23.

Physics (what a failure proves): a prefill step's activations grow with its chunk, so an OOM
under load at chunk c holds for every chunk >= c (-1, no chunking, is the largest); the KV pool is
sized and the decode graphs captured before any chunk is scheduled, so "not enough memory" and a
capture OOM hold for every chunk; wrong answers and unsupported backends say nothing of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from tuner.config import TrialConfig
from tuner.knobs._flagged import set_flag, whole, whole_problem
from tuner.knobs.protocol import Options, Scope, Shape

FLAG = "chunked-prefill-size"
NO_CHUNKING = -1
_WHAT = "a whole number of tokens >= 1, or -1 (no chunking)"
_SCOPES: Mapping[str, Scope] = MappingProxyType(
    {
        "oom_under_load": "up",
        "oom_at_capture": "free",
        "not_enough_memory": "free",
        "pair_broken": "free",
        "backend_unsupported": "free",
        "pair_unsupported": "free",
    }
)


@dataclass(frozen=True, slots=True)
class ChunkedPrefill:
    """The chunked-prefill-size knob (tuner.knobs.protocol.Knob)."""

    kind: str = "chunked_prefill"
    name: str = FLAG
    flag: str | None = FLAG
    shape: Shape = "written"
    owned: frozenset[str] = frozenset({"chunked_prefill_size"})
    role: str = "chunk"
    scopes: Mapping[str, Scope] = field(default_factory=lambda: _SCOPES)
    fields: tuple[str, ...] = ()
    dests: Mapping[str, tuple[str, ...]] = field(
        default_factory=lambda: MappingProxyType({"value": ("chunked_prefill_size",)})
    )

    def restore(self, data: Mapping[str, Any]) -> dict[str, Any]:
        return {}

    def size(self, value: Any) -> float | None:
        if isinstance(value, bool) or not isinstance(value, int):
            return None
        return float("inf") if value == NO_CHUNKING else float(value)

    def encode(self, raw: object) -> int:
        return whole(raw, what=_WHAT, low=1, extra=(NO_CHUNKING,))

    def check(self, value: Any, options: Options) -> str | None:
        return whole_problem(value, options, FLAG, what=_WHAT, low=1, extra=(NO_CHUNKING,))

    def apply(self, value: Any, config: TrialConfig) -> TrialConfig:
        return set_flag(config, FLAG, value)

    def show(self, value: Any) -> str:
        if value is None:
            return "SGLang's prefill chunk"
        return "no chunked prefill" if value == NO_CHUNKING else f"prefill chunks of {int(value):,} tokens"


KNOB = ChunkedPrefill()
