"""Plots of a study (matplotlib, saved as PNG; plotly for hover when it is installed).

Every function takes the frames of tuner.report.frame (`trials_frame`,
`requests_frame`) and returns a matplotlib Figure; nothing here reads the
database. Colours say the same thing everywhere: feasible blue, infeasible
(ran, missed an SLO) orange, failed (crash, OOM, NaN, ...) red, the Pareto
front ringed in black.

A failed trial has no measurement, so it is never drawn on a measurement axis (where a point
at some floor would read as a result): the Pareto plot lists failures beside the axes, and the
history and knob plots draw them in a strip of their own, labelled with their failure class.
Every function takes `context` (workload and constraints, see tuner.report.context) for a caption.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd
from matplotlib.figure import Figure  # no pyplot: no global figure state, no GUI backend, works headless

from tuner.knobs.registry import knob_with_role
from tuner.report.figure import COLOURS, caption, caption_lines, failure_list, label, save_png
from tuner.report.front_plot import pareto_plot, per_gpu_per_user_informative, per_gpu_per_user_plot
from tuner.report.knobs import fraction_param

__all__ = [
    "COLOURS",
    "failure_list",
    "history_plot",
    "latency_plot",
    "metric_vs_param_plot",
    "pareto_plot",
    "per_gpu_per_user_informative",
    "per_gpu_per_user_plot",
    "save_png",
]


def _failure_strip(ax: Any, xs: Sequence[Any], labels: Sequence[Any], xlabel: str) -> None:
    """Failed trials at their x in a strip of their own: a red cross and the failure class, no y scale."""
    ax.scatter(xs, [0.0] * len(xs), c=COLOURS["failed"], marker="x", s=46, clip_on=False, zorder=3)
    for xi, cls in zip(xs, labels, strict=False):
        ax.annotate(
            str(cls),
            (xi, 0.0),
            textcoords="offset points",
            xytext=(3, 4),
            fontsize=7,
            color=COLOURS["failed"],
        )
    ax.set_yticks([])
    ax.set_ylim(-1, 1.5)
    ax.set_ylabel(
        "failed\n(no value)", fontsize=8, color=COLOURS["failed"], rotation=0, ha="right", va="center"
    )
    ax.set_xlabel(xlabel)
    ax.grid(True, axis="x", alpha=0.3)


def metric_vs_param_plot(
    frame: pd.DataFrame,
    param: str | None = None,
    metrics: Sequence[str] = ("output_throughput", "kv_tokens"),
    *,
    context: str | None = None,
) -> Figure:
    """Each metric against one knob (the memory fraction's param by default); failures in a strip at
    their value."""
    param = param or fraction_param(frame.attrs.get("params", [])) or knob_with_role("fraction").name
    column = param if param in frame else f"param:{param}"
    failed = frame[frame["status"] == "failed"]
    strip = not failed.empty and column in failed
    fig = Figure(figsize=(5.2 * len(metrics), 4.8 if strip else 4))
    axes = fig.subplots(
        2 if strip else 1, len(metrics), squeeze=False, sharex="col", height_ratios=[4, 1] if strip else None
    )
    for i, metric in enumerate(metrics):
        ax = axes[0][i]
        for status in ("infeasible", "feasible"):
            part = frame[frame["status"] == status]
            if part.empty or column not in part:
                continue
            ax.scatter(
                pd.to_numeric(part[column], errors="coerce"),
                pd.to_numeric(part[metric], errors="coerce"),
                c=COLOURS[status],
                marker="o",
                label=status,
            )
        ax.set_ylabel(label(metric))
        ax.grid(True, alpha=0.3)
        if strip:
            _failure_strip(
                axes[1][i],
                list(pd.to_numeric(failed[column], errors="coerce")),
                list(failed["failure"]),
                param,
            )
        else:
            ax.set_xlabel(param)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"metrics vs {param}")
    fig.tight_layout(rect=(0, _bottom(fig, context), 1, 1))
    caption(fig, context)
    return fig


def latency_plot(
    requests: pd.DataFrame, *, trials: Sequence[int] | None = None, context: str | None = None
) -> Figure:
    """TTFT and TPOT distributions (ECDF over every successful request) of the chosen trials."""
    fig = Figure(figsize=(11, 4.4))
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
    fig.tight_layout(rect=(0, _bottom(fig, context), 1, 1))
    caption(fig, context)
    return fig


def _bottom(fig: Figure, context: str | None) -> float:
    """The figure fraction the caption takes at the bottom."""
    return 0.0 if not context else (0.16 * caption_lines(context) + 0.08) / fig.get_figheight()


def history_plot(
    frame: pd.DataFrame,
    metrics: Sequence[str] | None = None,
    directions: Sequence[str] | None = None,
    *,
    context: str | None = None,
) -> Figure:
    """Each objective by trial number, with the best feasible value so far; failures in a strip below."""
    names = list(metrics or frame.attrs.get("metric_names") or ("output_throughput", "kv_tokens"))
    dirs = list(directions or frame.attrs.get("directions") or ["maximize"] * len(names))
    ordered = frame.sort_values("trial")
    failed = ordered[ordered["status"] == "failed"]
    rows = len(names) + (0 if failed.empty else 1)
    fig = Figure(figsize=(9, 3 * len(names) + (1 if rows > len(names) else 0)))
    ratios = [3] * len(names) + ([1] if rows > len(names) else [])
    axes = fig.subplots(rows, 1, squeeze=False, sharex=True, height_ratios=ratios)
    for ax, metric, direction in zip(axes[:, 0], names, dirs, strict=False):
        for status in ("infeasible", "feasible"):
            part = ordered[ordered["status"] == status]
            if part.empty:
                continue
            ax.scatter(
                part["trial"],
                pd.to_numeric(part[metric], errors="coerce"),
                c=COLOURS[status],
                marker="o",
                label=status,
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
        ax.set_ylabel(label(metric))
        ax.grid(True, alpha=0.3)
    axes[0][0].legend(fontsize=8)
    if not failed.empty:
        _failure_strip(axes[-1][0], list(failed["trial"]), list(failed["failure"]), "trial")
    else:
        axes[-1][0].set_xlabel("trial")
    fig.suptitle("optimisation history")
    fig.tight_layout(rect=(0, _bottom(fig, context), 1, 1))
    caption(fig, context)
    return fig
