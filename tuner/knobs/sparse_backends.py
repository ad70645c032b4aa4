"""The sparse-attention (DSA, formerly NSA) backend pair of a DeepSeek-V3.2-class model.

A space searches it as `kind: backend_pair` with choices "prefill/decode": `[trtllm/trtllm,
fa3/flashmla_kv]`. It sets TrialConfig's sparse_prefill_backend and sparse_decode_backend, which
the renderer spells per release by these dests, newest first (`--dsa-*-backend` from 0.5.13,
`--nsa-*-backend` before); a release with neither refuses the param, a backend it lacks is refused
at the line that names it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from tuner.config import TrialConfig
from tuner.knobs.protocol import MEMORY_NEUTRAL, Options, Scope, Shape

# Per role, the option dests that hold it, newest release first.
DESTS = {
    "prefill": ("dsa_prefill_backend", "nsa_prefill_backend", "nsa_prefill"),
    "decode": ("dsa_decode_backend", "nsa_decode_backend", "nsa_decode"),
}
FIELDS = ("sparse_prefill_backend", "sparse_decode_backend")  # the TrialConfig fields it sets


@dataclass(frozen=True, slots=True)
class SparseBackends:
    """The `backend_pair` knob (tuner.knobs.protocol.Knob)."""

    kind: str = "backend_pair"
    name: str = "sparse_backends"
    flag: str | None = None
    shape: Shape = "pair"
    owned: frozenset[str] = frozenset(d for ds in DESTS.values() for d in ds)
    role: str = "backends"
    scopes: Mapping[str, Scope] = field(default_factory=lambda: MEMORY_NEUTRAL)
    fields: tuple[str, ...] = FIELDS
    # per field, its option dests: each rendered as one flag taking the field's value
    dests: Mapping[str, tuple[str, ...]] = field(
        default_factory=lambda: MappingProxyType(
            dict(zip(FIELDS, (DESTS["prefill"], DESTS["decode"]), strict=True))
        )
    )

    def restore(self, data: Mapping[str, Any]) -> dict[str, Any]:
        return {f: data.get(f) for f in FIELDS}

    def size(self, value: Any) -> float | None:
        return None

    def encode(self, raw: object) -> str:
        if isinstance(raw, str):
            parts = [p.strip() for p in raw.split("/")]
            if len(parts) == 2 and all(re.fullmatch(r"[A-Za-z0-9_.-]+", p) for p in parts):
                return f"{parts[0]}/{parts[1]}"
        raise ValueError('a "prefill/decode" backend pair such as trtllm/trtllm')

    def check(self, value: str, options: Options) -> str | None:
        for family in ("dsa", "nsa"):
            prefills = options.choices(f"{family}_prefill_backend")
            decodes = options.choices(f"{family}_decode_backend")
            if prefills is not None and decodes is not None:
                break
        else:
            return f"{options.note} has no --nsa-/--dsa-*-backend flags for a backend_pair"
        prefill, decode = value.split("/")
        for side, backend, allowed in (("prefill", prefill, prefills), ("decode", decode, decodes)):
            if backend not in allowed:
                return (
                    f"{side} backend {backend!r} is not valid for {options.note}; "
                    f"expected one of {', '.join(allowed)}"
                )
        return None

    def apply(self, value: str, config: TrialConfig) -> TrialConfig:
        prefill, decode = value.split("/")
        return replace(config, sparse_prefill_backend=prefill, sparse_decode_backend=decode)

    def show(self, value: str) -> str:
        prefill, decode = value.split("/")
        return f"prefill {prefill}, decode {decode}"


KNOB = SparseBackends()
