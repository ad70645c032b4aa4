"""The KV-cache dtype (--kv-cache-dtype): the element type of the KV pool.

A plain param selects it by its flag: `name: kv-cache-dtype` (or `flag:`), read as the kind
written (categorical of names); null leaves SGLang's default (`auto`: the model's dtype). Each
choice is checked against the release's own choices, at its line: `bf16` came in 0.5.4,
`fp4_e2m1` in 0.5.4.post3 and went in 0.5.21, `mxfp8`, `nvfp4` and `fp4_mx_block16` came in
0.5.16. It sets the flag itself.

Physics (what a failure proves): the pool's bytes are the fraction's, so a wider element holds
fewer tokens: "not enough memory" at one dtype holds for every dtype at least as wide (bytes per
element; `auto` and unknown names have no width: that dtype only). A pair of attention backends
that computes wrong answers does so with a KV dtype: the rule is held to it. OOMs are held to the
same dtype; an unsupported backend is the backend's, whatever the dtype.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from tuner.config import TrialConfig
from tuner.knobs._flagged import missing, set_flag
from tuner.knobs.protocol import Options, Scope, Shape

FLAG = "kv-cache-dtype"
# Bytes per KV-cache element by dtype (block scales of the micro-scaled formats left out).
BYTES = MappingProxyType(
    {
        **dict.fromkeys(("fp4_e2m1", "nvfp4", "fp4_mx_block16"), 0.5),
        **dict.fromkeys(("fp8_e4m3", "fp8_e5m2", "mxfp8"), 1.0),
        **dict.fromkeys(("bfloat16", "bf16", "float16", "half"), 2.0),
        "float32": 4.0,
    }
)
_NAME = re.compile(r"[A-Za-z0-9_]+")
_SCOPES: Mapping[str, Scope] = MappingProxyType(
    {"not_enough_memory": "up", "backend_unsupported": "free", "pair_unsupported": "free"}
)


@dataclass(frozen=True, slots=True)
class KvCacheDtype:
    """The kv-cache-dtype knob (tuner.knobs.protocol.Knob)."""

    kind: str = "kv_cache_dtype"
    name: str = FLAG
    flag: str | None = FLAG
    shape: Shape = "written"
    owned: frozenset[str] = frozenset({"kv_cache_dtype"})
    role: str = "kv_dtype"
    scopes: Mapping[str, Scope] = field(default_factory=lambda: _SCOPES)
    fields: tuple[str, ...] = ()
    dests: Mapping[str, tuple[str, ...]] = field(
        default_factory=lambda: MappingProxyType({"value": ("kv_cache_dtype",)})
    )

    def restore(self, data: Mapping[str, Any]) -> dict[str, Any]:
        return {}

    def size(self, value: Any) -> float | None:
        return BYTES.get(str(value).lower()) if isinstance(value, str) else None

    def encode(self, raw: object) -> str:
        if isinstance(raw, str) and _NAME.fullmatch(raw.strip()):
            return raw.strip()
        raise ValueError("a KV-cache dtype name such as fp8_e4m3 or auto")

    def check(self, value: Any, options: Options) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str) or not _NAME.fullmatch(value):
            return "expected a KV-cache dtype name such as fp8_e4m3 or auto"
        allowed = options.choices("kv_cache_dtype")
        if allowed and value not in allowed:
            expected = ", ".join(allowed)
            return f"{value!r} is not a KV-cache dtype of {options.note}; expected one of {expected}"
        return missing(options, FLAG)

    def apply(self, value: Any, config: TrialConfig) -> TrialConfig:
        return set_flag(config, FLAG, value)

    def show(self, value: Any) -> str:
        return "KV SGLang's default" if value is None else f"KV {value}"


KNOB = KvCacheDtype()
