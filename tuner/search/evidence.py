"""What one finished trial proves, and the knobs of a configuration as the rules read them.

A configuration's knobs split by what failures say about them: the memory fraction and the
CUDA-graph batch sizes (memory is monotone in both), the attention backends per role (a backend
either runs on this GPU or not; a pair either computes right or not), and every other flag, which
each rule holds as the flag's knob object says (`scope_of`: equal, free, or bounded by its
`size` from above or below; tuner.knobs). A flag or field no knob describes is held equal.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cache

from tuner.config import FlagValue, Outcome, TrialConfig
from tuner.knobs.attention_backends import DECODE, PREFILL, ROLES_BY_FLAG
from tuner.knobs.protocol import Scope
from tuner.knobs.registry import knob_flagged, knob_with_role

BACKEND_FLAGS = ROLES_BY_FLAG
FRACTION, GRAPHS = knob_with_role("fraction"), knob_with_role("graphs")  # their fields: Knobs' own
__all__ = ["DECODE", "FRACTION", "GRAPHS", "PREFILL", "Evidence", "Knobs", "knobs_of", "scope_of", "size_of"]


@cache
def scope_of(rule_kind: str, name: str) -> Scope:
    """How a rule of `rule_kind` holds the flag `name` (its knob's scope; equal for a flag or
    field no knob describes: no rule fails open)."""
    knob = knob_flagged(name)
    return "equal" if knob is None else knob.scopes.get(rule_kind, "equal")


def size_of(name: str, value: object) -> float | None:
    """The flag's value on its knob's axis (None: no knob, or no place on it)."""
    knob = knob_flagged(name)
    return None if knob is None else knob.size(value)


@dataclass(frozen=True, kw_only=True, slots=True)
class Knobs:
    """A configuration as the failure rules and the memory model see it."""

    fraction: float | None  # None: SGLang's own formula
    graphs: bool  # CUDA graphs on (SGLang's default when the config leaves them alone)
    graph_max_bs: int | None  # the largest captured batch; None: off, or SGLang's default list
    prefill: str | None  # the attention backend that runs prefill (sparse or dense), if set
    decode: str | None
    others: tuple[tuple[str, FlagValue], ...]  # every other flag (KV dtype, chunk, ...), sorted by name

    @property
    def graph_key(self) -> str:
        """The CUDA-graph setting as one label: off, default, or max:N."""
        if not self.graphs:
            return "off"
        return "default" if self.graph_max_bs is None else f"max:{self.graph_max_bs}"

    def backend(self, role: str) -> str | None:
        """The backend of a role."""
        return self.prefill if role == PREFILL else self.decode


def knobs_of(config: TrialConfig) -> Knobs:
    """The knobs of a configuration."""
    flags = dict(config.flags)
    prefill, decode = config.sparse_prefill_backend, config.sparse_decode_backend
    for name, roles in BACKEND_FLAGS.items():
        value = flags.get(name)
        if isinstance(value, str):
            if PREFILL in roles and prefill is None:
                prefill = value
            if DECODE in roles and decode is None:
                decode = value
    cg = config.cuda_graph
    others = tuple(sorted((k, v) for k, v in flags.items() if k not in BACKEND_FLAGS))
    others += _unread_fields(config)
    return Knobs(
        fraction=getattr(config, FRACTION.fields[0]),
        graphs=cg is None or cg.enabled,
        graph_max_bs=cg.effective_max_bs if cg is not None else None,
        prefill=prefill,
        decode=decode,
        others=others,
    )


# TrialConfig fields knobs_of reads; any other (a knob object's new field) is held equal by every rule.
_READ = frozenset(
    {*FRACTION.fields, *GRAPHS.fields, "sparse_prefill_backend", "sparse_decode_backend", "flags"}
)


def _unread_fields(config: TrialConfig) -> tuple[tuple[str, FlagValue], ...]:
    """Fields of `config` no reader above knows, as `field:name` entries of `others` (never fail open)."""
    found = ((f.name, getattr(config, f.name)) for f in fields(config) if f.name not in _READ)
    return tuple((f"field:{name}", repr(value)) for name, value in found if value is not None)


@dataclass(frozen=True, kw_only=True, slots=True)
class Evidence:
    """One launched trial: its knobs, how it ended, and what its server reported."""

    trial: int  # the Optuna trial number (the rule's evidence)
    knobs: Knobs
    outcome: Outcome
    stage: str | None = None  # load, capture, warmup or serving, where the failure happened
    message: str = ""  # the proving log line (one line)
    backend: str | None = None  # the attention backend the log blames
    backend_role: str | None = None
    gate_sequential_ok: bool | None = None  # NaN/garbage only in the burst: batch-dependent
    kv_tokens: int | None = None
    min_free_mib: int | None = None

    @property
    def got_ready(self) -> bool:
        """The server came up (any failure after that was at the gate or under load)."""
        return self.outcome.measured or self.stage in ("serving",) or self.outcome in GATE_OUTCOMES


GATE_OUTCOMES = frozenset({Outcome.NAN, Outcome.GARBAGE, Outcome.WRONG_ANSWER})
