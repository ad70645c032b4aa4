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

Measured (2026-12-02, `python benchmarks/capacity_objective.py --points 40`, one run, seed 0;
8 landscapes, 33-40 launches each, request-rate search at 10% precision, repeats 2):
  runs per launch, median per landscape 6-8 (p25-p75 6-10, min-max 6-12); precision reached
  0.10 (0.049 on sm120-capacity); |found - true| / true median 0.8-7.6%, max 9.6-53% (short runs
  where latency is not monotone in the rate); the objectives pick different configurations on
  2 of 8: sm120-capacity (the throughput pick serves 11.2% less), glm5-b200 (3.2%).
  `--load concurrency`: 6-8 runs per launch, 1 of 8 differs (gen-3: 8 vs 9 requests, 11%).
"""

from __future__ import annotations

import argparse
import json
import math
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

from tuner.capacity.objective import capacity_spec, little_jump, plan_for  # noqa: E402
from tuner.capacity.run import MAX_PROMPTS  # noqa: E402
from tuner.capacity.search import SUSTAINED, Measurement, Search  # noqa: E402
from tuner.sim.oracle import Prediction, predict  # noqa: E402
from tuner.sim.spacefile import read_space  # noqa: E402
from tuner.space.loader import load_space  # noqa: E402
from tuner.space.sections import CapacitySpec, Slo  # noqa: E402

SHIPPED = {
    "dsv32": "dsv32-fp8-h200-sim.yaml",
    "glm5-b200": "glm5-nvfp4-b200-tp4-sim.yaml",
    "glm5-sm120": "glm5-nvfp4-sm120-sim.yaml",
    "sm120-capacity": "glm5-nvfp4-sm120-capacity-sim.yaml",
    "h200": "h200-gpu-backed-sim.yaml",
    "tiny": "tiny-fast-sim.yaml",
}
MAX_LOAD = 1024.0


@dataclass(frozen=True, kw_only=True, slots=True)
class PointResult:
    point: str
    throughput: float
    true_capacity: float
    found: float | None
    runs: int
    precision: float | None


def _space_path(name: str) -> Path:
    if name.startswith("gen-"):
        return generated_space(int(name[4:]))
    return ROOT / "search_spaces" / SHIPPED[name]


def _metrics(pred: Prediction) -> dict[str, float | None]:
    return {"ttft_p99_ms": pred.ttft_p99_ms, "tpot_p99_ms": pred.tpot_p99_ms}


def _served(pred: Prediction, n: int) -> float:
    span = (pred.duration_s or 0.0) - (pred.e2e_p50_ms or 0.0) / 1000
    return n / span if span > 0 else 0.0


def _passes(pred: Prediction, slos: tuple[Slo, ...], load: float, rate: bool) -> bool:
    if not pred.feasible:
        return False
    if rate and _served(pred, _prompts(load, rate)) < SUSTAINED * load:
        return False
    return all(s.violation(_metrics(pred).get(s.metric)) <= 0 for s in slos)


def _prompts(load: float, rate: bool) -> int:
    """Requests per load point, as tuner.capacity.run.point_settings sizes them."""
    return min(MAX_PROMPTS, max(32, math.ceil(12 * load))) if rate else max(32, 5 * int(load))


def _true_capacity(
    at: Callable[[float], Prediction], slos: tuple[Slo, ...], rate: bool, high: float
) -> float:
    """The highest load that passes (latency rises with load): bisection, to 1 request or 1% of a rate."""
    if rate:
        lo = hi = 0.01
        while _passes(at(hi), slos, hi, rate) and hi < high:
            lo, hi = hi, hi * 2
        if lo == hi:
            return 0.0
        while hi / lo > 1.01:
            mid = round(math.sqrt(lo * hi), 4)
            lo, hi = (mid, hi) if _passes(at(mid), slos, mid, rate) else (lo, mid)
        return lo
    if not _passes(at(1), slos, 1, rate):
        return 0.0
    clo, chi = 1, int(high) + 1
    while chi - clo > 1:
        mid = (clo + chi) // 2
        clo, chi = (mid, chi) if _passes(at(mid), slos, mid, rate) else (clo, mid)
    return float(clo)


def _measure(pred: Prediction, load: float, rate: bool, noise: float, rng: random.Random) -> Measurement:
    if not pred.feasible:
        return Measurement(load=load, values={}, completed=0, failed=0, died=pred.outcome.value)
    f = min(1.1, max(0.9, rng.gauss(1.0, noise)))
    g = min(1.1, max(0.9, rng.gauss(1.0, noise)))
    values = {
        "ttft_p99_ms": (pred.ttft_p99_ms or 0.0) * f,
        "tpot_p99_ms": (pred.tpot_p99_ms or 0.0) * g,
        "duration_s": (pred.duration_s or 0.0) * g,
        "e2e_p50_ms": (pred.e2e_p50_ms or 0.0) * g,
    }
    return Measurement(load=load, values=values, completed=_prompts(load, rate), failed=0)


def landscape(name: str, *, points: int, seed: int, knob: str = "request_rate") -> dict[str, object]:
    space = read_space(_space_path(name))
    scenario = space.scenario()
    rng = random.Random(seed)
    all_points = list(space.points())
    rng.shuffle(all_points)
    work = space.workload
    per_request = work.input_len + work.output_len

    rate = knob == "request_rate"
    declared = capacity_spec(load_space(_space_path(name)))
    in_flight = (declared.max_concurrency if declared else None) or work.concurrency

    def at_of(point: dict[str, object]) -> Callable[[float], Prediction]:
        launch = space.launch(scenario, point)
        base = space.workload_for(launch)

        @cache
        def at(load: float) -> Prediction:
            if rate:  # Poisson arrivals, in flight at most what the product's search allows
                n = _prompts(load, rate)
                w = replace(base, concurrency=in_flight, num_prompts=n, request_rate=load)
                return predict(scenario, launch, w)
            conc = int(load)
            closed = replace(base, concurrency=conc, num_prompts=_prompts(conc, rate))
            return predict(scenario, launch, closed)

        return at

    sample = []
    for point in all_points:
        launch = space.launch(scenario, point)
        saturated = predict(scenario, launch, space.workload_for(launch))
        if saturated.feasible:
            sample.append((point, at_of(point), saturated))
        if len(sample) >= points:
            break
    if not sample:
        return {"landscape": name, "points": 0}
    unloaded = [at(0.01 if rate else 1) for _, at, _ in sample]
    ttft1 = statistics.median(p.ttft_p99_ms or 0.0 for p in unloaded)
    tpot1 = statistics.median(p.tpot_p99_ms or 0.0 for p in unloaded)
    slos = (
        Slo(metric="ttft_p99_ms", op="<=", bound=round(5 * ttft1, 1)),
        Slo(metric="tpot_p99_ms", op="<=", bound=round(3 * tpot1, 2)),
    )
    if declared is not None:  # a space with its own capacity objective: its SLOs
        slos = declared.slo
    spec = CapacitySpec(slo=slos, load=knob, precision=0.1, repeats=2, max_runs=12)
    noise = scenario.perf.noise_pct / 100
    found_so_far: list[float] = []
    results = []
    found_so_far: list[float] = []
    results = []
    for point, at, saturated in sample:
        kv = saturated.kv_tokens or 0
        kv_requests = max(1, kv // per_request) if kv else None
        plan = plan_for(spec, prior=found_so_far, bench_concurrency=work.concurrency, kv_requests=kv_requests)
        plan = replace(plan, high=min(plan.high, MAX_LOAD))
        search = Search(plan=plan)
        cold = not found_so_far

        def next_load(
            search: Search = search, cold: bool = cold, kv_requests: int | None = kv_requests
        ) -> float | None:
            jump = little_jump(search, in_flight=in_flight, kv_requests=kv_requests) if cold else None
            return jump if jump is not None and jump not in search.runs else search.next_load()

        while (load := next_load()) is not None:
            search.record(_measure(at(load), load, rate, noise, rng))
        found = search.capacity()
        lo, hi = search.bracket()
        precision = (hi - lo) / lo if lo and hi else None
        if found:
            found_so_far.append(found)
        results.append(
            PointResult(
                point=" ".join(f"{k}={v}" for k, v in point.items()),
                throughput=saturated.output_tok_s or 0.0,
                true_capacity=_true_capacity(at, slos, rate, plan.high),
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
        "picks_differ_beyond_precision": by_tput.true_capacity < by_cap.true_capacity / 1.1,
        "search_pick_loss": (
            1 - by_found.true_capacity / by_cap.true_capacity if by_cap.true_capacity else 0.0
        ),
        "capacity_lost_by_throughput_pick": (
            1 - by_tput.true_capacity / by_cap.true_capacity if by_cap.true_capacity else 0.0
        ),
    }


def main(argv: list[str]) -> int:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    every = "sm120-capacity,dsv32,glm5-b200,glm5-sm120,h200,gen-1,gen-2,gen-3"
    parser.add_argument("--landscapes", default=every)
    parser.add_argument("--points", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--load", choices=("request_rate", "concurrency"), default="request_rate")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = [
        landscape(n, points=args.points, seed=args.seed, knob=args.load) for n in args.landscapes.split(",")
    ]
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
            f"{100 * float(r['capacity_lost_by_throughput_pick']):.1f}%, by the searched capacity's pick "
            f"{100 * float(r['search_pick_loss']):.1f}%"
        )
    differ = sum(bool(r.get("picks_differ")) for r in rows)
    beyond = sum(bool(r.get("picks_differ_beyond_precision")) for r in rows)
    print(f"picks differ on {differ} of {len(rows)} landscapes ({beyond} by more than the 10% precision)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
