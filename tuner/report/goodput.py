"""Goodput and SLO attainment of a trial's objective load point, as SGLang's bench_serving 0.5.23
defines them (`--goodput ttft:MS tpot:MS e2el:MS`), from its stored request records (pure).

A request is good when it succeeded and its TTFT, TPOT (0 when it produced at most one token) and
end-to-end latency are each within their bound; `request_goodput` = good requests / benchmark
duration (req/s, bench_serving's name), `slo_attainment` = good / sent (failed requests count in
the denominator). The per-request bounds are those of the study's latency constraints: a
constraint on any percentile of TTFT, TPOT or E2E latency (`ttft_p99_ms <= 2000`) bounds each
request's value of that latency, as `--goodput ttft:2000` does; the tightest bound of a family
wins. A study without a latency constraint has no goodput (None: not measured, never 0).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from tuner.bench.goodput import GoodputFigures, count_good
from tuner.objectives import latency_bounds
from tuner.space.goals import Slo

__all__ = ["Goodput", "goodput_bounds", "goodput_of", "objective_duration", "with_latencies"]

# bench_serving's `--goodput` keys and the request latency columns they bound (tuner.report.detail)
FAMILIES = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2e": "e2e_ms"}
BENCH_SERVING_KEYS = {"ttft": "ttft", "tpot": "tpot", "e2e": "e2el"}


Goodput = GoodputFigures  # one load point's goodput, as `tuner bench --goodput` computes it


def goodput_bounds(slos: Sequence[Slo]) -> dict[str, float]:
    """The per-request bound of each latency family that the study's constraints bound from above
    (tuner.objectives.latency_bounds, keyed by family here: ttft, tpot, e2e)."""
    family = {v: k for k, v in BENCH_SERVING_KEYS.items()}
    return {family[k]: v for k, v in latency_bounds(slos).items()}


def objective_duration(bench: Mapping[str, Any] | None, label: str | None) -> float | None:
    """The benchmark duration of the objective load point from a row's `bench` record."""
    points = (bench or {}).get("points") or []
    for point in points:
        metrics = point.get("metrics") if isinstance(point, Mapping) else None
        shown = (point.get("point") or {}).get("label") if isinstance(point, Mapping) else None
        if isinstance(metrics, Mapping) and (label is None or shown in (label, None) or len(points) == 1):
            duration = metrics.get("duration_s")
            return float(duration) if isinstance(duration, (int, float)) and duration > 0 else None
    return None


def goodput_of(
    requests: pd.DataFrame, bounds: Mapping[str, float], duration_s: float | None, label: str | None = None
) -> Goodput | None:
    """Goodput of the load point `label` (every record when None) under `bounds`; None without bounds,
    records or a duration."""
    if not bounds or duration_s is None or duration_s <= 0 or requests.empty:
        return None
    frame = requests
    if label is not None and "point_label" in frame and (frame["point_label"] == label).any():
        frame = frame[frame["point_label"] == label]
    frame = with_latencies(frame)
    if "ttft_ms" not in frame:
        return None
    if "t_sent_s" in frame:
        frame = frame[pd.to_numeric(frame["t_sent_s"], errors="coerce").notna()]  # requests that went out
    success = frame["success"].astype(bool) if "success" in frame else pd.Series(True, index=frame.index)
    columns = [pd.to_numeric(frame[FAMILIES[f]], errors="coerce") if FAMILIES[f] in frame else None
               for f in ("ttft", "tpot", "e2e")]  # fmt: skip
    rows = zip(
        success,
        *(_values(c, len(frame)) for c in columns),
        strict=True,
    )
    keyed = {BENCH_SERVING_KEYS[f]: v for f, v in bounds.items()}
    good, sent = count_good(rows, keyed)  # one definition with `tuner bench --goodput` and the store
    if not sent:
        return None
    return GoodputFigures(
        request_goodput=good / duration_s, slo_attainment=good / sent, good=good, sent=sent, bounds=keyed
    )


def _values(column: pd.Series | None, n: int) -> list[float | None]:
    if column is None:
        return [None] * n
    return [None if pd.isna(v) else float(v) for v in column]


def with_latencies(frame: pd.DataFrame) -> pd.DataFrame:
    """Add ttft_ms = t_first − t_sent, e2e_ms = t_end − t_sent, tpot_ms = (e2e − ttft)/(out − 1) (out > 1)."""
    out = frame.copy()
    if not {"t_sent_s", "t_first_s", "t_end_s", "output_tokens"} <= set(out.columns):
        return out
    sent = pd.to_numeric(out["t_sent_s"], errors="coerce")
    ttft = (pd.to_numeric(out["t_first_s"], errors="coerce") - sent) * 1000.0
    e2e = (pd.to_numeric(out["t_end_s"], errors="coerce") - sent) * 1000.0
    tokens = pd.to_numeric(out["output_tokens"], errors="coerce")
    tpot = (e2e - ttft) / (tokens - 1)
    out["ttft_ms"] = ttft
    out["e2e_ms"] = e2e
    out["tpot_ms"] = tpot.where(tokens > 1)
    return out
