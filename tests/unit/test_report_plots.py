"""Front plots keep their axes' place and size whatever a study holds: every shipped sim scenario."""

from __future__ import annotations

import io
import itertools
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.figure import Figure
from PIL import Image

from tuner.report.figure import save_png
from tuner.report.frame import compact_params
from tuner.report.front_plot import AXES_RECT, FIGSIZE, pareto_plot, per_gpu_per_user_plot
from tuner.report.plots import latency_plot
from tuner.sim.landscape import evaluate, pareto_front
from tuner.sim.spacefile import read_space

ROOT = Path(__file__).resolve().parents[2]
SIM_SPACES = sorted(p for p in (ROOT / "search_spaces").glob("*-sim.yaml"))
CONTEXT = "workload: random prompts, 1024 in / 1024 out tokens; load C=64 (320 requests) | " * 2


def _frame(space_path: Path, limit: int = 60) -> pd.DataFrame:
    """A study as the oracle would have measured it: up to `limit` points of the space."""
    space = read_space(space_path, grid=5)
    scored = evaluate(space, space.scenario())[:limit]
    front = {id(s) for s in pareto_front(scored)}
    records = []
    for i, s in enumerate(scored):
        p = s.prediction
        status = "feasible" if s.feasible else ("infeasible" if p.output_tok_s is not None else "failed")
        out = p.output_tok_s if status != "failed" else None
        records.append(
            {
                "trial": i,
                "status": status,
                "failure": None if status != "failed" else p.outcome.value,
                "pareto": id(s) in front,
                "knobs": compact_params(s.point),
                "noisy": None,
                "output_throughput": out,
                "kv_tokens": p.kv_tokens if status != "failed" else None,
                "output_throughput_per_gpu": None if out is None else out / 4,
                "output_throughput_per_user": None if out is None else out / 64,
            }
        )
    frame = pd.DataFrame.from_records(records)
    frame.attrs["metric_names"] = ["output_throughput", "kv_tokens"]
    return frame


def _axes_pixels(fig: Figure) -> tuple[tuple[int, int], tuple[float, float, float, float]]:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    size = Image.open(io.BytesIO(buf.getvalue())).size
    fig.canvas.draw()
    box = fig.axes[0].get_window_extent()
    return size, (round(box.x0), round(box.y0), round(box.width), round(box.height))


@pytest.mark.parametrize("space", SIM_SPACES, ids=lambda p: p.stem)
def test_front_plots_keep_the_axes_size_on_every_sim_scenario(space: Path) -> None:
    frame = _frame(space)
    assert frame["pareto"].any(), space
    want_size = (round(FIGSIZE[0] * 100), round(FIGSIZE[1] * 100))
    want_box = tuple(
        round(v)
        for v in (
            AXES_RECT[0] * want_size[0],
            AXES_RECT[1] * want_size[1],
            AXES_RECT[2] * want_size[0],
            AXES_RECT[3] * want_size[1],
        )
    )
    for fig in (pareto_plot(frame, context=CONTEXT), per_gpu_per_user_plot(frame, context=CONTEXT)):
        size, box = _axes_pixels(fig)
        assert size == want_size and box == want_box, (space.stem, size, box)
        assert any(t.get_text().startswith("workload:") for t in fig.texts)  # the caption


def test_the_caption_is_on_the_latency_plot_and_saving_keeps_the_figure_size(tmp_path: Path) -> None:
    rows = itertools.product((1, 2), range(20))
    requests = pd.DataFrame(
        [{"trial": t, "success": True, "ttft_ms": 10.0 + i, "tpot_ms": 1.0 + i / 10} for t, i in rows]
    )
    fig = latency_plot(requests, context="workload: x | constraints: y")
    assert any(t.get_text() == "workload: x | constraints: y" for t in fig.texts)
    path = save_png(fig, tmp_path / "latency.png", dpi=100)
    assert Image.open(path).size == (round(fig.get_figwidth() * 100), round(fig.get_figheight() * 100))
