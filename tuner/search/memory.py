"""KV tokens and free VRAM against the memory fraction, fitted from the launches that came up.

SGLang sizes the KV pool from `mem-fraction-static`: KV bytes = fraction × total − weights −
reserve, so KV tokens are linear in the fraction, and the free memory left beside the pool falls
by the same bytes: both are lines in the fraction. Their slopes are properties of the model and
the GPU (shared by every CUDA-graph setting); the intercepts move with the graphs' memory and any
other memory knob. So the model keeps one slope per quantity, fitted over every group of
launches that differ only in the fraction, and one intercept per group; with a single launch in
a group, that launch and the shared slope place its line.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tuner.search.evidence import Evidence, Knobs


@dataclass(frozen=True, kw_only=True, slots=True)
class Prediction:
    """What the model expects of a launch before it is made (None: not enough launches yet)."""

    kv_tokens: float | None
    min_free_mib: float | None
    kv_error: float | None  # typical |residual| of the fit (tokens), None without residuals
    free_error_mib: float | None


def _group(k: Knobs) -> tuple[object, ...]:
    """Launches that differ only in the fraction (and the memory-neutral backends)."""
    return (k.graph_key, k.others)


@dataclass(frozen=True, kw_only=True, slots=True)
class _Line:
    slope: float | None
    intercepts: dict[tuple[object, ...], float]
    error: float | None

    def at(self, key: tuple[object, ...], fraction: float) -> float | None:
        if self.slope is None or key not in self.intercepts:
            return None
        return self.intercepts[key] + self.slope * fraction


def _fit(points: Sequence[tuple[tuple[object, ...], float, float]]) -> _Line:
    """Shared-slope least squares over groups: y = a_group + b·x."""
    groups: dict[tuple[object, ...], list[tuple[float, float]]] = {}
    for key, x, y in points:
        groups.setdefault(key, []).append((x, y))
    sxx = sxy = 0.0
    for pts in groups.values():
        mx = statistics.fmean(p[0] for p in pts)
        my = statistics.fmean(p[1] for p in pts)
        sxx += sum((x - mx) ** 2 for x, _ in pts)
        sxy += sum((x - mx) * (y - my) for x, y in pts)
    if sxx <= 1e-12:
        return _Line(slope=None, intercepts={}, error=None)
    slope = sxy / sxx
    intercepts = {
        key: statistics.fmean(y for _, y in pts) - slope * statistics.fmean(x for x, _ in pts)
        for key, pts in groups.items()
    }
    residuals = [abs(y - (intercepts[key] + slope * x)) for key, x, y in points]
    dof = len(points) - len(groups) - 1
    error = max(residuals) if dof > 0 else None
    return _Line(slope=slope, intercepts=intercepts, error=error)


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryModel:
    """Two lines (KV tokens, lowest free MiB) against the fraction, per graph setting."""

    kv: _Line
    free: _Line
    launches: int

    def predict(self, k: Knobs) -> Prediction:
        """KV tokens and lowest free MiB for these knobs (None where the model cannot tell yet)."""
        if k.fraction is None:
            return Prediction(kv_tokens=None, min_free_mib=None, kv_error=None, free_error_mib=None)
        key = _group(k)
        return Prediction(
            kv_tokens=self.kv.at(key, k.fraction),
            min_free_mib=self.free.at(key, k.fraction),
            kv_error=self.kv.error,
            free_error_mib=self.free.error,
        )


def fit_memory(evidence: Iterable[Evidence]) -> MemoryModel:
    """The model of every launch that came up and reported its KV tokens and free memory."""
    kv: list[tuple[tuple[object, ...], float, float]] = []
    free: list[tuple[tuple[object, ...], float, float]] = []
    for ev in evidence:
        f = ev.knobs.fraction
        if f is None or not ev.outcome.measured:
            continue
        if ev.kv_tokens is not None:
            kv.append((_group(ev.knobs), f, float(ev.kv_tokens)))
        if ev.min_free_mib is not None:
            free.append((_group(ev.knobs), f, float(ev.min_free_mib)))
    return MemoryModel(kv=_fit(kv), free=_fit(free), launches=max(len(kv), len(free)))
