"""How well the study's sampler searches the seed deployment's space, against random search.

Runs whole studies (real launches of the simulated GLM-5 server, gate,
benchmark, store) on `glm5-nvfp4-sm120-sim.yaml` with a shortened benchmark,
once per sampler and seed, and prints per sampler (median and min–max over
the seeds):
  * wasted launches: trials whose configuration crashed, ran out of memory or
    failed the gate (each costs a multi-minute restart on the real machine);
  * feasible trials;
  * the normalised hypervolume of the feasible front (output tok/s x KV tokens,
    reference point 0, normalised by the largest value seen in any run).

Baselines are dropped so both samplers start from nothing.

    python benchmarks/search_efficiency.py [--trials 16] [--seeds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tuner.bench.settings import LoadPoint, Workload  # noqa: E402
from tuner.space.loader import SearchSpace, load_space  # noqa: E402
from tuner.study.events import Hooks
from tuner.study.runner import StudyRunner, TrialEvent  # noqa: E402


def _space(kind: str, seed: int) -> SearchSpace:
    space = load_space(ROOT / "search_spaces" / "glm5-nvfp4-sm120-sim.yaml")
    bench = space.bench.model_copy(
        update={
            "workload": Workload(input_len=64, output_len=8),
            "load_points": (LoadPoint(concurrency=16, num_prompts=16),),
            "warmup_requests": 0,
            "settle_s": 0.05,
        }
    )
    sampler = space.sampler.model_copy(update={"kind": kind, "seed": seed, "n_startup_trials": 5})
    return replace(space, bench=bench, sampler=sampler, baselines=(), name=f"eff-{kind}-{seed}")


def _front(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    return [p for p in points if not any(q[0] >= p[0] and q[1] >= p[1] and q != p for q in points)]


def _hypervolume(points: list[tuple[float, float]], scale: tuple[float, float]) -> float:
    """Area dominated by the front above (0, 0), both axes divided by `scale` (sweep by x descending)."""
    area, covered_y = 0.0, 0.0
    for x, y in sorted(_front(points), key=lambda p: -p[0]):
        if y > covered_y:
            area += (x / scale[0]) * ((y - covered_y) / scale[1])
            covered_y = y
    return area


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    runs: dict[str, list[tuple[int, int, list[tuple[float, float]]]]] = {"tpe": [], "random": []}
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        for seed in range(1, args.seeds + 1):
            for kind in runs:
                events: list[TrialEvent] = []
                runner = StudyRunner(
                    _space(kind, seed), db_url=f"sqlite:///{tmp}/eff.db", n_trials=args.trials
                )
                runner.run(Hooks(on_trial=events.append))
                wasted = sum(
                    1
                    for e in events
                    if e.outcome.blames_config
                    and e.reused_from is None
                    and e.outcome.value != "slo_violation"
                )
                feasible = [e for e in events if e.feasible]
                points = [(e.values[0], e.values[1]) for e in feasible]
                runs[kind].append((wasted, len(feasible), points))
                print(
                    f"{kind:<6} seed {seed}: {wasted} wasted launches, "
                    f"{len(feasible)} feasible of {len(events)}",
                    flush=True,
                )
    all_points = [p for rs in runs.values() for _, _, pts in rs for p in pts]
    scale = (max(p[0] for p in all_points), max(p[1] for p in all_points)) if all_points else (1.0, 1.0)
    print(f"\n{args.trials} trials per study, {args.seeds} seeds; median [min–max]")
    for kind, rs in runs.items():
        wasted = [r[0] for r in rs]
        feasible = [r[1] for r in rs]
        hv = [_hypervolume(r[2], scale) if r[2] else 0.0 for r in rs]
        print(
            f"{kind:<6} wasted launches {statistics.median(wasted):4.1f} [{min(wasted)}–{max(wasted)}]   "
            f"feasible {statistics.median(feasible):4.1f} [{min(feasible)}–{max(feasible)}]   "
            f"hypervolume {statistics.median(hv):.3f} [{min(hv):.3f}–{max(hv):.3f}]"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
