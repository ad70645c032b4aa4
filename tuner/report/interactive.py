"""The interactive Pareto front (plotly): hover with every knob and metric; failures listed, never drawn.

Used by the notebook and by `report --html` (tuner.report.html); plotly is optional (the
`notebook` and `html` extras), so `pareto_plotly` returns None without it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from tuner.metrics import HEADLINE, formatted, heading
from tuner.report.plots import COLOURS, _axes_metrics, failure_list

__all__ = ["hover_text", "pareto_plotly"]


def _present(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def hover_text(rec: Mapping[str, Any], x: str, y: str) -> str:
    """A trial's hover: number, status or failure class (never 'nan'), knobs, metrics with units."""
    status = str(rec["failure"]) if _present(rec.get("failure")) else str(rec["status"])
    pareto = " · Pareto front" if rec.get("pareto") else ""
    lines = [f"<b>trial {rec['trial']}</b> · {status}{pareto}", str(rec.get("knobs") or "")]
    for metric in dict.fromkeys((x, y, "ttft_p99_ms", "tpot_p99_ms", "min_free_vram_mib")):
        if metric in rec:
            lines.append(f"{heading(metric)}: {formatted(metric, rec[metric])}")
    return "<br>".join(lines)


def pareto_plotly(
    frame: pd.DataFrame,
    metrics: Sequence[str] | None = None,
    *,
    context: str | None = None,
    failures: bool = True,
) -> Any:
    """The front in plotly (None without plotly): knobs, metrics, TTFT, free VRAM in the hover."""
    try:
        import plotly.graph_objects as go
    except ImportError:
        return None
    x, y = _axes_metrics(frame, metrics)
    fig = go.Figure()
    for status in ("infeasible", "feasible"):
        part = frame[frame["status"] == status]
        if part.empty:
            continue
        fig.add_trace(
            go.Scatter(
                x=part[x],
                y=part[y],
                mode="markers",
                name="infeasible (missed a constraint)" if status == "infeasible" else "feasible",
                text=[hover_text(r, x, y) for r in part.to_dict("records")],
                hoverinfo="text",
                marker={
                    "color": COLOURS[status],
                    "size": [14 if p else 9 for p in part["pareto"]],
                    "line": {"width": [2 if p else 0 for p in part["pareto"]], "color": "black"},
                },
            )
        )
    front = frame[frame["pareto"]].sort_values(x)
    if not front.empty:
        fig.add_trace(
            go.Scatter(
                x=front[x],
                y=front[y],
                mode="lines",
                name="Pareto front",
                hoverinfo="skip",
                line={"color": "black", "dash": "dash", "width": 1},
            )
        )
    n_failed = int((frame["status"] == "failed").sum()) if failures else 0
    failed = f"failed, not plotted (no trusted measurement): {failure_list(frame)}"
    notes = [f"<span style='color:{COLOURS['failed']}'>{failed}</span>"] if n_failed else []
    if context:
        notes.append(context)
    fig.update_layout(
        xaxis_title=heading(x),
        yaxis_title=heading(y),
        title="Pareto front (ringed, dashed line)",
        hoverlabel={"align": "left"},
        margin={"b": 80 + 30 * len(notes)},
        annotations=[
            {
                "text": note,
                "xref": "paper",
                "yref": "paper",
                "x": 0,
                "y": -0.2 - 0.08 * i,
                "showarrow": False,
                "xanchor": "left",
                "font": {"size": 11},
            }
            for i, note in enumerate(notes)
        ],
    )
    return fig


def trials_table(frame: pd.DataFrame, metrics: Sequence[str]) -> pd.DataFrame:
    """The trials for people: status or failure class (never NaN), formatted numbers, - where missing."""
    columns = [*dict.fromkeys([*metrics, *HEADLINE])]
    out = pd.DataFrame(
        {
            "trial": frame["trial"],
            "result": [
                str(f) if _present(f) else str(st)
                for f, st in zip(frame["failure"], frame["status"], strict=False)
            ],
            "pareto": ["yes" if p else "" for p in frame["pareto"]],
            "knobs": frame["knobs"],
        }
    )
    for column in columns:
        if column in frame:
            out[heading(column)] = [formatted(column, v) for v in frame[column]]
    return out.reset_index(drop=True)
