"""One trial's figures, produced once: every metric of a measurement, and the median of a trial's
measurements with n and range (pure).

Status, the CSVs, the PNGs, the HTML page, the notebook, the export (its pick, its header and its
front list) and the dashboard's values and attributes of a re-measured trial (tuner.study.amend)
show `TrialFigures.values`; per-GPU metrics divide by the launch's own GPUs (`launch_gpu_count`),
never by every GPU of the host.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tuner.metrics import METRICS, derived_values
from tuner.store.codec import finite
from tuner.store.rows import StoredTrial

__all__ = ["TrialFigures", "figures_over", "launch_gpu_count", "measurements"]

MEASURED = tuple(METRICS)

_PARALLEL_FLAGS = {
    "tp": ("--tp-size", "--tensor-parallel-size", "--tp"),
    "pp": ("--pp-size", "--pipeline-parallel-size"),
    "dp": ("--dp-size", "--data-parallel-size", "--dp"),
}


def _flag_int(argv: Sequence[str], names: Sequence[str]) -> int | None:
    for i, token in enumerate(argv):
        name, eq, inline = token.partition("=")
        if name in names:
            text = inline if eq else (argv[i + 1] if i + 1 < len(argv) else "")
            try:
                return int(text)
            except ValueError:
                return None
    return None


def launch_gpu_count(row: StoredTrial) -> int:
    """The GPUs the trial's launch used: tensor x pipeline x data parallel from its command line
    (data-parallel attention shares the tensor-parallel GPUs), else the GPUs it was given, else
    the GPUs recorded with it. Never the host's GPU count for a launch that used fewer."""
    argv = row.argv or ()
    sizes = {k: _flag_int(argv, names) for k, names in _PARALLEL_FLAGS.items()}
    if argv:
        tp, pp, dp = (max(1, sizes[k] or 1) for k in ("tp", "pp", "dp"))
        if "--enable-dp-attention" in argv:
            dp = 1
        return tp * pp * dp
    given = (row.launch or {}).get("gpus") or ()
    return len(given) or len(row.gpus)


def measurements(row: StoredTrial) -> dict[str, float | None]:
    """Every metric of one recorded measurement (None where it was not measured); per-GPU metrics
    over the launch's own GPUs (`launch_gpu_count`)."""
    out: dict[str, float | None] = dict.fromkeys(MEASURED)
    for name in MEASURED:
        out[name] = finite(row.metrics.get(name)) if row.metrics else None
    out["kv_tokens"] = finite(row.kv_tokens)
    out["min_free_vram_mib"] = finite(row.min_free_mib)
    out.update(derived_values(out, launch_gpu_count(row)))
    return out


@dataclass(frozen=True, kw_only=True, slots=True)
class TrialFigures:
    """What every view shows for one trial: each metric as the median of its measurements (the
    trial's own run and its re-measurements by the finalists or `confirm`), with n and range.

    `trial_figures` is the only producer: status, the CSVs, the PNGs, the HTML page, the notebook,
    the export (its pick, its header and its front list) and the live summary read it, so one
    trial never shows two numbers.
    """

    values: Mapping[str, float | None]  # the median per metric (the one run's value when n = 1)
    runs: int  # measurements that ran the benchmark to the end (0 for a failed launch)
    low: Mapping[str, float | None]  # the lowest measurement per metric
    high: Mapping[str, float | None]  # the highest measurement per metric

    def get(self, name: str) -> float | None:
        return self.values.get(name)

    def spread(self, name: str = "output_throughput") -> str:
        """`median of 3 runs; out tok/s 164.5–167.2` when re-measured, else ""."""
        lo, hi = self.low.get(name), self.high.get(name)
        if self.runs <= 1 or lo is None or hi is None:
            return ""
        metric = METRICS.get(name)
        title = "out tok/s" if name == "output_throughput" else (metric.title if metric else name)
        fmt = metric.fmt if metric is not None else "{:,.1f}"
        return f"median of {self.runs} runs; {title} {fmt.format(lo)}–{fmt.format(hi)}"


def figures_over(rows: Sequence[StoredTrial], row: StoredTrial) -> TrialFigures:
    """The displayed figures of the trial recorded in `row`, over its re-measurements among `rows`."""
    own = measurements(row)
    runs = [own] if row.outcome.measured else []
    runs += [measurements(r) for r in rows if r.confirm_of == row.id and r.outcome.measured]
    if len(runs) <= 1:
        return TrialFigures(values=own, runs=len(runs), low=own, high=own)
    values: dict[str, float | None] = {}
    low: dict[str, float | None] = {}
    high: dict[str, float | None] = {}
    for name in MEASURED:
        seen = [v for run in runs if (v := run.get(name)) is not None]
        values[name] = statistics.median(seen) if seen else None
        low[name] = min(seen) if seen else None
        high[name] = max(seen) if seen else None
    return TrialFigures(values=values, runs=len(runs), low=low, high=high)
