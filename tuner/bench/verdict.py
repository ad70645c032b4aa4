"""What a benchmark result says against the server (pure): too many failed requests, a frozen server.

A misbehaving server must not read as a fast one: a load point with a larger share of failed
requests than `bench.max_failed_fraction` (default 0) fails the trial as `bench_errors`, and a
stage that saw no progress on any open request for the idle timeout is a `hang`.
"""

from __future__ import annotations

from tuner.bench.types import BenchResult, LoadPointResult

__all__ = ["failed_line", "failed_problem", "hang_message"]


def _classes(point: LoadPointResult) -> str:
    classes = ", ".join(f"{name} {count}" for name, count in point.metrics.errors) or "no class"
    first = next((r.error_text for r in point.records if not r.success and r.error_text), "")
    return f"{classes}; first: {first[:160]}" if first else classes


def failed_problem(result: BenchResult, max_failed_fraction: float) -> str | None:
    """The first load point whose failed share exceeds `max_failed_fraction`, said in one line; or None."""
    for point in result.points:
        m = point.metrics
        sent = m.completed + m.failed
        if sent and m.failed / sent > max_failed_fraction:
            allowed = f"; at most {max_failed_fraction:.0%} may fail" if max_failed_fraction else ""
            return (
                f"{m.failed} of {sent} requests failed at load point {point.point.label} "
                f"({_classes(point)}){allowed}"
            )
    return None


def failed_line(result: BenchResult) -> str | None:
    """`FAILED: N of M requests failed (classes)` over every load point, or None when none failed."""
    failed = sum(p.metrics.failed for p in result.points)
    if not failed:
        return None
    sent = sum(p.metrics.completed + p.metrics.failed for p in result.points)
    counts: dict[str, int] = {}
    for point in result.points:
        for name, count in point.metrics.errors:
            counts[name] = counts.get(name, 0) + count
    classes = ", ".join(f"{name} {count}" for name, count in sorted(counts.items())) or "no class"
    return f"FAILED: {failed} of {sent} requests failed ({classes})"


def hang_message(first_s: float, idle_s: float) -> str:
    """The failure message of a stage ended by a frozen server."""
    return (
        f"the server stopped answering during the benchmark: no progress on any open request for "
        f"{2 * idle_s:g} s after tokens flowed or {2 * first_s:g} s before (twice bench.timeouts)"
    )
