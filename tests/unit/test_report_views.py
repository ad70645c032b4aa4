"""Every view tells the truth about failures, and states the workload and constraints (pure parts)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from support.reports import make_row, study_data

from tuner.config import Outcome
from tuner.errors import ConfigError
from tuner.report.context import constraints_line, front_points, tradeoff_lines, workload_line
from tuner.report.export import build_profile, select
from tuner.report.frame import load_study_data, trials_frame
from tuner.report.html import HtmlReport, render_html
from tuner.report.interactive import hover_text, pareto_plotly, trials_table
from tuner.report.pareto import pareto_front
from tuner.report.plots import failure_list, history_plot, metric_vs_param_plot, pareto_plot

SPACE = (Path(__file__).resolve().parents[2] / "search_spaces" / "glm5-nvfp4-sm120-sim.yaml").read_text()


def _data():  # type: ignore[no-untyped-def]
    rows = [
        make_row(0, mem=0.85, tput=150.0, kv=369_000, min_free=8_000),
        make_row(1, mem=0.92, tput=140.0, kv=499_000, min_free=3_400),
        make_row(2, mem=0.95, outcome=Outcome.OOM),
        make_row(3, mem=0.81, outcome=Outcome.NAN),
    ]
    return replace(study_data(rows), space_text=SPACE)


def test_workload_and_constraints_come_from_the_stored_space() -> None:
    data = _data()
    assert workload_line(data) == "workload: random prompts, 128 in / 16 out tokens; load C=64 (64 requests)"
    assert constraints_line(data) == (
        "constraints: min_free_vram_mib >= 2048; ran without failing and passed the gate"
    )
    assert "not recorded" in workload_line(replace(data, space_text=None))


def test_the_export_lists_every_front_point_with_its_trade_off_and_headroom() -> None:
    data = _data()
    points = front_points(data)
    assert [p.trials for p in points] == [(0,), (1,)]
    lines = tradeoff_lines(points, chosen_trial=0)
    assert "VRAM headroom 8,000 MiB (chosen)" in lines[0]
    assert "VRAM headroom 3,400 MiB (vs chosen: -6.7% tok/s, +35.2% KV)" in lines[1]
    profile = build_profile(data, select(data, trial=0))
    assert profile.context[0].startswith("workload: random prompts") and len(profile.context) == 7
    assert profile.context[-2].startswith("verify with: python -m tuner bench --url")


def test_failures_never_sit_on_a_measurement_axis() -> None:
    data = _data()
    frame = trials_frame(data, pareto_front(data))
    assert failure_list(frame) == "#2 oom, #3 nan"
    fig = pareto_plot(frame, context="workload: x")
    ax = fig.axes[0]
    plotted = sum(len(c.get_offsets()) for c in ax.collections)
    assert plotted == 2 + 2  # two measured trials, two rings of the front; no failure point
    assert any("failed: #2 oom, #3 nan" in t.get_text() for t in fig.texts)
    assert any(t.get_text() == "workload: x" for t in fig.texts)
    history = history_plot(frame)
    strip = history.axes[-1]
    assert "failed" in strip.get_ylabel() and {t.get_text() for t in strip.texts} == {"oom", "nan"}
    mem = metric_vs_param_plot(frame)
    assert {t.get_text() for t in mem.axes[-1].texts} == {"oom", "nan"}


def test_hover_and_table_never_say_nan_for_a_feasible_trial() -> None:
    data = _data()
    frame = trials_frame(data, pareto_front(data))
    records = frame.to_dict("records")
    assert "· feasible" in hover_text(records[0], "output_throughput", "kv_tokens")
    assert "nan" not in hover_text(records[0], "output_throughput", "kv_tokens").lower()
    assert "min free VRAM (MiB): 8,000" in hover_text(records[0], "output_throughput", "kv_tokens")
    table = trials_table(frame, data.metric_names)
    assert list(table["result"]) == ["ok", "ok", "failed: oom", "failed: nan"]
    assert table.loc[0, "output throughput (tok/s)"] == "150.0" and table.loc[2, "KV-cache tokens"] == "-"
    figure = pareto_plotly(frame)
    if figure is not None:
        assert sum(len(t.x) for t in figure.data if t.mode == "markers") == 2


def test_the_html_page_is_one_file_with_the_given_script() -> None:
    data = _data()
    frame = trials_frame(data, pareto_front(data))
    report = HtmlReport(
        study="s-v1",
        context=("workload: w", "constraints: c"),
        front_html="<div id='pareto'></div>",
        front_note="failed: #2 oom",
        trials=trials_table(frame, data.metric_names),
        trial_status=list(frame["status"]),
        failures=(),
        export_text="exec x <y>",
        export_reason="chose trial 0",
        images=(),
    )
    page = render_html(report, plotly_source="/*plotly*/")
    assert '<script type="text/javascript">/*plotly*/</script>' in page
    assert "exec x &lt;y&gt;" in page and page.count("<tr class='failed") == 2


def test_a_missing_sqlite_file_is_an_error_not_a_new_database(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_study_data(f"sqlite:///{tmp_path}/nope.db")
    assert not (tmp_path / "nope.db").exists()


def test_a_table_for_people_has_formatted_numbers_and_no_empty_column() -> None:
    import pandas as pd

    from tuner.report.interactive import formatted_table

    table = pd.DataFrame(
        {
            "trial": [0, 12],
            "output_throughput": [171.804512, 149.812893],
            "kv_tokens": [369211.0, None],
            "sparse_backends": [None, None],
            "mem-fraction-static": [0.85, 0.9],
        }
    )
    shown = formatted_table(table)
    assert list(shown.columns) == ["trial", "output_throughput", "kv_tokens", "mem-fraction-static"]
    assert list(shown["output_throughput"]) == ["171.8", "149.8"]
    assert list(shown["kv_tokens"]) == ["369,211", "-"] and list(shown["mem-fraction-static"]) == [
        "0.85",
        "0.90",
    ]
