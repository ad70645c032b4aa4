"""What every plot and export states beside its numbers: the workload, the constraints, the front (pure).

"149.8 tok/s" means nothing without "C=64, 128 in / 16 out"; the workload and constraints come
from the space file stored with the study (`StudyData.space_text`), the trade-offs of the front
from the recorded measurements.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from tuner.metrics import DEFAULT_OBJECTIVES, METRICS, Metric
from tuner.report.frame import StudyData, compact_params, trial_figures
from tuner.report.pareto import pareto_front

NOT_RECORDED = "workload not recorded (a study started before the space file was stored with it)"


def _space(data: StudyData) -> Mapping[str, Any]:
    if not data.space_text:
        return {}
    try:
        loaded = yaml.safe_load(data.space_text)
    except yaml.YAMLError:
        return {}
    return loaded if isinstance(loaded, Mapping) else {}


def workload_line(data: StudyData) -> str:
    """`workload: random prompts, 128 in / 16 out tokens; load c64 (64 requests)`."""
    bench = _space(data).get("bench")
    if not isinstance(bench, Mapping):
        return NOT_RECORDED
    found = bench.get("workload")
    wl: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    kind = wl.get("kind", "random")
    lengths = f"{wl.get('input_len', 1024)} in / {wl.get('output_len', 1024)} out tokens"
    points = bench.get("load_points") or [{}]
    loads = []
    for point in points if isinstance(points, list) else []:
        if not isinstance(point, Mapping):
            continue
        conc = point.get("concurrency", 64)
        rate = point.get("request_rate")
        label = "-".join(p for p in (f"C={conc}" if conc else "", f"{rate} req/s" if rate else "") if p)
        prompts = point.get("num_prompts") or max(32, 5 * (conc or 32))
        loads.append(f"{label or 'unbounded'} ({prompts} requests)")
    return f"workload: {kind} prompts, {lengths}; load {', '.join(loads)}"


def constraints_line(data: StudyData) -> str:
    """`constraints: min_free_vram_mib >= 2048; gate passed` (every trial must also run and pass its gate)."""
    slos = _space(data).get("constraints") or []
    shown = [str(c) if not isinstance(c, Mapping) else " ".join(str(v) for v in c.values()) for c in slos]
    return "constraints: " + "; ".join([*shown, "ran without failing and passed the gate"])


def defines_slo(data: StudyData) -> bool:
    """The study's space sets constraints of its own (an SLO), beyond running and passing the gate."""
    return bool(_space(data).get("constraints"))


def context_line(data: StudyData) -> str:
    """Workload and constraints in one line (for plot captions)."""
    return f"{workload_line(data)} | {constraints_line(data)}"


@dataclass(frozen=True, kw_only=True, slots=True)
class FrontPoint:
    """One feasible Pareto-front trial (its figures as every view shows them: medians over its
    measurements) with its trade-off against the chosen one."""

    trials: tuple[int, ...]  # a reused result shares its point with its original
    knobs: str
    values: Mapping[str, float | None]  # tuner.report.figures: the median of each metric
    runs: int = 1  # measurements the medians are over

    @property
    def output_throughput(self) -> float | None:
        return self.values.get("output_throughput")

    @property
    def kv_tokens(self) -> float | None:
        return self.values.get("kv_tokens")

    @property
    def ttft_p99_ms(self) -> float | None:
        return self.values.get("ttft_p99_ms")

    @property
    def min_free_mib(self) -> float | None:  # VRAM headroom: the lowest free GPU memory during the run
        return self.values.get("min_free_vram_mib")


def front_points(data: StudyData) -> tuple[FrontPoint, ...]:
    """The feasible front, one entry per measurement, best first on the study's first objective."""
    groups: dict[int, list[int]] = {}
    for number in pareto_front(data):
        row = data.row_of(number)
        if row is not None:
            groups.setdefault(row.id, []).append(number)
    points = []
    for row_id, numbers in groups.items():
        row = next(r for r in data.rows if r.id == row_id)
        figures = trial_figures(data, row)
        points.append(
            FrontPoint(
                trials=tuple(sorted(numbers)),
                knobs=compact_params(row.params),
                values=dict(figures.values),
                runs=figures.runs,
            )
        )
    first = data.metric_names[0] if data.metric_names else "output_throughput"
    sign = -1.0 if data.directions and data.directions[0] == "minimize" else 1.0
    return tuple(sorted(points, key=lambda p: -sign * (p.values.get(first) or 0.0)))


def _rel(value: float | None, base: float | None) -> str:
    if value is None or base is None or base == 0:
        return "-"
    return f"{100.0 * (value - base) / base:+.1f}%"


def _short(name: str) -> str:
    known = {"output_throughput": "tok/s", "kv_tokens": "KV"}
    if name in known:
        return known[name]
    return METRICS[name].title if name in METRICS else name


def front_heading(objectives: Sequence[str] = DEFAULT_OBJECTIVES) -> str:
    """The heading of the front list: the study's objectives, then TTFT p99 and VRAM headroom."""
    shown = [METRICS[m].title if m in METRICS else m for m in _columns(objectives)]
    return f"feasible Pareto front ({', '.join(shown)}; lowest free VRAM during the run as VRAM headroom):"


def _columns(objectives: Sequence[str]) -> list[str]:
    return [m for m in dict.fromkeys([*objectives, "ttft_p99_ms"]) if m != "min_free_vram_mib"]


def tradeoff_lines(
    points: Sequence[FrontPoint], chosen_trial: int | None, objectives: Sequence[str] = DEFAULT_OBJECTIVES
) -> list[str]:
    """One line per front point: the study's objectives (medians; n when re-measured), TTFT p99, VRAM
    headroom, and each objective's change against the chosen point."""
    chosen = next((p for p in points if chosen_trial in p.trials), None)
    lines = []
    for p in points:
        if p is chosen or chosen is None:
            mark = "chosen" if p is chosen else "front point"
        else:
            mark = "vs chosen: " + ", ".join(
                f"{_rel(p.values.get(m), chosen.values.get(m))} {_short(m)}" for m in objectives
            )
        columns = [m for m in _columns(objectives) if m in METRICS]
        shown = ", ".join(f"{METRICS[m].title} {_num(p.values.get(m), METRICS[m])}" for m in columns)
        runs = f" (median of {p.runs} runs)" if p.runs > 1 else ""
        lines.append(
            f"  #{','.join(map(str, p.trials))}: {shown}, VRAM headroom "
            f"{_num(p.min_free_mib, METRICS['min_free_vram_mib'])}{runs} ({mark}) {p.knobs}"
        )
    return lines


def _num(value: float | None, metric: Metric) -> str:
    return "-" if value is None else metric.show(value)
