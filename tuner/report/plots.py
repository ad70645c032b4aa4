"""Plots of a study (matplotlib, saved as PNG; plotly for hover when it is installed).

Every function takes the frames of tuner.report.frame (`trials_frame`,
`requests_frame`) and returns a matplotlib Figure; nothing here reads the
database. Colours say the same thing everywhere: feasible blue, infeasible
(ran, missed an SLO) orange, failed (crash, OOM, NaN, ...) red, the Pareto
front ringed in black.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure  # no pyplot: no global figure state, no GUI backend, works headless

__all__ = [
    "history_plot",
    "latency_plot",
    "metric_vs_param_plot",
    "pareto_plot",
    "pareto_plotly",
    "save_png",
]

COLOURS = {"feasible": "#1f77b4", "infeasible": "#ff7f0e", "failed": "#d62728"}
LABELS = {
    "output_throughput": "output throughput (tok/s)",
    "total_throughput": "total throughput (tok/s)",
    "request_throughput": "request throughput (req/s)",
    "kv_tokens": "KV-cache tokens",
    "min_free_vram_mib": "min free VRAM (MiB)",
    "ttft_p99_ms": "TTFT p99 (ms)",
    "ttft_p50_ms": "TTFT p50 (ms)",
    "tpot_p99_ms": "TPOT p99 (ms)",
    "tpot_p50_ms": "TPOT p50 (ms)",
    "itl_p99_ms": "ITL p99 (ms)",
    "e2e_p99_ms": "E2E latency p99 (ms)",
}


def _label(metric: str) -> str:
    return LABELS.get(metric, metric)


def save_png(fig: Figure, path: str | Path, *, dpi: int = 120) -> Path:
    """Write the figure as a PNG (parent folders created); returns the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png", dpi=dpi, bbox_inches="tight")
    return out


def _axes_metrics(frame: pd.DataFrame, metrics: Sequence[str] | None) -> tuple[str, str]:
    names = list(metrics or frame.attrs.get("metric_names") or ("output_throughput", "kv_tokens"))
    if len(names) == 1:
        names.append("kv_tokens" if names[0] != "kv_tokens" else "output_throughput")
    return names[0], names[1]


def _floor(values: pd.Series) -> float:
    """Where to draw a missing value: just below the smallest measured one."""
    known = pd.to_numeric(values, errors="coerce").dropna()
    if known.empty:
        return 0.0
    low, high = float(known.min()), float(known.max())
    return low - 0.06 * ((high - low) or abs(low) or 1.0)


def pareto_plot(
    frame: pd.DataFrame,
    metrics: Sequence[str] | None = None,
    *,
    title: str | None = None,
    annotate: bool = True,
) -> Figure:
    """Objective 0 against objective 1: feasible, infeasible and failed trials; the front ringed and labelled.

    A failed trial has no measurement of at least one axis; it is drawn on that
    axis's floor (below every measured value) so it is seen, never mistaken for a result.
    """
    x, y = _axes_metrics(frame, metrics)
    fig = Figure(figsize=(9, 6))
    ax = fig.subplots()
    x_floor, y_floor = _floor(frame[x]) if x in frame else 0.0, _floor(frame[y]) if y in frame else 0.0
    for status in ("failed", "infeasible", "feasible"):
        part = frame[frame["status"] == status]
        if part.empty:
            continue
        xs = pd.to_numeric(part[x], errors="coerce").fillna(x_floor)
        ys = pd.to_numeric(part[y], errors="coerce").fillna(y_floor)
        label = {
            "failed": "failed (missing metric drawn at the axis floor)",
            "infeasible": "infeasible (missed an SLO)",
        }.get(status, status)
        marker = "x" if status == "failed" else "o"
        ax.scatter(
            xs,
            ys,
            c=COLOURS[status],
            marker=marker,
            s=46,
            alpha=0.85,
            label=f"{label}: {len(part)}",
            clip_on=False,
            zorder=3,
        )
        if status == "failed":
            for xi, yi, cls in zip(xs, ys, part["failure"], strict=False):
                ax.annotate(
                    str(cls),
                    (xi, yi),
                    textcoords="offset points",
                    xytext=(4, -10),
                    fontsize=7,
                    color=COLOURS["failed"],
                )
    front = frame[frame["pareto"]].sort_values(x)
    if not front.empty:
        ax.scatter(
            front[x],
            front[y],
            s=170,
            facecolors="none",
            edgecolors="black",
            linewidths=1.6,
            label=f"Pareto front: {len(front)}",
            zorder=4,
        )
        ax.plot(front[x], front[y], color="black", linewidth=0.8, linestyle="--", zorder=2)
        if annotate:
            _label_front(ax, front, x, y)
    failed = frame[frame["status"] == "failed"]
    if x in failed and failed[x].isna().any():
        ax.axvline(x_floor, color=COLOURS["failed"], linewidth=0.6, linestyle=":", zorder=1)
    if y in failed and failed[y].isna().any():
        ax.axhline(y_floor, color=COLOURS["failed"], linewidth=0.6, linestyle=":", zorder=1)
    ax.set_xlabel(_label(x))
    ax.set_ylabel(_label(y))
    ax.set_title(title or f"{_label(x)} vs {_label(y)}: {len(frame)} trials")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    return fig


def _label_front(ax: Any, front: pd.DataFrame, x: str, y: str) -> None:
    """One box per distinct front point ("#1,#6" when a reused result sits on its original)."""
    groups: dict[tuple[float, float], list[Any]] = {}
    for _, rec in front.iterrows():
        groups.setdefault((float(rec[x]), float(rec[y])), []).append(rec)
    middle = (front[x].min() + front[x].max()) / 2
    for (px, py), recs in groups.items():
        numbers = ",".join(f"#{r['trial']}" for r in recs)
        right = len(groups) > 1 and px > middle
        ax.annotate(
            f"{numbers}  {recs[0]['knobs']}",
            (px, py),
            textcoords="offset points",
            xytext=(-8 if right else 8, 8),
            ha="right" if right else "left",
            fontsize=8,
            bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "0.7", "alpha": 0.9},
            zorder=5,
        )


def pareto_plotly(frame: pd.DataFrame, metrics: Sequence[str] | None = None) -> Any:
    """The same scatter in plotly, with every knob in the hover text (None without plotly)."""
    try:
        import plotly.graph_objects as go
    except ImportError:
        return None
    x, y = _axes_metrics(frame, metrics)
    fig = go.Figure()
    for status in ("failed", "infeasible", "feasible"):
        part = frame[frame["status"] == status]
        if part.empty:
            continue
        hover = [
            f"trial {r['trial']}{' (Pareto)' if r['pareto'] else ''}<br>{r['knobs']}<br>"
            f"{r['failure'] or status}<br>{_label(x)}: {r[x]}<br>{_label(y)}: {r[y]}"
            for _, r in part.iterrows()
        ]
        fig.add_trace(
            go.Scatter(
                x=part[x].fillna(_floor(frame[x])),
                y=part[y].fillna(_floor(frame[y])),
                mode="markers",
                name=status,
                text=hover,
                hoverinfo="text",
                marker={
                    "color": COLOURS[status],
                    "symbol": "x" if status == "failed" else "circle",
                    "size": [14 if p else 9 for p in part["pareto"]],
                    "line": {"width": [2 if p else 0 for p in part["pareto"]], "color": "black"},
                },
            )
        )
    fig.update_layout(xaxis_title=_label(x), yaxis_title=_label(y), title="Pareto front (ringed)")
    return fig


def metric_vs_param_plot(
    frame: pd.DataFrame,
    param: str = "mem-fraction-static",
    metrics: Sequence[str] = ("output_throughput", "kv_tokens"),
) -> Figure:
    """Each metric against one knob (mem-fraction-static by default), coloured by status."""
    column = param if param in frame else f"param:{param}"
    fig = Figure(figsize=(5.2 * len(metrics), 4))
    axes = fig.subplots(1, len(metrics), squeeze=False)
    for ax, metric in zip(axes[0], metrics, strict=False):
        floor = _floor(frame[metric]) if metric in frame else 0.0
        for status in ("failed", "infeasible", "feasible"):
            part = frame[frame["status"] == status]
            if part.empty or column not in part:
                continue
            xs = pd.to_numeric(part[column], errors="coerce")
            ys = pd.to_numeric(part[metric], errors="coerce").fillna(floor)
            ax.scatter(
                xs,
                ys,
                c=COLOURS[status],
                marker="x" if status == "failed" else "o",
                label=status,
                clip_on=False,
            )
        ax.set_xlabel(param)
        ax.set_ylabel(_label(metric))
        ax.grid(True, alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"metrics vs {param}")
    fig.tight_layout()
    return fig


def latency_plot(requests: pd.DataFrame, *, trials: Sequence[int] | None = None) -> Figure:
    """TTFT and TPOT distributions (ECDF over every successful request) of the chosen trials."""
    fig = Figure(figsize=(11, 4))
    axes = fig.subplots(1, 2)
    ok = requests[requests["success"].astype(bool)] if "success" in requests else requests
    chosen = list(trials) if trials is not None else sorted(ok["trial"].dropna().unique().tolist())
    for ax, column, name in zip(axes, ("ttft_ms", "tpot_ms"), ("TTFT (ms)", "TPOT (ms)"), strict=False):
        for number in chosen:
            values = (
                pd.to_numeric(ok.loc[ok["trial"] == number, column], errors="coerce").dropna().sort_values()
            )
            if values.empty:
                continue
            frac = [(i + 1) / len(values) for i in range(len(values))]
            p99 = values.quantile(0.99)
            ax.step(values, frac, where="post", label=f"#{number} (p99 {p99:.1f})")
        ax.set_xlabel(name)
        ax.set_ylabel("fraction of requests")
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.suptitle("latency distributions of the chosen trials")
    fig.tight_layout()
    return fig


def history_plot(
    frame: pd.DataFrame, metrics: Sequence[str] | None = None, directions: Sequence[str] | None = None
) -> Figure:
    """Each objective by trial number, with the best feasible value so far."""
    names = list(metrics or frame.attrs.get("metric_names") or ("output_throughput", "kv_tokens"))
    dirs = list(directions or frame.attrs.get("directions") or ["maximize"] * len(names))
    fig = Figure(figsize=(9, 3 * len(names)))
    axes = fig.subplots(len(names), 1, squeeze=False, sharex=True)
    ordered = frame.sort_values("trial")
    for ax, metric, direction in zip(axes[:, 0], names, dirs, strict=False):
        floor = _floor(ordered[metric])
        for status in ("failed", "infeasible", "feasible"):
            part = ordered[ordered["status"] == status]
            if part.empty:
                continue
            ax.scatter(
                part["trial"],
                pd.to_numeric(part[metric], errors="coerce").fillna(floor),
                c=COLOURS[status],
                marker="x" if status == "failed" else "o",
                label=status,
                clip_on=False,
            )
        best, line = (-math.inf if direction == "maximize" else math.inf), []
        for _, rec in ordered.iterrows():
            value = rec[metric]
            if rec["status"] == "feasible" and value is not None and not pd.isna(value):
                best = max(best, value) if direction == "maximize" else min(best, value)
            line.append(best if math.isfinite(best) else float("nan"))
        ax.step(
            ordered["trial"], line, where="post", color="black", linewidth=1, label="best feasible so far"
        )
        ax.set_ylabel(_label(metric))
        ax.grid(True, alpha=0.3)
    axes[0][0].legend(fontsize=8)
    axes[-1][0].set_xlabel("trial")
    fig.suptitle("optimisation history")
    fig.tight_layout()
    return fig
