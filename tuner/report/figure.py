"""What every plot of a study shares: colours, axis labels, the caption, the failure list, saving.

Figures have a fixed size and are saved as they are laid out (no `bbox_inches="tight"`, which
grows the canvas around long text and squashes the axes): long text goes in panels of fixed
place beside or below the axes, wrapped to their width.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import IO

import pandas as pd
from matplotlib.figure import Figure

from tuner.metrics import heading

COLOURS = {"feasible": "#1f77b4", "infeasible": "#ff7f0e", "failed": "#d62728"}
CAPTION_CHARS = 150  # a caption line at fontsize 7 across a 9-12 inch figure


def label(metric: str) -> str:
    """An axis label for a metric: its heading in the registry (title and unit)."""
    return heading(metric)


def save_png(fig: Figure, path: str | Path | IO[bytes], *, dpi: int = 120) -> Path | None:
    """Write the figure as a PNG at its own size (parent folders created); returns the path.

    A file object (the CLI's atomic writer) is written as it is; None is returned."""
    if not isinstance(path, (str, Path)):
        fig.savefig(path, format="png", dpi=dpi)
        return None
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png", dpi=dpi)
    return out


def wrap(text: str, width: int) -> str:
    """Text wrapped at `width` characters, for panels of fixed size."""
    return "\n".join(textwrap.fill(part, width) for part in text.splitlines())


def caption_lines(context: str | None) -> int:
    """How many lines the caption takes (figures reserve room for it)."""
    return len(wrap(context, CAPTION_CHARS).splitlines()) if context else 0


def caption(fig: Figure, context: str | None) -> None:
    """Workload and constraints along the bottom of the figure."""
    if context:
        fig.text(0.01, 0.005, wrap(context, CAPTION_CHARS), fontsize=7, color="0.3", ha="left", va="bottom")


def failure_list(frame: pd.DataFrame, limit: int = 14) -> str:
    """`#3 oom, #5 nan, ...` for the failed launches (their class; never a value)."""
    failed = frame[frame["status"] == "failed"].sort_values("trial")
    items = [f"#{r['trial']} {r['failure'] or 'failed'}" for _, r in failed.iterrows()]
    more = f", +{len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


def axes_metrics(frame: pd.DataFrame, metrics: Sequence[str] | None) -> tuple[str, str]:
    """The two metrics of a front plot: the given ones, else the study's objectives."""
    names = list(metrics or frame.attrs.get("metric_names") or ("output_throughput", "kv_tokens"))
    if len(names) == 1:
        names.append("kv_tokens" if names[0] != "kv_tokens" else "output_throughput")
    return names[0], names[1]
