"""The plane of free memory over the candidates' memory sizes, as the sampler uses it.

    fitted_plane(found, trials, seen, space) -> Plane;  plane.p_above(floor_mib) -> P per candidate

The sizes of every candidate (`memory_sizes`: fraction, graphs on, the largest captured batch cut at
the running cap as SGLang captures it, every knob with a size), the launches that measured their lowest
free memory and those that ran out of it, fitted by tuner.search.memory_trend. P(the peak fits) stands
for the out-of-memory model where a candidate's sizes are known; a free-VRAM floor's P(met) and SGLang's
own list's size are measured options (docs/design.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from optuna.trial import FrozenTrial

from tuner.config import TrialConfig
from tuner.search import feasible
from tuner.search.acquire import norm_cdf
from tuner.search.candidates import Candidates, capped_batch, running_caps
from tuner.search.evidence import knobs_of, size_of
from tuner.search.feasible import Mechanism
from tuner.search.memory_trend import Trend, fit_trend
from tuner.search.strategy import Seen
from tuner.sglang.graph_defaults import captured_sizes, default_graph_max_bs
from tuner.space.goals import Slo

if TYPE_CHECKING:
    from tuner.space.loader import SearchSpace

# SGLang's own graph list sized on the plane of free memory (own_graph_sizes); off: left out of the plane
OWN_GRAPH_SIZE = False
# graph lists cut at the running-request cap on the plane, as SGLang captures them; off: as asked
GRAPHS_WITHIN_CAP = True
# the sum of the captured batch sizes as one more size on the plane (per-graph buffers); off: the largest
GRAPH_SUM = False
# a free-VRAM floor's P(met) from the plane of free memory rather than from its margins' own model
PLANE_FLOORS = False
# the fraction's coefficient held to the static pool's growth (mem-fraction-static x the GPU's memory)
STATIC_POOL = True


def _memory_plane(
    found: Candidates, trials: Sequence[FrozenTrial], seen: Sequence[Seen], space: SearchSpace | None = None
) -> np.ndarray | None:
    """P(the peak fits) per candidate from the plane of free memory (`fitted_plane`); NaN where a
    candidate's size is not known; None when no plane is fitted."""
    plane = fitted_plane(found, trials, seen, space)
    return None if plane is None else plane.p_above(0.0)


@dataclass(frozen=True, kw_only=True, slots=True)
class Plane:
    """The plane of free memory with every candidate's sizes (NaN rows: a size not known)."""

    trend: Trend
    sizes: np.ndarray

    def p_above(self, floor_mib: float) -> np.ndarray:
        """P(the lowest free memory > floor_mib) per candidate; NaN where its sizes are not known."""
        unknown = np.isnan(self.sizes).any(axis=1)
        mu, sd = self.trend.predict(np.nan_to_num(self.sizes))
        out: np.ndarray = np.where(unknown, np.nan, norm_cdf((mu - floor_mib) / sd))
        return out


def fitted_plane(
    found: Candidates, trials: Sequence[FrozenTrial], seen: Sequence[Seen], space: SearchSpace | None = None
) -> Plane | None:
    """The plane of free memory over the memory knobs (tuner.search.memory_trend), fitted on the
    launches that measured their lowest free memory and on those that ran out of it (at a little below
    none free: the peak just missed, the closest a failure can say); None until one measured and two in
    all, or when no launch told its GPU's memory. SGLang's own graph list takes the size its launches
    captured, else the release's default for the GPU (`own_graph_sizes`)."""
    if not feasible.MEMORY_PLANE:
        return None
    attrs = {t.number: t.user_attrs for t in trials}
    total = max((_number_or(a.get("gpu_total_mib")) for a in attrs.values()), default=0.0)
    rows, free = [], []
    for s in seen:
        got = (
            _number_or(attrs.get(s.trial, {}).get("min_free_vram_mib"), math.nan)
            if s.trial is not None
            else math.nan
        )
        if s.log_first is not None and math.isfinite(got):
            rows.append(s.index)
            free.append(got)
    if not rows:
        return None
    own = own_graph_sizes(found, seen, attrs, space, total) if OWN_GRAPH_SIZE else None
    caps = running_caps(space)
    sizes = memory_sizes(found, own, caps if GRAPHS_WITHIN_CAP else ())
    known = [i for i, r in enumerate(rows) if not np.isnan(sizes[r]).any()]
    short = [s.index for s in seen if s.failed is Mechanism.MEMORY and not np.isnan(sizes[s.index]).any()]
    trend = fit_trend(
        sizes[[rows[i] for i in known]],
        np.asarray([free[i] for i in known]),
        total,
        sizes[short],
        known=static_pool_slope(found, total) if STATIC_POOL else None,
    )
    return None if trend is None else Plane(trend=trend, sizes=sizes)


def static_pool_slope(found: Candidates, total_mib: float) -> dict[int, float] | None:
    """The fraction column's coefficient the physics gives: the static pool (weights and KV cache) is
    mem-fraction-static x the GPU's memory, so across the space's fraction range free memory at the
    peak falls by the range x the GPU's memory (None: no fraction range)."""
    fractions = _raw_sizes(found)[:, 0]
    if not np.isfinite(fractions).any():
        return None
    span = float(np.nanmax(fractions) - np.nanmin(fractions))
    return {0: -span * total_mib} if span > 0 else None


def vram_floors(plane: Plane | None, trials: Sequence[FrozenTrial]) -> dict[int, np.ndarray] | None:
    """Per free-VRAM floor among the study's SLOs (by its index in the margins' order), P(met) per
    candidate from the plane: the floor bounds the very quantity the plane predicts, across every group
    of launches. None: off, no plane, or no such floor."""
    if plane is None or not PLANE_FLOORS:
        return None
    names = sorted({k for t in trials for k in t.user_attrs if k.startswith("c_slo:")})
    out = {}
    for j, name in enumerate(names):
        slo = Slo.from_name(name.removeprefix("c_slo:"))
        if slo is not None and slo.metric == "min_free_vram_mib" and slo.op in (">=", ">"):
            out[j] = plane.p_above(slo.bound)
    return out or None


def _number_or(value: object, default: float = 0.0) -> float:
    return float(value) if finite_number(value) else default  # type: ignore[arg-type]


def _own_list(config: TrialConfig) -> bool:
    graph = config.cuda_graph
    return graph is not None and graph.enabled and graph.max_bs is None and not graph.bs


def own_graph_sizes(
    found: Candidates,
    seen: Sequence[Seen],
    attrs: Mapping[int, Mapping[str, Any]],
    space: SearchSpace | None,
    total_mib: float,
) -> np.ndarray | None:
    """Per candidate, the largest batch SGLang's own graph list captures there (NaN elsewhere): the
    most any launch of that list reported capturing, else the release's default for the GPU and the
    launch's TP size (tuner.sglang.graph_defaults); either capped by the candidate's running-request
    caps, as SGLang caps its list. None: no candidate keeps SGLang's list, or its size is not known."""
    own = [i for i, c in enumerate(found.configs) if _own_list(c)]
    if not own:
        return None
    caps = running_caps(space)
    whole, at_least = 0.0, 0.0  # the list as captured uncapped; a lower bound, where a cap cut it
    for s in seen:
        got = _number_or(attrs.get(s.trial, {}).get("captured_graph_max_bs")) if s.trial is not None else 0.0
        if got > 0 and _own_list(found.configs[s.index]):
            if capped_batch(found.params[s.index], math.inf, caps) > got:
                whole = max(whole, got)
            else:
                at_least = max(at_least, got)
    if whole <= 0 and (space is None or total_mib <= 0):
        return None if at_least <= 0 else np.where([_own_list(c) for c in found.configs], at_least, np.nan)
    fixed = dict(space.fixed_flags) if space is not None else {}
    release = None if space is None else space.sglang_version
    if release in (None, "auto") and space is not None:
        release = space.checked_sglang_version
    out = np.full(len(found.configs), np.nan)
    for i in own:
        params = found.params[i]
        largest = whole
        if largest <= 0:
            tp = _tp_of({**fixed, **params})
            largest = max(at_least, float(default_graph_max_bs(total_mib, tp, release)))
        out[i] = capped_batch(params, largest, caps)
    return out


def _tp_of(flags: Mapping[str, object]) -> int:
    for name in ("tp-size", "tensor-parallel-size", "tp"):
        value = flags.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 1


_SIZES: dict[int, tuple[Candidates, np.ndarray]] = {}


def memory_sizes(
    found: Candidates, own_graph: np.ndarray | None = None, caps: Sequence[str] = ()
) -> np.ndarray:
    """Per candidate, the sizes that set its peak memory, each on [0, 1] over the space: the fraction,
    graphs on, the largest captured batch, and every other flag whose knob has a size (the prefill
    chunk, the running cap, the KV dtype's bytes). SGLang's own graph list takes its size from
    `own_graph` (per candidate); NaN where that is not given (its size is the release's). A graph list
    is cut at the candidate's running-request `caps`: SGLang captures no batch past its request pool."""
    raw = _raw_sizes(found)
    if own_graph is not None or caps:
        raw = raw.copy()
    if own_graph is not None:
        fill = np.isnan(raw[:, 2]) & np.isfinite(own_graph)
        raw[fill, 2] = own_graph[fill]
    if caps:
        limit = np.asarray([capped_batch(params, math.inf, caps) for params in found.params])
        raw[:, 2] = np.where(np.isnan(raw[:, 2]), np.nan, np.minimum(raw[:, 2], limit))
    if GRAPH_SUM:
        raw = np.column_stack([raw, _graph_sums(found, own_graph, caps)])
    low, high = np.nanmin(raw, axis=0), np.nanmax(raw, axis=0)
    span = np.where(high > low, high - low, 1.0)
    out: np.ndarray = (raw - low) / span
    return out


def _graph_sums(found: Candidates, own_graph: np.ndarray | None, caps: Sequence[str]) -> np.ndarray:
    """Per candidate, the sum of the batch sizes its graphs capture (each graph keeps buffers that grow
    with its batch); 0 with graphs off, NaN where the list's size is not known."""
    out = np.zeros(len(found.configs))
    for i, (config, params) in enumerate(zip(found.configs, found.params, strict=True)):
        graph = config.cuda_graph
        if graph is None or not graph.enabled:
            continue
        top = graph.max_bs
        if top is None and not graph.bs:
            own = own_graph[i] if own_graph is not None else math.nan
            if not math.isfinite(own):
                out[i] = math.nan
                continue
            top = int(own)
        pool = capped_batch(params, math.inf, caps)
        out[i] = float(sum(captured_sizes(top, graph.bs, int(pool) if math.isfinite(pool) else None)))
    return out


def _raw_sizes(found: Candidates) -> np.ndarray:
    hit = _SIZES.get(id(found))
    if hit is not None and hit[0] is found:
        return hit[1]
    knobs = [knobs_of(c) for c in found.configs]
    names = sorted({n for k in knobs for n, v in k.others if size_of(n, v) is not None})
    raw = np.full((len(knobs), 3 + len(names)), np.nan)
    for i, k in enumerate(knobs):
        raw[i, 0] = k.fraction if k.fraction is not None else np.nan
        raw[i, 1] = 1.0 if k.graphs else 0.0
        raw[i, 2] = float(k.graph_max_bs) if k.graph_max_bs else (np.nan if k.graphs else 0.0)
        others = dict(k.others)
        for j, n in enumerate(names):
            size = size_of(n, others[n]) if n in others else 0.0
            raw[i, 3 + j] = size if size is not None else 0.0
    if len(_SIZES) > 8:
        _SIZES.clear()
    _SIZES[id(found)] = (found, raw)
    return raw


def finite_number(v: object) -> bool:
    """A real, finite number (not a bool)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))
