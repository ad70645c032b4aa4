"""The attention backend pair of any model: which backend runs prefill and which runs decode.

A space searches it as `kind: attention_backends` with choices "prefill/decode" (or one name for
both): `[fa3/fa3, flashinfer/flashinfer, fa3/flashinfer, triton]`. A plain categorical param on
`--attention-backend` (`[triton, fa3]`) is read as this knob, each choice one backend for both.
SGLang's fastest backend depends on the GPU, the model and the phase (and, for decode, on the
batch), so the pair is searched as one knob whose members the surrogate and the failure rules
also see apart.

Flags: a pair of one backend is `--attention-backend X` (SGLang runs both phases on it); a mixed
pair is `--prefill-attention-backend P --decode-attention-backend D` (a hybrid backend). Every
release 0.5.2-0.5.23 has the three options; their choices (the backends it knows) are the
release's own, read from its option table, so a backend a release lacks is refused at the line
that names it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from tuner.config import FlagValue, TrialConfig
from tuner.knobs.protocol import MEMORY_NEUTRAL, Options, Scope, Shape

_NAME = re.compile(r"[A-Za-z0-9_.-]+")
PREFILL, DECODE = "prefill", "decode"
_DESTS = MappingProxyType(
    {
        "both": ("attention_backend",),
        PREFILL: ("prefill_attention_backend",),
        DECODE: ("decode_attention_backend",),
    }
)
# Flags that name an attention backend, by the roles they set (a plain param on one is read so too).
ROLES_BY_FLAG: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "attention-backend": (PREFILL, DECODE),
        "prefill-attention-backend": (PREFILL,),
        "decode-attention-backend": (DECODE,),
    }
)


@dataclass(frozen=True, slots=True)
class AttentionBackends:
    """The `attention_backends` knob (tuner.knobs.protocol.Knob)."""

    kind: str = "attention_backends"
    name: str = "attention_backends"
    flag: str | None = None
    shape: Shape = "pair"
    owned: frozenset[str] = frozenset(
        {"attention_backend", "prefill_attention_backend", "decode_attention_backend"}
    )
    role: str = "backends"
    scopes: Mapping[str, Scope] = field(default_factory=lambda: MEMORY_NEUTRAL)
    fields: tuple[str, ...] = ()
    dests: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: _DESTS)

    def restore(self, data: Mapping[str, Any]) -> dict[str, Any]:
        return {}

    def size(self, value: Any) -> float | None:
        return None

    def encode(self, raw: object) -> str:
        if isinstance(raw, str):
            parts = [p.strip() for p in raw.split("/")]
            if len(parts) == 1:
                parts = parts * 2
            if len(parts) == 2 and all(_NAME.fullmatch(p) for p in parts):
                return f"{parts[0]}/{parts[1]}"
        raise ValueError('an attention backend pair "prefill/decode" such as fa3/flashinfer (or one backend)')

    def check(self, value: str, options: Options) -> str | None:
        prefill, decode = value.split("/")
        roles = (
            (("both phases", "attention_backend", prefill),)
            if prefill == decode
            else (
                ("prefill", "prefill_attention_backend", prefill),
                ("decode", "decode_attention_backend", decode),
            )
        )
        for role, dest, backend in roles:
            allowed = options.choices(dest)
            if allowed is None:
                return f"{options.note} has no --{dest.replace('_', '-')} for the {role} backend"
            if allowed and backend not in allowed:
                return (
                    f"{backend!r} is not an attention backend of {options.note} ({role}); "
                    f"expected one of {', '.join(allowed)}"
                )
        return None

    def apply(self, value: str, config: TrialConfig) -> TrialConfig:
        prefill, decode = value.split("/")
        flags: tuple[tuple[str, FlagValue], ...] = (
            (("attention-backend", prefill),)
            if prefill == decode
            else (("prefill-attention-backend", prefill), ("decode-attention-backend", decode))
        )
        return replace(config, flags=(*config.flags, *flags))

    def show(self, value: str) -> str:
        prefill, decode = value.split("/")
        return prefill if prefill == decode else f"prefill {prefill}, decode {decode}"


KNOB = AttentionBackends()
