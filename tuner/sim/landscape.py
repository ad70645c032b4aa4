"""`python -m tuner.sim landscape`: the oracle over every point of a space; the true best and front.

    python -m tuner.sim landscape --space search_spaces/X.yaml [--scenario S] [--grid 11]
                                  [--bench input_len=331 --bench concurrency=64 ...] [--all] [--json]

Feasible = outcome ok and every constraint of the space that the oracle can
evaluate holds. Best = highest output throughput (ties: more KV tokens). The
front is the Pareto front of (output throughput, KV tokens), both maximised.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from tuner.errors import TunerError
from tuner.sim.oracle import Prediction, Workload, predict
from tuner.sim.scenario import Scenario, load_scenario
from tuner.sim.spacefile import Point, SimSpace, read_space

# space metric name -> Prediction attribute (what the oracle can judge a constraint on)
METRICS = {
    "output_throughput": "output_tok_s",
    "total_throughput": "total_tok_s",
    "kv_tokens": "kv_tokens",
    "min_free_vram_mib": "min_free_mib",
    "ttft_p50_ms": "ttft_p50_ms",
    "ttft_p99_ms": "ttft_p99_ms",
    "tpot_p50_ms": "tpot_p50_ms",
    "e2e_p99_ms": "e2e_p99_ms",
}
_BENCH_KEYS = {f.name for f in fields(Workload)}


@dataclass(frozen=True, kw_only=True, slots=True)
class Scored:
    """One point of a space with its prediction and verdict."""

    point: Point
    prediction: Prediction
    feasible: bool
    violated: tuple[str, ...] = ()


def evaluate(space: SimSpace, scenario: Scenario, overrides: dict[str, int] | None = None) -> list[Scored]:
    """The oracle's prediction for every point of `space` on `scenario`."""
    out = []
    for point in space.points():
        launch = space.launch(scenario, point)
        workload = space.workload_for(launch)
        if overrides:
            workload = replace(workload, **overrides)
        prediction = predict(scenario, launch, workload)
        violated = tuple(c for c in _violations(space, prediction)) if prediction.feasible else ()
        out.append(
            Scored(
                point=point,
                prediction=prediction,
                feasible=prediction.feasible and not violated,
                violated=violated,
            )
        )
    return out


def _violations(space: SimSpace, prediction: Prediction) -> list[str]:
    bad = []
    for metric, op, bound in space.constraints:
        attr = METRICS.get(metric)
        value = getattr(prediction, attr) if attr else None
        if value is None:
            continue
        if (op == ">=" and value < bound) or (op == "<=" and value > bound):
            bad.append(f"{metric} {op} {bound:g}")
    return bad


def best(scored: Sequence[Scored]) -> Scored | None:
    """The feasible point of highest output throughput (ties: more KV tokens)."""
    ok = [s for s in scored if s.feasible]
    return max(
        ok, key=lambda s: (s.prediction.output_tok_s or 0.0, s.prediction.kv_tokens or 0), default=None
    )


def pareto_front(scored: Sequence[Scored]) -> list[Scored]:
    """Feasible points no other feasible point beats on both output throughput and KV tokens."""
    ok = [s for s in scored if s.feasible]

    def key(s: Scored) -> tuple[float, int]:
        return (round(s.prediction.output_tok_s or 0.0, 6), s.prediction.kv_tokens or 0)

    front = [
        s
        for s in ok
        if not any(key(o)[0] >= key(s)[0] and key(o)[1] >= key(s)[1] and key(o) != key(s) for o in ok)
    ]
    seen: set[tuple[float, int]] = set()
    unique = []
    for s in sorted(front, key=lambda s: (-key(s)[0], -key(s)[1])):  # stable: first found represents ties
        if key(s) not in seen:  # equal objectives: keep one representative
            seen.add(key(s))
            unique.append(s)
    return unique


def show_point(point: Point) -> str:
    return " ".join(f"{k}={v}" for k, v in point.items())


def _line(s: Scored) -> str:
    p = s.prediction
    if p.output_tok_s is None:
        return f"{show_point(s.point)} -> {p.outcome.value} ({p.detail})"
    extra = f", violates {', '.join(s.violated)}" if s.violated else ""
    return (
        f"{show_point(s.point)} -> {p.output_tok_s:,.1f} out tok/s, {p.kv_tokens:,} KV tokens, "
        f"{p.free_mib:,.0f} MiB free idle / {p.min_free_mib:,.0f} min, max batch {p.max_batch}, "
        f"queue {p.max_queue}, retractions {p.retractions}{extra}"
    )


def report(space: SimSpace, scenario: Scenario, scored: Sequence[Scored], *, show_all: bool) -> str:
    """The landscape as text: counts, best feasible configuration, Pareto front."""
    w = space.workload
    counts = Counter(s.prediction.outcome.value for s in scored)
    lines = [
        f"landscape of {space.name} on scenario {scenario.name} (SGLang {space.version})",
        f"workload: input {w.input_len} / output {w.output_len} tokens, concurrency {w.concurrency}, "
        f"{w.num_prompts} prompts",
        f"points: {len(scored)} ({', '.join(f'{k} {v}' for k, v in counts.most_common())}); "
        f"feasible {sum(s.feasible for s in scored)}",
    ]
    if space.constraints:
        lines.append("constraints: " + ", ".join(f"{m} {op} {b:g}" for m, op, b in space.constraints))
    top = best(scored)
    lines.append("best feasible: " + (_line(top) if top else "none"))
    lines.append("Pareto front (output tok/s, KV tokens):")
    lines += ["  " + _line(s) for s in pareto_front(scored)]
    if show_all:
        lines.append("all points:")
        lines += ["  " + _line(s) for s in scored]
    return "\n".join(lines)


def _parse_bench(items: list[str]) -> dict[str, int]:
    out = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or key not in _BENCH_KEYS or not value.isdigit():
            raise SystemExit(
                f"landscape: --bench expects KEY=INTEGER with KEY in {sorted(_BENCH_KEYS)} (got {item!r})"
            )
        out[key] = int(value)
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tuner.sim landscape",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--space", required=True, type=Path, help="a search_spaces/*.yaml with engine.kind sim"
    )
    parser.add_argument("--scenario", help="scenario name or file (default: the space's engine.scenario)")
    parser.add_argument("--grid", type=int, default=11, help="points per continuous range without a step")
    parser.add_argument(
        "--bench",
        action="append",
        default=[],
        metavar="KEY=N",
        help="override the workload: input_len, output_len, concurrency, num_prompts, gate_burst",
    )
    parser.add_argument("--all", action="store_true", help="list every point")
    parser.add_argument("--json", action="store_true", help="one JSON object per point instead of the report")
    args = parser.parse_args(argv)
    try:
        space = read_space(args.space, grid=max(2, args.grid))
        scenario = load_scenario(args.scenario) if args.scenario else space.scenario()
        scored = evaluate(space, scenario, _parse_bench(args.bench))
    except TunerError as exc:
        sys.stderr.write(f"tuner.sim landscape: error: {exc}\n")
        return 2
    if args.json:
        for s in scored:
            doc: dict[str, Any] = {"point": s.point, "feasible": s.feasible, **asdict(s.prediction)}
            doc["outcome"] = s.prediction.outcome.value
            sys.stdout.write(json.dumps(doc) + "\n")
    else:
        sys.stdout.write(report(space, scenario, scored, show_all=args.all) + "\n")
    return 0
