"""The SLO capacity objective on sim landscapes: what its load search costs, and what it changes.

    python benchmarks/capacity_objective.py [--landscapes dsv32,glm5-sm120,h200,gen-1,gen-2] [--points 40]
                                            [--seed 0] [--json]

For each landscape (a shipped sim space, or `gen-SEED`: `python -m tuner.sim generate --seed SEED`)
a sample of its feasible points is visited in a random order, as a study would. Each launch's
capacity (the highest concurrency whose TTFT p99 and TPOT p99 meet the SLO) is searched by the
product's own search (tuner.capacity.objective.plan_for + tuner.capacity.search.Search: warm start
from the capacities found so far, the KV pool's bound, bracket, bisect, repeats near the boundary),
each benchmark run answered by the noise-free oracle with the scenario's run-to-run noise on the
latencies. The true capacity of each point is the oracle's, by an exact bisection. The SLO is set
per landscape from its unloaded latencies: TTFT p99 <= 5 x and TPOT p99 <= 3 x the median over
the sample at concurrency 1.

Reported per landscape: benchmark runs per launch spent on the search (median, spread), the
precision reached (final bracket width / capacity) and the error against the true capacity;
whether the throughput objective (output tok/s at the space's benchmark concurrency, saturated)
and the capacity objective pick different configurations, and how much capacity the
throughput pick gives up.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from search_world import generated_space  # noqa: E402

from tuner.capacity.objective import plan_for  # noqa: E402
from tuner.capacity.search import Measurement, Search  # noqa: E402
from tuner.sim.oracle import Prediction, predict  # noqa: E402
from tuner.sim.spacefile import read_space  # noqa: E402
from tuner.space.sections import CapacitySpec, Slo  # noqa: E402

SHIPPED = {
    "dsv32": "dsv32-fp8-h200-sim.yaml",
    "glm5-b200": "glm5-nvfp4-b200-tp4-sim.yaml",
    "glm5-sm120": "glm5-nvfp4-sm120-sim.yaml",
    "h200": "h200-gpu-backed-sim.yaml",
    "tiny": "tiny-fast-sim.yaml",
}
MAX_CONC = 1024


@dataclass(frozen=True, kw_only=True, slots=True)
class PointResult:
    point: str
    throughput: float
    true_capacity: int
    found: float | None
    runs: int
    precision: float | None


def _space_path(name: str) -> Path:
    if name.startswith("gen-"):
        return generated_space(int(name[4:]))
    return ROOT / "search_spaces" / SHIPPED[name]


def _passes(pred: Prediction, slos: tuple[Slo, ...]) -> bool:
    if not pred.feasible:
        return False
    values = {"ttft_p99_ms": pred.ttft_p99_ms, "tpot_p99_ms": pred.tpot_p99_ms}
    return all(s.violation(values.get(s.metric)) <= 0 for s in slos)


def _true_capacity(at: Callable[[int], Prediction], slos: tuple[Slo, ...], high: int) -> int:
    """The highest concurrency that passes (latency rises with load: a bisection over 1..high)."""
    if not _passes(at(1), slos):
        return 0
    lo, hi = 1, high + 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if _passes(at(mid), slos) else (lo, mid)
    return lo


def _measure(pred: Prediction, load: float, noise: float, rng: random.Random) -> Measurement:
    if not pred.feasible:
        return Measurement(load=load, values={}, completed=0, failed=0, died=pred.outcome.value)
    f = min(1.1, max(0.9, rng.gauss(1.0, noise)))
    g = min(1.1, max(0.9, rng.gauss(1.0, noise)))
    values = {
        "ttft_p99_ms": (pred.ttft_p99_ms or 0.0) * f,
        "tpot_p99_ms": (pred.tpot_p99_ms or 0.0) * g,
        "concurrency": load,
    }
    return Measurement(load=load, values=values, completed=1, failed=0)


def landscape(name: str, *, points: int, seed: int) -> dict[str, object]:
    space = read_space(_space_path(name))
    scenario = space.scenario()
    rng = random.Random(seed)
    all_points = list(space.points())
    rng.shuffle(all_points)
    work = space.workload
    per_request = work.input_len + work.output_len

    def at_of(point: dict[str, object]) -> Callable[[int], Prediction]:
        launch = space.launch(scenario, point)
        base = space.workload_for(launch)

        @cache
        def at(conc: int) -> Prediction:
            return predict(scenario, launch, replace(base, concurrency=conc, num_prompts=max(32, 4 * conc)))

        return at

    sample = []
    for point in all_points:
        at = at_of(point)
        if at(work.concurrency).feasible:
            sample.append((point, at))
        if len(sample) >= points:
            break
    if not sample:
        return {"landscape": name, "points": 0}
    ttft1 = statistics.median(at(1).ttft_p99_ms or 0.0 for _, at in sample)
    tpot1 = statistics.median(at(1).tpot_p99_ms or 0.0 for _, at in sample)
    slos = (
        Slo(metric="ttft_p99_ms", op="<=", bound=round(5 * ttft1, 1)),
        Slo(metric="tpot_p99_ms", op="<=", bound=round(3 * tpot1, 2)),
    )
    spec = CapacitySpec(slo=slos, load="concurrency", precision=0.1, repeats=2, max_runs=12)
    noise = scenario.perf.noise_pct / 100 if hasattr(scenario.perf, "noise_pct") else 0.02
    found_so_far: list[float] = []
    results = []
    for point, at in sample:
        kv = at(1).kv_tokens or 0
        kv_requests = max(1, kv // per_request) if kv else None
        plan = plan_for(spec, prior=found_so_far, bench_concurrency=work.concurrency, kv_requests=kv_requests)
        plan = replace(plan, high=min(plan.high, MAX_CONC))
        search = Search(plan=plan)
        while (load := search.next_load()) is not None:
            search.record(_measure(at(int(load)), load, noise, rng))
        found = search.capacity()
        lo, hi = search.bracket()
        precision = (hi - lo) / lo if lo and hi else None
        if found:
            found_so_far.append(found)
        true = _true_capacity(at, slos, min(MAX_CONC, int(plan.high)))
        results.append(
            PointResult(
                point=" ".join(f"{k}={v}" for k, v in point.items()),
                throughput=at(work.concurrency).output_tok_s or 0.0,
                true_capacity=true,
                found=found,
                runs=search.measured(),
                precision=precision,
            )
        )
    return _summary(name, slos, results)


def _summary(name: str, slos: tuple[Slo, ...], results: list[PointResult]) -> dict[str, object]:
    runs = [r.runs for r in results]
    precisions = [r.precision for r in results if r.precision is not None]
    errors = [
        abs(r.found - r.true_capacity) / r.true_capacity for r in results if r.found and r.true_capacity
    ]
    by_tput = max(results, key=lambda r: r.throughput)
    by_cap = max(results, key=lambda r: r.true_capacity)
    by_found = max(results, key=lambda r: r.found or 0.0)
    q = statistics.quantiles(runs, n=4) if len(runs) > 1 else [runs[0]] * 3
    return {
        "landscape": name,
        "slo": [s.name for s in slos],
        "points": len(results),
        "runs_median": statistics.median(runs),
        "runs_p25_p75": [q[0], q[2]],
        "runs_min_max": [min(runs), max(runs)],
        "precision_median": statistics.median(precisions) if precisions else None,
        "error_median": statistics.median(errors) if errors else None,
        "error_max": max(errors) if errors else None,
        "throughput_pick": by_tput.point,
        "throughput_pick_capacity": by_tput.true_capacity,
        "capacity_pick": by_cap.point,
        "capacity_pick_capacity": by_cap.true_capacity,
        "search_pick_capacity": by_found.true_capacity,
        "picks_differ": by_tput.true_capacity < by_cap.true_capacity,
        "capacity_lost_by_throughput_pick": (
            1 - by_tput.true_capacity / by_cap.true_capacity if by_cap.true_capacity else 0.0
        ),
    }


def main(argv: list[str]) -> int:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--landscapes", default="dsv32,glm5-sm120,h200,gen-1,gen-2,gen-3")
    parser.add_argument("--points", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = [landscape(n, points=args.points, seed=args.seed) for n in args.landscapes.split(",")]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for r in rows:
        if not r.get("points"):
            print(f"{r['landscape']}: no feasible point")
            continue
        print(
            f"{r['landscape']}: {r['points']} launches, SLO {', '.join(r['slo'])}: runs/launch median "
            f"{r['runs_median']} (p25-p75 {r['runs_p25_p75']}, min-max {r['runs_min_max']}); precision "
            f"median {r['precision_median']:.3f}; error vs true capacity median {r['error_median']:.3f} "
            f"max {r['error_max']:.3f}"
        )
        print(
            f"   throughput pick: capacity {r['throughput_pick_capacity']} ({r['throughput_pick']}); "
            "capacity "
            f"pick: {r['capacity_pick_capacity']} ({r['capacity_pick']}); differ: {r['picks_differ']}, "
            f"capacity lost by the throughput pick "
            f"{100 * float(r['capacity_lost_by_throughput_pick']):.1f}%"
        )
    differ = sum(bool(r.get("picks_differ")) for r in rows)
    print(f"picks differ on {differ} of {len(rows)} landscapes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
