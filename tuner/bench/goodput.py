"""Goodput and SLO attainment of one load point, as bench_serving defines them (pure).

`--goodput ttft:300 tpot:40 e2el:2000` (milliseconds, bench_serving's keys) bounds each request: a
request is good when it succeeded and its TTFT, TPOT (0 when it produced at most one output token)
and end-to-end latency are each within the bounds given. `request_goodput` = good requests / the
benchmark's duration (req/s, bench_serving's name); `slo_attainment` = good / sent (failed requests
count in the denominator). The latencies are the request's own, as every other figure reads them
(`RequestRecord.ttft_ms`, `tpot_ms`, `e2e_ms`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from tuner.bench.types import RequestRecord
from tuner.errors import ConfigError

__all__ = ["GOODPUT_KEYS", "GoodputFigures", "count_good", "goodput_flag", "is_good", "parse_goodput",
           "point_goodput"]  # fmt: skip

GOODPUT_KEYS = ("ttft", "tpot", "e2el")  # bench_serving's `--goodput` keys, in its order


@dataclass(frozen=True, kw_only=True, slots=True)
class GoodputFigures:
    """Goodput of one load point under per-request bounds."""

    request_goodput: float  # good requests per second of the benchmark
    slo_attainment: float  # good / sent
    good: int
    sent: int
    bounds: Mapping[str, float]  # bench_serving key -> ms

    def flag(self) -> str:
        """The bounds as bench_serving's `--goodput` argument (`ttft:2000 tpot:50`)."""
        return goodput_flag(self.bounds)

    def line(self) -> str:
        return (
            f"goodput {self.request_goodput:,.2f} req/s, SLO attainment {self.slo_attainment:.1%} "
            f"({self.good} of {self.sent} requests within --goodput {self.flag()})"
        )


def parse_goodput(tokens: Sequence[str]) -> dict[str, float]:
    """`["ttft:300", "tpot:40"]` -> {"ttft": 300.0, "tpot": 40.0}; ConfigError naming the bad token."""
    out: dict[str, float] = {}
    for token in tokens:
        key, sep, text = token.partition(":")
        key = key.strip().lower()
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not sep or key not in GOODPUT_KEYS or not math.isfinite(value) or value <= 0:
            raise ConfigError(
                f"--goodput {token!r}: expected KEY:MS with KEY one of {', '.join(GOODPUT_KEYS)} and a "
                f"positive number of milliseconds (e.g. --goodput ttft:300 tpot:40)"
            )
        out[key] = value
    return out


def goodput_flag(bounds: Mapping[str, float]) -> str:
    """The bounds as bench_serving's `--goodput` argument (`ttft:300 tpot:40`), in its key order."""
    return " ".join(f"{k}:{bounds[k]:g}" for k in GOODPUT_KEYS if k in bounds)


def is_good(
    success: bool, ttft_ms: float | None, tpot_ms: float | None, e2e_ms: float | None,
    bounds: Mapping[str, float],
) -> bool:  # fmt: skip
    """One request within every bound given (a missing TPOT is 0: at most one output token)."""
    if not success:
        return False
    values = {"ttft": ttft_ms, "tpot": 0.0 if tpot_ms is None else tpot_ms, "e2el": e2e_ms}
    for key, bound in bounds.items():
        value = values.get(key)
        if value is None or not math.isfinite(value) or value > bound:
            return False
    return True


def count_good(
    requests: Iterable[tuple[bool, float | None, float | None, float | None]], bounds: Mapping[str, float]
) -> tuple[int, int]:
    """(good, sent) over (success, ttft_ms, tpot_ms, e2e_ms) of each request sent."""
    good = sent = 0
    for success, ttft, tpot, e2e in requests:
        sent += 1
        good += is_good(success, ttft, tpot, e2e, bounds)
    return good, sent


def point_goodput(
    records: Sequence[RequestRecord], bounds: Mapping[str, float], duration_s: float | None
) -> GoodputFigures | None:
    """Goodput of a load point's measured requests (never-sent ones excluded); None without bounds,
    requests or a duration (not measured: never 0)."""
    if not bounds or duration_s is None or not duration_s > 0:
        return None
    sent_records = [r for r in records if r.t_sent_s is not None]
    if not sent_records:
        return None
    good, sent = count_good(((r.success, r.ttft_ms, r.tpot_ms, r.e2e_ms) for r in sent_records), bounds)
    return GoodputFigures(
        request_goodput=good / duration_s, slo_attainment=good / sent, good=good, sent=sent,
        bounds=dict(bounds),
    )  # fmt: skip
