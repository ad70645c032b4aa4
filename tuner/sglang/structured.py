"""The structured knobs, one registry entry each: the knobs the tuner renders itself.

A structured knob is searched by a param kind of its own (not a plain `--flag` value), is held
by TrialConfig fields, and becomes one or more SGLang options whose names changed between
releases. Its entry says all of that once:

    name     the param's default name in space files (and its Target)
    kind     the param kind that searches it
    fields   the TrialConfig fields it sets
    dests    per part, the option dests that hold it, newest release first
    owned    every option dest it sets: a fixed flag or a plain param may not touch them
    restore  its TrialConfig fields from a stored config's JSON

The space loader, the fixed-flag check, the flag renderer (tuner.sglang.flags) and the
re-rendering of an export for another release loop over `STRUCTURED`; adding a knob is an entry
here, its TrialConfig field(s), its rendering in flags.py and, if they should see it, the rules.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tuner.config import CudaGraph
from tuner.knobs.cuda_graph import DESTS as _GRAPH_DESTS
from tuner.knobs.sparse_backends import DESTS as _BACKEND_DESTS


@dataclass(frozen=True, kw_only=True, slots=True)
class StructuredKnob:
    """One structured knob (see the module docstring for the fields)."""

    name: str
    kind: str
    fields: tuple[str, ...]
    dests: Mapping[str, tuple[str, ...]]
    owned: frozenset[str]
    restore: Callable[[Mapping[str, Any]], dict[str, Any]]


def _restore_graph(data: Mapping[str, Any]) -> dict[str, Any]:
    graph = data.get("cuda_graph")
    if not isinstance(graph, Mapping):
        return {"cuda_graph": None}
    bs = graph.get("bs")
    return {
        "cuda_graph": CudaGraph(
            enabled=bool(graph.get("enabled", True)),
            max_bs=graph.get("max_bs"),
            bs=tuple(int(b) for b in bs) if bs else None,
        )
    }


def _restore_backends(data: Mapping[str, Any]) -> dict[str, Any]:
    return {f: data.get(f) for f in ("sparse_prefill_backend", "sparse_decode_backend")}



CUDA_GRAPH = StructuredKnob(
    name="cuda_graph",
    kind="cuda_graph",
    fields=("cuda_graph",),
    dests=_GRAPH_DESTS,
    owned=frozenset({*(d for ds in _GRAPH_DESTS.values() for d in ds), "cuda_graph_config"}),
    restore=_restore_graph,
)
SPARSE_BACKENDS = StructuredKnob(
    name="sparse_backends",
    kind="backend_pair",
    fields=("sparse_prefill_backend", "sparse_decode_backend"),
    dests=_BACKEND_DESTS,
    owned=frozenset(d for ds in _BACKEND_DESTS.values() for d in ds),
    restore=_restore_backends,
)

STRUCTURED: tuple[StructuredKnob, ...] = (CUDA_GRAPH, SPARSE_BACKENDS)


def knob_owning(dest: str) -> StructuredKnob | None:
    """The structured knob that sets option dest `dest`, if any."""
    return next((k for k in STRUCTURED if dest in k.owned), None)
