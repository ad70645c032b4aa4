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

from tuner.report.frame import StudyData, compact_params, measurements
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
    """One feasible Pareto-front trial with its trade-off against the chosen one."""

    trials: tuple[int, ...]  # a reused result shares its point with its original
    knobs: str
    output_throughput: float | None
    kv_tokens: float | None
    ttft_p99_ms: float | None
    min_free_mib: float | None  # VRAM headroom: the lowest free GPU memory seen during the run


def front_points(data: StudyData) -> tuple[FrontPoint, ...]:
    """The feasible front, one entry per measurement, by output throughput (highest first)."""
    groups: dict[int, list[int]] = {}
    for number in pareto_front(data):
        row = data.row_of(number)
        if row is not None:
            groups.setdefault(row.id, []).append(number)
    points = []
    for row_id, numbers in groups.items():
        row = next(r for r in data.rows if r.id == row_id)
        m = measurements(row)
        points.append(
            FrontPoint(
                trials=tuple(sorted(numbers)),
                knobs=compact_params(row.params),
                output_throughput=m.get("output_throughput"),
                kv_tokens=m.get("kv_tokens"),
                ttft_p99_ms=m.get("ttft_p99_ms"),
                min_free_mib=m.get("min_free_vram_mib"),
            )
        )
    return tuple(sorted(points, key=lambda p: -(p.output_throughput or 0.0)))


def _rel(value: float | None, base: float | None) -> str:
    if value is None or base is None or base == 0:
        return "-"
    return f"{100.0 * (value - base) / base:+.1f}%"


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def tradeoff_lines(points: Sequence[FrontPoint], chosen_trial: int | None) -> list[str]:
    """One line per front point: its numbers, VRAM headroom, and change against the chosen point."""
    chosen = next((p for p in points if chosen_trial in p.trials), None)
    lines = []
    for p in points:
        if p is chosen or chosen is None:
            mark = "chosen" if p is chosen else "front point"
        else:
            tput = _rel(p.output_throughput, chosen.output_throughput)
            mark = f"vs chosen: {tput} tok/s, {_rel(p.kv_tokens, chosen.kv_tokens)} KV"
        lines.append(
            f"  #{','.join(map(str, p.trials))}: {_num(p.output_throughput, '{:,.1f}')} tok/s, "
            f"{_num(p.kv_tokens, '{:,.0f}')} KV tokens, TTFT p99 {_num(p.ttft_p99_ms, '{:,.0f}')} ms, "
            f"VRAM headroom {_num(p.min_free_mib, '{:,.0f}')} MiB ({mark}) {p.knobs}"
        )
    return lines
