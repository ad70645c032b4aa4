"""`report --html`: one self-contained HTML file to send a colleague (pure: values in, text out).

Opens with no network: plotly's bundled plotly.min.js is inlined once (from the installed plotly
package) and the memory and latency plots are PNGs embedded as data URIs. Sections: what was
measured (workload, constraints), the interactive Pareto front (hover: knobs and metrics; failures
listed, never drawn), the recommended export, every trial with its failure class, the failures
with the log lines that prove them, and the memory, history and latency plots.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd
from matplotlib.figure import Figure

from tuner.errors import ReportError
from tuner.report.detail import FailureView

__all__ = ["HtmlReport", "png_data_uri", "render_html"]

_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1200px;
color:#222;padding:0 16px}
h1{font-size:22px;margin-bottom:4px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}
.context{background:#f4f6f8;border-left:4px solid #1f77b4;padding:8px 12px;margin:10px 0}
table{border-collapse:collapse;font-size:12.5px;width:100%}th,td{border-bottom:1px solid #eee;padding:3px 6px;
text-align:left;vertical-align:top}th{background:#fafafa;position:sticky;top:0}
td.num{text-align:right;font-variant-numeric:tabular-nums}tr.failed td.result{color:#d62728;font-weight:600}
tr.infeasible td.result{color:#ff7f0e;font-weight:600}tr.pareto{background:#f1f8ff}
pre{background:#f8f8f8;padding:8px;overflow-x:auto;font-size:12px;white-space:pre-wrap}
.failed-list{color:#d62728;font-size:13px}
details{margin:6px 0}summary{cursor:pointer}img{max-width:100%}.note{color:#555;font-size:12.5px}
"""


@dataclass(frozen=True, kw_only=True, slots=True)
class HtmlReport:
    """Everything the page shows, already computed."""

    study: str
    context: Sequence[str]  # workload, constraints
    front_html: str  # the plotly figure as an HTML fragment (no script tag for plotly.js)
    front_note: str  # the failed trials, listed (they have no point on the plot)
    trials: pd.DataFrame  # interactive.trials_table
    trial_status: Sequence[str]  # feasible | infeasible | failed per row of `trials`
    failures: Sequence[FailureView]  # detail.failure_views
    export_text: str  # the recommended launch script
    export_reason: str
    images: Sequence[tuple[str, str]]  # (caption, data URI)
    asks: Sequence[str] = ()  # what became of the asks (tuner.study.asks.tally_lines)
    capacity: Sequence[str] = ()  # `tuner capacity` results, one line per trial


def png_data_uri(fig: Figure, *, dpi: int = 100) -> str:
    """A matplotlib figure as an inline PNG data URI."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def plotly_js() -> str:
    """plotly.min.js from the installed plotly package (ReportError without it)."""
    try:
        from plotly.offline import get_plotlyjs
    except ImportError as exc:
        raise ReportError(
            "report --html needs plotly for the interactive front; expected it installed "
            "(pip install -e '.[html]')"
        ) from exc
    return str(get_plotlyjs())


def _esc(value: object) -> str:
    return html.escape("" if value is None else str(value))


def _trials_table(frame: pd.DataFrame, status: Sequence[str]) -> str:
    head = "".join(f"<th>{_esc(c)}</th>" for c in frame.columns)
    rows = []
    for (_, rec), state in zip(frame.iterrows(), status, strict=False):
        classes = state + (" pareto" if rec.get("pareto") else "")
        cells = []
        for column, value in rec.items():
            kind = "result" if column == "result" else ("num" if column not in ("knobs", "pareto") else "")
            cells.append(f"<td class='{kind}'>{_esc(value)}</td>")
        rows.append(f"<tr class='{classes}'>{''.join(cells)}</tr>")
    return f"<table id='trials'><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _failures(views: Sequence[FailureView]) -> str:
    if not views:
        return "<p>No launch failed or missed a constraint.</p>"
    parts = []
    for v in views:
        log = f"<p class='note'>server log: {_esc(v.log_path)}</p>" if v.log_path else ""
        parts.append(
            f"<details open><summary><b>{_esc(v.title)}</b> — {_esc(v.message)}</summary>"
            f"<p class='note'>{_esc(v.params)}</p>{log}"
            f"<pre>{_esc(v.log_excerpt or '(no log lines)')}</pre>"
            "</details>"
        )
    return "".join(parts)


def _capacity(lines: Sequence[str]) -> str:
    if not lines:
        return ""
    items = "".join(f"<li>{_esc(line)}</li>" for line in lines)
    return f"<h2>Capacity under SLO</h2><ul id='capacity'>{items}</ul>"


def render_html(report: HtmlReport, *, plotly_source: str | None = None) -> str:
    """The whole page; `plotly_source` is inlined in a script tag (default: the installed plotly.min.js)."""
    js = plotly_source if plotly_source is not None else plotly_js()
    context = "".join(f"<div>{_esc(line)}</div>" for line in report.context)
    images = "".join(
        f"<figure><img alt='{_esc(caption)}' src='{uri}'>"
        f"<figcaption class='note'>{_esc(caption)}</figcaption></figure>"
        for caption, uri in report.images
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{_esc(report.study)}: tuning report</title>
<style>{_STYLE}</style><script type="text/javascript">{js}</script></head>
<body>
<h1>{_esc(report.study)}: tuning report</h1>
<div class="context">{context}</div>
<h2>Pareto front</h2>
<p class="note">Hover a point for its knobs and metrics. Failed trials have no measurement: they are
listed under the plot with their failure class, never drawn as values.</p>
<div id="front">{report.front_html}</div>
<p class="failed-list">{_esc(report.front_note)}</p>
{_capacity(report.capacity)}
<h2>Recommended launch</h2>
<p>{_esc(report.export_reason)}</p>
<pre id="export">{_esc(report.export_text)}</pre>
<h2>All trials</h2>
{"".join(f"<p class='note asks'>{_esc(line)}</p>" for line in report.asks)}
{_trials_table(report.trials, report.trial_status)}
<h2>Failed launches, with the log lines that prove them</h2>
{_failures(report.failures)}
<h2>Memory, history and latency</h2>
{images}
</body></html>
"""
