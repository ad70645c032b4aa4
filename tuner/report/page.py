"""Assemble the HTML report of a study: front, trials, failures, plots, the recommended export."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from tuner.errors import ProfileError
from tuner.report.capacity_plot import capacity_plot
from tuner.report.context import constraints_line, defines_slo, workload_line
from tuner.report.detail import failure_views, requests_frame
from tuner.report.export import build_profile, select
from tuner.report.frame import StudyData, trials_frame
from tuner.report.html import HtmlReport, png_data_uri, render_html
from tuner.report.interactive import pareto_plotly, trials_table
from tuner.report.knobs import fraction_param
from tuner.report.pareto import pareto_front
from tuner.report.plots import (
    failure_list,
    history_plot,
    latency_plot,
    metric_vs_param_plot,
    per_gpu_per_user_informative,
    per_gpu_per_user_plot,
)
from tuner.report.profile import render_sh
from tuner.report.status import pruned_lines
from tuner.sglang.options import OptionTable, builtin_table
from tuner.store.capacity import latest_by_row
from tuner.store.factory import open_store
from tuner.store.protocol import StoreOpener
from tuner.study.asks import classify, tally, tally_lines


def study_page(
    data: StudyData,
    *,
    table: OptionTable | None = None,
    plotly_source: str | None = None,
    stores: StoreOpener = open_store,
) -> str:
    """The self-contained HTML report of `data` (requests read from its database for the latency plot)."""
    front = pareto_front(data)
    frame = trials_frame(data, front)
    context = f"{workload_line(data)} | {constraints_line(data)}"
    figure = pareto_plotly(frame, failures=False)  # the page states failures and context in HTML
    front_html = (
        "" if figure is None else figure.to_html(full_html=False, include_plotlyjs=False, div_id="pareto")
    )
    images = _images(data, frame, front, context, stores)
    try:
        choice = select(data)
        profile = build_profile(data, choice)
        export_text = render_sh(profile, table or builtin_table(profile.sglang_version))
        reason = choice.reason
    except ProfileError as exc:
        export_text, reason = "", f"nothing to export: {exc}"
    report = HtmlReport(
        study=data.name,
        context=(workload_line(data), constraints_line(data)),
        front_html=front_html,
        front_note=f"failed, not plotted (no trusted measurement): {failure_list(frame)}"
        if failure_list(frame)
        else "",
        trials=trials_table(frame, data.metric_names),
        trial_status=[
            str(s)
            for s, f in zip(frame.get("status", []), frame.get("fate", []), strict=False)
            if f != "forbidden"
        ],
        capacity=[record.line() for record in latest_by_row(data.capacity).values()],
        asks=[
            *tally_lines(tally(asks := classify(data.trials, data.rows)), has_slo=defines_slo(data)),
            *pruned_lines(asks),
        ],
        failures=failure_views(data),
        export_text=export_text,
        export_reason=reason,
        images=images,
    )
    return render_html(report, plotly_source=plotly_source)


def _images(
    data: StudyData, frame: pd.DataFrame, front: Sequence[int], context: str, stores: StoreOpener
) -> list[tuple[str, str]]:
    """The page's figures as (caption, PNG data URI): metrics against the memory fraction's param,
    the history, per GPU against per user, the front's latencies (its requests read through
    the store), each capacity curve."""
    images: list[tuple[str, str]] = []
    fraction = fraction_param(frame.attrs.get("params", []), data.space_text)
    if fraction is not None:
        images.append(
            (
                f"metrics against {fraction}",
                png_data_uri(metric_vs_param_plot(frame, fraction, context=context)),
            )
        )
    if not frame.empty:
        images.append(("optimisation history", png_data_uri(history_plot(frame, context=context))))
        if not per_gpu_per_user_informative(frame):
            images.append(
                (
                    "output throughput per GPU against per user",
                    png_data_uri(per_gpu_per_user_plot(frame, context=context)),
                )
            )
    rows = list({r.id: r for n in front if (r := data.row_of(n)) is not None}.values())
    if rows:
        with stores(data.url) as store:
            requests = requests_frame(store, rows)
        if not requests.empty:
            images.append(
                (
                    "TTFT and TPOT of the Pareto-front trials",
                    png_data_uri(latency_plot(requests, context=context)),
                )
            )
    for record in latest_by_row(data.capacity).values():
        who = f"trial {record.trial_number}" if record.trial_number is not None else f"row {record.row_id}"
        images.append(
            (
                f"capacity curve of {who}: served throughput, TTFT and TPOT against the offered load",
                png_data_uri(capacity_plot(record, context=context)),
            )
        )
    return images
