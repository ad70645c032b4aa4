"""The interactive Pareto front (plotly): hover with every knob and metric; failures listed, never drawn.

Used by the notebook and by `report --html` (tuner.report.html); plotly is optional (the
`notebook` and `html` extras), so `pareto_plotly` returns None without it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from tuner.metrics import HEADLINE, METRICS, formatted, heading
from tuner.report.figure import COLOURS, axes_metrics, failure_list

__all__ = ["formatted_table", "hover_text", "pareto_plotly", "trials_table"]


def _present(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def hover_text(rec: Mapping[str, Any], x: str, y: str) -> str:
    """A trial's hover: number, status or failure class (never 'nan'), knobs, metrics with units."""
    status = str(rec["failure"]) if _present(rec.get("failure")) else str(rec["status"])
    pareto = " · Pareto front" if rec.get("pareto") else ""
    lines = [f"<b>trial {rec['trial']}</b> · {status}{pareto}", str(rec.get("knobs") or "")]
    if _present(rec.get("why")) and rec.get("why"):
        lines.append(str(rec["why"]))
    if _present(rec.get("runs")) and int(rec["runs"]) > 1:
        lines.append(f"median of {int(rec['runs'])} runs")
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
    x, y = axes_metrics(frame, metrics)
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
    _layout(fig, frame, x, y, context=context, failures=failures)
    return fig


def _layout(fig: Any, frame: pd.DataFrame, x: str, y: str, *, context: str | None, failures: bool) -> None:
    """Axis titles, the title, and the notes under the plot: the failed trials (listed, never drawn)
    and the context."""
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


def trials_table(frame: pd.DataFrame, metrics: Sequence[str]) -> pd.DataFrame:
    """The asks for people, forbidden ones left out (they are a count): what became of each (ok,
    constraint missed, failed with its class, pruned with its rule, reused; `noisy` marked), never
    NaN; formatted numbers, - where missing."""
    columns = [*dict.fromkeys([*metrics, *HEADLINE])]
    if "fate" in frame:
        frame = frame[frame["fate"] != "forbidden"]
    out = pd.DataFrame(
        {
            "trial": frame["trial"],
            "result": [_result(rec) for rec in frame.to_dict("records")],
            "pareto": ["yes" if p else "" for p in frame["pareto"]],
            "knobs": frame["knobs"],
            "why": [str(w) if _present(w) else "" for w in frame.get("why", [""] * len(frame))],
        }
    )
    for column in columns:
        if column in frame:
            out[heading(column)] = [formatted(column, v) for v in frame[column]]
    if "request_goodput" in frame and frame["request_goodput"].map(_present).any():
        out["goodput (req/s)"] = [f"{v:,.2f}" if _present(v) else "-" for v in frame["request_goodput"]]
        out["SLO attainment"] = [f"{v:.1%}" if _present(v) else "-" for v in frame["slo_attainment"]]
    if "runs" in frame:  # n and range where a trial was re-measured (the figures are medians)
        out["runs"] = [_runs(rec) for rec in frame.to_dict("records")]
    return out.reset_index(drop=True)


def _runs(rec: Mapping[str, Any]) -> str:
    runs = rec.get("runs")
    if not _present(runs):
        return "-"
    n = int(runs)  # type: ignore[arg-type]  # present: a number
    if n <= 1:
        return str(n)
    low, high = rec.get("output_throughput_min"), rec.get("output_throughput_max")
    spread = (
        f" (out tok/s {formatted('output_throughput', low)}–{formatted('output_throughput', high)})"
        if _present(low) and _present(high)
        else ""
    )
    return f"median of {n}{spread}"


def formatted_table(table: pd.DataFrame) -> pd.DataFrame:
    """A table for people: columns with no value at all left out, numbers formatted by metric
    (thousands separated, sensible decimals), - where missing. For display; CSV keeps raw values."""
    keep = [c for c in table.columns if table[c].map(_present).any()]
    out = table[keep].copy()
    for column in keep:
        values = out[column]
        if column in ("trial", "n_confirm") or not any(isinstance(v, float) for v in values):
            out[column] = [v if _present(v) else "-" for v in values]
            continue
        if str(column) in METRICS:
            out[column] = [formatted(str(column), v) for v in values]
            continue
        small = pd.to_numeric(values, errors="coerce").abs().max() < 10
        fmt = "{:,.2f}" if small else "{:,.1f}"
        out[column] = [fmt.format(float(v)) if _present(v) else "-" for v in values]
    return out.reset_index(drop=True)


def _result(rec: Mapping[str, Any]) -> str:
    fate = rec.get("fate")
    if not _present(fate):
        return str(rec["failure"]) if _present(rec.get("failure")) else str(rec["status"])
    if fate == "failed" and _present(rec.get("failure")):
        text = f"failed: {rec['failure']}"
    elif fate == "reused" and _present(rec.get("reused_from")):
        text = f"reused #{int(rec['reused_from'])}"
    else:
        text = str(fate)
    return text + (" (noisy)" if _present(rec.get("noisy")) else "")
