"""The capacity curve of one `tuner capacity` run: served throughput and latency percentiles against
the offered load, each load marked pass or fail, the capacity found and the SLO bounds drawn.

Reads the points stored with the run (`CapacityRecord.points`: each load's `curve`, the medians of
its runs); a run stored before curves were kept shows its SLO metrics only (`medians`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

from matplotlib.figure import Figure

from tuner.metrics import heading
from tuner.report.figure import COLOURS, caption
from tuner.store.capacity import CapacityRecord

__all__ = ["capacity_plot", "curve_of"]

PANELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("served", ("output_throughput",)),
    ("TTFT", ("ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms")),
    ("TPOT", ("tpot_p50_ms", "tpot_p90_ms", "tpot_p99_ms")),
)


def curve_of(point: Mapping[str, Any]) -> dict[str, float | None]:
    """A stored load's curve values (its SLO medians where the run kept no curve)."""
    curve = point.get("curve")
    values = dict(curve) if isinstance(curve, Mapping) else {}
    medians = point.get("medians")
    for key, value in (medians.items() if isinstance(medians, Mapping) else ()):
        values.setdefault(key, value)
    return values


def _bounds(record: CapacityRecord, metrics: Sequence[str]) -> list[tuple[str, float]]:
    out = []
    for slo in record.slos:
        for op in ("<=", ">=", "<", ">"):
            metric, found, bound = slo.partition(op)
            if found and metric in metrics:
                with contextlib.suppress(ValueError):
                    out.append((slo, float(bound)))
                break
    return out


def capacity_plot(record: CapacityRecord, *, context: str | None = None) -> Figure:
    """Served output throughput, TTFT and TPOT percentiles against the offered load (one panel each)."""
    points = sorted(record.points, key=lambda p: float(p["load"]))
    fig = Figure(figsize=(13.0, 4.4))
    axes = fig.subplots(1, len(PANELS))
    who = f"trial {record.trial_number}" if record.trial_number is not None else f"row {record.row_id}"
    for ax, (title, metrics) in zip(axes, PANELS, strict=True):
        drawn = False
        for metric in metrics:
            measured = [(float(p["load"]), v, bool(p.get("passed"))) for p in points
                        if (v := curve_of(p).get(metric)) is not None]  # fmt: skip
            if not measured:
                continue
            drawn = True
            ax.plot([m[0] for m in measured], [m[1] for m in measured], lw=1.2, label=heading(metric))
            for x, y, passed in measured:
                colour = COLOURS["feasible"] if passed else COLOURS["failed"]
                ax.scatter([x], [y], c=colour, marker="o" if passed else "x", s=36, zorder=3)
        for slo, bound in _bounds(record, metrics):
            ax.axhline(bound, color="0.4", ls=":", lw=1, label=f"SLO {slo}")
            drawn = True
        if record.capacity is not None:
            ax.axvline(record.capacity, color="black", ls="--", lw=0.9, label=f"capacity {record.capacity:g}")
        ax.set_xlabel(f"offered load ({record.unit})")
        ax.set_title(title, fontsize=10)
        ax.grid(True, alpha=0.3)
        if drawn:
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "not recorded for this run", ha="center", va="center", transform=ax.transAxes)
    fig.suptitle(f"capacity of {who}: {record.line()}", fontsize=9, wrap=True)
    fig.tight_layout(rect=(0, 0.06 if context else 0, 1, 0.9))
    caption(fig, context)
    return fig
