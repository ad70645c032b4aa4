"""Front plots: objective against objective, and output throughput per GPU against per user.

The axes have one fixed place and size in a figure of fixed size, whatever the study: front
points are marked `#n` on the plot and their knobs listed in a panel beside the axes (wrapped to
its width), the legend sits above that panel, failures are listed below the axes and the
workload and constraints caption runs along the bottom. Long knobs therefore never push the
axes into a strip, and ticks are few and short (thousands as `k`, millions as `M`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator

from tuner.report.figure import COLOURS, axes_metrics, caption, failure_list, label, wrap

FIGSIZE = (12.0, 6.8)  # inches
AXES_RECT = (0.075, 0.25, 0.555, 0.68)  # left, bottom, width, height (figure fraction), always
PANEL_X = 0.655  # where the legend and the front list begin
PANEL_CHARS = 58  # characters per line of the front list at its font size
PANEL_LINES = 22  # lines of the front list that fit beside the axes


def _short(value: float, _pos: int = 0) -> str:
    magnitude = abs(value)
    if magnitude >= 1e6:
        return f"{value / 1e6:g}M"
    if magnitude >= 1e4:
        return f"{value / 1e3:g}k"
    return f"{value:g}"


def _axes(fig: Figure) -> Any:
    ax = fig.add_axes(AXES_RECT)
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(MaxNLocator(nbins=6))
        axis.set_major_formatter(FuncFormatter(_short))
    ax.grid(True, alpha=0.3)
    return ax


def _scatter(ax: Any, frame: pd.DataFrame, x: str, y: str) -> None:
    for status in ("infeasible", "feasible"):
        part = frame[frame["status"] == status]
        if part.empty:
            continue
        name = {"infeasible": "ran, missed a constraint"}.get(status, status)
        noisy = part["noisy"].notna().sum() if "noisy" in part else 0
        ax.scatter(
            pd.to_numeric(part[x], errors="coerce"),
            pd.to_numeric(part[y], errors="coerce"),
            c=COLOURS[status],
            marker="o",
            s=46,
            alpha=0.85,
            label=f"{name}: {len(part)}" + (f" ({noisy} noisy)" if noisy else ""),
            zorder=3,
        )


def front_groups(front: pd.DataFrame, x: str, y: str) -> list[tuple[float, float, list[dict[str, Any]]]]:
    """Front points with every trial that sits on them ("#1,#6" when a reused result shares a point)."""
    groups: dict[tuple[float, float], list[dict[str, Any]]] = {}
    for rec in front.to_dict("records"):
        groups.setdefault((float(rec[x]), float(rec[y])), []).append(rec)
    return [(px, py, sorted(recs, key=lambda r: r["trial"])) for (px, py), recs in sorted(groups.items())]


def front_list(groups: Sequence[tuple[float, float, list[dict[str, Any]]]]) -> str:
    """`#3,#9  mem=0.85 cuda=off ...` per front point, wrapped to the panel, cut to fit it."""
    lines: list[str] = []
    for _, _, recs in groups:
        numbers = ",".join(f"#{r['trial']}" for r in recs)
        noisy = " (noisy)" if any(isinstance(r.get("noisy"), str) for r in recs) else ""
        lines.extend(wrap(f"{numbers}{noisy}  {recs[0]['knobs']}", PANEL_CHARS).splitlines())
    if len(lines) > PANEL_LINES:
        lines = [*lines[: PANEL_LINES - 1], f"... ({len(groups)} front points in all)"]
    return "\n".join(lines)


def _panel(
    fig: Figure, ax: Any, groups: Sequence[tuple[float, float, list[dict[str, Any]]]], heading: str
) -> None:
    handles, labels = ax.get_legend_handles_labels()
    top = AXES_RECT[1] + AXES_RECT[3]
    if handles:
        fig.legend(
            handles, labels, loc="upper left", bbox_to_anchor=(PANEL_X, top), fontsize=8, frameon=False
        )
    if groups:
        fig.text(PANEL_X, top - 0.2, heading, fontsize=9, weight="bold", va="top")
        fig.text(PANEL_X, top - 0.245, front_list(groups), fontsize=7.5, family="monospace", va="top")


def pareto_plot(
    frame: pd.DataFrame,
    metrics: Sequence[str] | None = None,
    *,
    title: str | None = None,
    annotate: bool = True,
    context: str | None = None,
) -> Figure:
    """Objective 0 against objective 1: feasible and infeasible trials; the front ringed, joined, numbered,
    and its knobs listed beside the axes. Failed launches have no measurement: listed below, not drawn."""
    x, y = axes_metrics(frame, metrics)
    fig = Figure(figsize=FIGSIZE)
    ax = _axes(fig)
    _scatter(ax, frame, x, y)
    front = frame[frame["pareto"]].sort_values(x)
    groups = front_groups(front, x, y) if not front.empty else []
    if groups:
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
        ax.plot([g[0] for g in groups], [g[1] for g in groups], color="black", lw=0.8, ls="--", zorder=2)
        if annotate:
            for px, py, recs in groups:
                numbers = ",".join(f"#{r['trial']}" for r in recs)
                ax.annotate(
                    numbers, (px, py), textcoords="offset points", xytext=(7, 7), fontsize=8, zorder=5
                )
    _failures(ax, frame)
    ax.set_xlabel(label(x))
    ax.set_ylabel(label(y))
    ax.set_title(title or f"{label(x)} vs {label(y)}: {len(frame)} trials", fontsize=11)
    _panel(fig, ax, groups if annotate else [], "Pareto front")
    caption(fig, context)
    return fig


def _failures(ax: Any, frame: pd.DataFrame) -> None:
    n_failed = int((frame["status"] == "failed").sum())
    if not n_failed:
        return
    ax.scatter([], [], c=COLOURS["failed"], marker="x", label=f"failed, not plotted (no value): {n_failed}")
    fig = ax.figure
    fig.text(
        AXES_RECT[0],
        AXES_RECT[1] - 0.09,
        wrap("failed: " + failure_list(frame), 120),
        fontsize=8,
        color=COLOURS["failed"],
        va="top",
    )


def per_gpu_per_user_informative(frame: pd.DataFrame) -> str:
    """Why the per-GPU vs per-user plot would say nothing ("" when it says something): at one load
    point on launches of one GPU count both axes are throughput over a constant, a straight line."""
    measured = frame[frame["status"].isin(["feasible", "infeasible"])]
    if measured.empty:
        return "no measured trial"
    def column(name: str) -> pd.Series:
        found = measured[name] if name in measured else pd.Series([], dtype=float)
        return pd.to_numeric(found, errors="coerce").dropna()

    gpus, users = set(column("launch_gpus")), column("concurrency")
    spread = (users.max() - users.min()) / users.max() if len(users) and users.max() > 0 else 0.0
    if len(gpus) <= 1 and spread < 0.2:
        return (
            "every launch used the same GPUs at one load: per GPU and per user both track throughput "
            "(vary the load points or the parallelism to see the trade-off)"
        )
    return ""


def per_gpu_per_user_plot(frame: pd.DataFrame, *, context: str | None = None) -> Figure:
    """Output throughput per GPU against per user (a request in flight): the serving trade-off
    between fleet cost and each user's speed; the front of the two ringed and numbered."""
    x, y = "output_throughput_per_user", "output_throughput_per_gpu"
    measured = frame[frame["status"].isin(["feasible", "infeasible"])].copy()
    for column in (x, y):
        measured[column] = pd.to_numeric(measured.get(column), errors="coerce")
    measured = measured.dropna(subset=[x, y])
    ok = measured[measured["status"] == "feasible"]
    keep = [
        not any(
            (o[x] >= r[x] and o[y] >= r[y]) and (o[x] > r[x] or o[y] > r[y]) for o in ok.to_dict("records")
        )
        for r in ok.to_dict("records")
    ]
    trade = ok[keep] if len(ok) else ok
    fig = Figure(figsize=FIGSIZE)
    ax = _axes(fig)
    _scatter(ax, measured, x, y)
    groups = front_groups(trade.sort_values(x), x, y) if not trade.empty else []
    if groups:
        ax.plot([g[0] for g in groups], [g[1] for g in groups], color="black", lw=0.8, ls="--", zorder=2)
        ax.scatter(trade[x], trade[y], s=170, facecolors="none", edgecolors="black", lw=1.6, zorder=4,
                   label=f"best trade-offs: {len(trade)}")  # fmt: skip
        for px, py, recs in groups:
            numbers = ",".join(f"#{r['trial']}" for r in recs)
            ax.annotate(numbers, (px, py), textcoords="offset points", xytext=(7, 7), fontsize=8, zorder=5)
    ax.set_xlabel(label(x))
    ax.set_ylabel(label(y))
    ax.set_title(f"throughput per GPU vs per user: {len(measured)} measured trials", fontsize=11)
    _panel(fig, ax, groups, "best trade-offs")
    caption(fig, context)
    return fig
