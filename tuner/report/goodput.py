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
from dataclasses import dataclass
from typing import Any

import pandas as pd

from tuner.space.sections import Slo

__all__ = ["Goodput", "goodput_bounds", "goodput_of", "objective_duration", "with_latencies"]

# bench_serving's `--goodput` keys and the request latency columns they bound (tuner.report.detail)
FAMILIES = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2e": "e2e_ms"}
BENCH_SERVING_KEYS = {"ttft": "ttft", "tpot": "tpot", "e2e": "e2el"}


@dataclass(frozen=True, kw_only=True, slots=True)
class Goodput:
    """Goodput of one load point under per-request bounds."""

    request_goodput: float  # good requests per second of the benchmark
    slo_attainment: float  # good / sent
    good: int
    sent: int
    bounds: Mapping[str, float]  # family -> ms

    def flag(self) -> str:
        """The bounds as bench_serving's `--goodput` argument (`ttft:2000 tpot:50`)."""
        return " ".join(f"{BENCH_SERVING_KEYS[k]}:{v:g}" for k, v in self.bounds.items())

    def line(self) -> str:
        return (
            f"goodput {self.request_goodput:,.2f} req/s, SLO attainment {self.slo_attainment:.1%} "
            f"({self.good} of {self.sent} requests within --goodput {self.flag()})"
        )


def goodput_bounds(slos: Sequence[Slo]) -> dict[str, float]:
    """The per-request bound of each latency family that the study's constraints bound from above."""
    out: dict[str, float] = {}
    for slo in slos:
        family = slo.metric.split("_", 1)[0]
        if family in FAMILIES and slo.metric.endswith("_ms") and slo.op in ("<=", "<"):
            out[family] = min(slo.bound, out.get(family, slo.bound))
    return out


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
    good_mask = frame["success"].astype(bool) if "success" in frame else pd.Series(True, index=frame.index)
    for family, bound in bounds.items():
        values = pd.to_numeric(frame[FAMILIES[family]], errors="coerce")
        if family == "tpot":
            values = values.fillna(0.0)  # one output token or none: TPOT 0, as bench_serving
        good_mask &= values <= bound
    good, sent = int(good_mask.sum()), len(frame)
    return Goodput(
        request_goodput=good / duration_s,
        slo_attainment=good / sent if sent else 0.0,
        good=good,
        sent=sent,
        bounds=dict(bounds),
    )


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
