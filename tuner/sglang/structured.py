"""The knobs held in TrialConfig fields, as the renderer and the re-render read them.

A knob object (tuner.knobs) whose `fields` are TrialConfig fields (mem_fraction, cuda_graph,
backend_pair) says everything about them itself: its `dests` (per part, the option dests that
hold it, newest release first), its `owned` dests (a fixed flag or a plain param may not touch
them) and `restore` (its fields from a stored config's JSON). The flag renderer
(tuner.sglang.flags) and the re-rendering of an export for another release loop over
`STRUCTURED`; a knob of launch flags (attention_backends, kv_cache_dtype, chunked_prefill,
max_running_requests) needs none of this: its flags are in `TrialConfig.flags`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tuner.config import TrialConfig
from tuner.knobs.protocol import Knob
from tuner.knobs.registry import knobs

STRUCTURED: tuple[Knob, ...] = tuple(k for k in knobs() if k.fields)


def knob_owning(dest: str) -> Knob | None:
    """The knob held in TrialConfig fields that sets option dest `dest`, if any."""
    return next((k for k in STRUCTURED if dest in k.owned), None)


def field_owner(name: str) -> Knob | None:
    """The knob whose value TrialConfig field `name` holds, if any."""
    return next((k for k in STRUCTURED if name in k.fields), None)


def restore_config(data: Mapping[str, Any]) -> TrialConfig:
    """The TrialConfig of a stored row's `config` (the JSON of the dataclass): every knob of fields
    restores its own, the flags come back as stored (lists as tuples)."""
    restored: dict[str, Any] = {}
    for knob in STRUCTURED:
        restored.update(knob.restore(data))
    flags = tuple(
        (str(name), tuple(value) if isinstance(value, list) else value)
        for name, value in data.get("flags") or ()
    )
    return TrialConfig(flags=flags, **restored)
