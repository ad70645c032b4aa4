"""The CUDA-graph setting as one knob: off, SGLang's default list, a max batch size, or a list.

A space searches it as `kind: cuda_graph` with choices `[off, on, 64, [1, 2, 4, 8]]`, stored as
"off" | "on" | "max:N" | "bs:1,2,4". It sets TrialConfig.cuda_graph, which the renderer spells
per release by these dests, newest first (`--cuda-graph-max-bs-decode` / `--cuda-graph-bs-decode`
and the per-phase switches from 0.5.14; `--cuda-graph-max-bs`, `--cuda-graph-bs`,
`--disable-cuda-graph` before). A release with no option for a part it needs refuses the choice at
its line.

Physics (what a failure proves): capturing the decode graphs takes memory that grows with the
largest captured batch, so a capture OOM holds for every larger one (size: that batch); an OOM
under load is held to the same graph setting; the KV pool is sized before capture, so an OOM at
load and "not enough memory" say nothing of it. A pair that computes wrong answers is narrowed
to the graph setting, then the graph size, that earlier launches do not contradict.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from tuner.config import CudaGraph, TrialConfig
from tuner.knobs.protocol import Options, Scope, Shape

_SCOPES: Mapping[str, Scope] = MappingProxyType(
    {
        "oom_at_load": "free",
        "oom_at_capture": "up",
        "not_enough_memory": "free",
        "pair_broken": "free",  # the widest scope; narrowed by the launches that passed
        "backend_unsupported": "free",
        "pair_unsupported": "free",
    }
)

# Per part, the option dests that hold it, newest release first.
DESTS = {
    "max_bs": ("cuda_graph_max_bs_decode", "cuda_graph_max_bs"),
    "bs": ("cuda_graph_bs_decode", "cuda_graph_bs"),
    "off": ("disable_cuda_graph", "disable_decode_cuda_graph"),
}
_PART = {"max": "max_bs", "bs": "bs", "off": "off"}


MAX_BATCH_SIZE = 1 << 20  # far above any CUDA-graph batch size; a larger one cannot be stored or run


def encode_cuda_graph(raw: Any) -> str:
    """ "off" | "on" | "max:N" | "bs:1,2,4" from YAML/CLI forms; ValueError otherwise.

    Accepted: off/false, on/true (SGLang's default list), an integer (max batch size from which
    SGLang derives its default list), an explicit ascending list of batch sizes, or an encoded string.
    """
    if raw is False or (isinstance(raw, str) and raw.strip().lower() in ("off", "false", "disabled")):
        return "off"
    if raw is True or (isinstance(raw, str) and raw.strip().lower() in ("on", "true", "default")):
        return "on"
    if isinstance(raw, int):
        if not 1 <= raw <= MAX_BATCH_SIZE:
            raise ValueError(f"a max batch size from 1 to {MAX_BATCH_SIZE:,}")
        return f"max:{raw}"
    if isinstance(raw, (list, tuple)):
        return "bs:" + ",".join(str(b) for b in batch_list(list(raw)))
    if isinstance(raw, str):
        text = raw.strip().replace(" ", "")
        if text.startswith("max:") and text[4:].isdigit():
            return encode_cuda_graph(int(text[4:]))
        if text.isdigit():
            return encode_cuda_graph(int(text))
        body = (text[3:] if text.startswith("bs:") else text).strip("[]")
        if re.fullmatch(r"\d+(,\d+)*", body):
            return "bs:" + ",".join(str(b) for b in batch_list([int(x) for x in body.split(",")]))
    raise ValueError("off, on, a max batch size (integer) or a list of batch sizes")


def batch_list(items: list[Any]) -> list[int]:
    if not items:
        raise ValueError("a non-empty list of batch sizes")
    for b in items:
        if isinstance(b, bool) or not isinstance(b, int) or not 1 <= b <= MAX_BATCH_SIZE:
            raise ValueError(f"batch sizes that are integers from 1 to {MAX_BATCH_SIZE:,}")
    if any(b >= c for b, c in zip(items, items[1:], strict=False)):
        raise ValueError("strictly ascending batch sizes")
    return items


def decode_cuda_graph(code: str) -> CudaGraph:
    """The TrialConfig value of an encoded CUDA-graph choice."""
    if code == "off":
        return CudaGraph(enabled=False)
    if code == "on":
        return CudaGraph(enabled=True)
    if code.startswith("max:"):
        return CudaGraph(enabled=True, max_bs=int(code[4:]))
    if code.startswith("bs:"):
        return CudaGraph(enabled=True, bs=tuple(int(b) for b in code[3:].split(",")))
    raise ValueError(f"not an encoded CUDA-graph choice: {code!r}")


@dataclass(frozen=True, slots=True)
class CudaGraphs:
    """The `cuda_graph` knob (tuner.knobs.protocol.Knob)."""

    kind: str = "cuda_graph"
    name: str = "cuda_graph"
    flag: str | None = None
    shape: Shape = "graphs"
    owned: frozenset[str] = frozenset({*(d for ds in DESTS.values() for d in ds), "cuda_graph_config"})
    role: str = "graphs"
    scopes: Mapping[str, Scope] = field(default_factory=lambda: _SCOPES)
    fields: tuple[str, ...] = ("cuda_graph",)
    dests: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType(DESTS))

    def restore(self, data: Mapping[str, Any]) -> dict[str, Any]:
        graph = data.get("cuda_graph")
        if not isinstance(graph, Mapping):
            return {"cuda_graph": None}
        bs = graph.get("bs")
        restored = CudaGraph(
            enabled=bool(graph.get("enabled", True)),
            max_bs=graph.get("max_bs"),
            bs=tuple(int(b) for b in bs) if bs else None,
        )
        return {"cuda_graph": restored}

    def size(self, value: Any) -> float | None:
        """The largest captured batch (off: 0; SGLang's default list: unknown)."""
        graph = decode_cuda_graph(str(value))
        if not graph.enabled:
            return 0.0
        largest = graph.effective_max_bs
        return None if largest is None else float(largest)

    def encode(self, raw: object) -> str:
        return encode_cuda_graph(raw)

    def check(self, value: str, options: Options) -> str | None:
        part = _PART.get(value.split(":")[0])
        if part is None or any(options.choices(d) is not None for d in DESTS[part]):
            return None
        flags = " or ".join("--" + d.replace("_", "-") for d in DESTS[part])
        return f"{options.note} has no {flags} for cuda_graph {value}"

    def apply(self, value: str, config: TrialConfig) -> TrialConfig:
        return replace(config, cuda_graph=decode_cuda_graph(value))

    def show(self, value: str) -> str:
        if value.startswith("max:"):
            return f"graphs up to batch {value[4:]}"
        if value.startswith("bs:"):
            return f"graphs of batches {value[3:]}"
        return "graphs off" if value == "off" else "graphs (SGLang's default list)"


KNOB = CudaGraphs()
