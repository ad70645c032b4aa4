"""Where the study's asks go, in process against the simulator's oracle (benchmarks/search_world.py).

    forbidden   per shipped sim scenario and seed, the real StudyRunner spends `--budget` launches;
                printed: asks, asks told `forbidden` (a backend pair outside the space's choices,
                or a `forbidden:` entry) per 100 asks, reused and pruned asks
    long        a study of `--long-budget` launches (default 200) on a shipped space whose memory
                fraction is re-stepped finely (`--step`, default 0.005): launches made, asks,
                fill-ins (untried configurations enqueued after asks that launched nothing), and
                the stop reason when the run ended short of its budget
    timing      time per ask of rule derivation and covering at 50 and 200 launches of evidence

    python benchmarks/study_asks.py forbidden [--seeds 5] [--budget 16] [--scenario NAME ...]
    python benchmarks/study_asks.py long [--seeds 3] [--long-budget 200] [--step 0.005] [--scenario NAME]
    python benchmarks/study_asks.py timing

`--code DIR` runs another checkout's tuner (e.g. the previous release) for a before/after figure.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _paths(code: Path | None) -> None:
    root = code.resolve() if code is not None else HERE.parent
    sys.path[:0] = [str(root), str(root / "benchmarks")]


def _spread(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.1f} [{min(values):.1f}–{max(values):.1f}]"


def forbidden(scenarios: list[str], seeds: int, budget: int) -> None:
    from search_strategies import run_tuner  # type: ignore[import-not-found]
    from search_world import world  # type: ignore[import-not-found]

    print(f"{'scenario':22} {'asks':>16} {'forbidden/100 asks':>22} {'reused':>14} {'pruned (rules)':>16}")
    all_rates: list[float] = []
    for name in scenarios:
        w = world(name)
        asks, rates, reused, pruned = [], [], [], []
        for seed in range(1, seeds + 1):
            run = run_tuner(w, seed, budget)
            n = max(run.asks, 1)
            by = run.extra["pruned_by"]
            asks.append(float(run.asks))
            rates.append(100.0 * by["forbidden"] / n)
            reused.append(float(run.extra["reused"]))
            pruned.append(float(by["failure rules"]))
        all_rates += rates
        row = f"{_spread(asks):>16} {_spread(rates):>22} {_spread(reused):>14} {_spread(pruned):>16}"
        print(f"{name:22} {row}")
    print(f"all: forbidden asks per 100 asks, median {_spread(all_rates)} over {len(all_rates)} runs")


def _fine_space(name: str, step: float, tmp: Path) -> Path:
    import yaml
    from search_world import ROOT, WORLD_FILES

    data = yaml.safe_load((ROOT / "search_spaces" / WORLD_FILES[name]).read_text())
    for p in data["params"]:
        if p["name"] == "mem-fraction-static":
            p["step"] = step
    data["name"] = f"{data['name']}-fine"
    path = tmp / f"{name}-fine-sim.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def long(scenario: str, seeds: int, budget: int, step: float) -> None:
    from search_strategies import run_tuner
    from search_world import World

    with tempfile.TemporaryDirectory() as tmp:
        w = World(_fine_space(scenario, step, Path(tmp)))
        print(f"{scenario}, fraction step {step}: {len(w.points)} configurations, budget {budget} launches")
        for seed in range(1, seeds + 1):
            t0 = time.monotonic()
            run = run_tuner(w, seed, budget)
            wall = time.monotonic() - t0
            print(
                f"  seed {seed}: {len(run.steps)} launches "
                f"({sum(s.repeat for s in run.steps)} re-measurements) "
                f"in {run.asks} asks, {run.extra['reused']} reused, {run.extra['pruned']} pruned, "
                f"{wall:.0f} s"
                + (f"; stopped: {run.note}" if run.note else "")
            )


def timing(step: float) -> None:
    import random

    from search_world import World

    from tuner.search.policy import build_policy
    from tuner.search.rules import derive_rules

    with tempfile.TemporaryDirectory() as tmp:
        w = World(_fine_space("glm5-nvfp4-b200-tp4", step, Path(tmp)))
    rng = random.Random(1)
    print(f"glm5-nvfp4-b200-tp4, fraction step {step}: {len(w.points)} configurations")
    for n in (50, 200):
        points = [rng.choice(w.points) for _ in range(n)]
        evidence = [w.evidence(i, w.config(p), w.shot(p)) for i, p in enumerate(points)]
        per_ask = []
        for p in points[:30]:  # one ask: the policy from every launch so far, then one decision
            t0 = time.perf_counter()
            build_policy(evidence).decide(w.config(p))
            per_ask.append((time.perf_counter() - t0) * 1000)
        fills = []
        for seed in range(3):  # one fill-in: every configuration judged (a release without fill-ins: -)
            t0 = time.perf_counter()
            if not _fill_in_once(w, evidence, random.Random(seed)):
                break
            fills.append((time.perf_counter() - t0) * 1000)
        print(
            f"  {n} launches of evidence, {len(derive_rules(evidence))} rules: rules + memory model + decision "
            f"per ask {_spread(per_ask)} ms (30 asks); one fill-in {_spread(fills)} ms (3 runs)"
        )


def _fill_in_once(w: object, evidence: list[object], rng: object) -> bool:
    from tuner.search.policy import build_policy

    try:
        from tuner.study import fill
    except ImportError:
        return False
    policy = build_policy(evidence)  # type: ignore[arg-type]
    fill.untried(w.space, [], lambda c: policy.decide(c).launch, rng)  # type: ignore[attr-defined,arg-type]
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("forbidden", "long", "timing"))
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--budget", type=int, default=16)
    ap.add_argument("--long-budget", type=int, default=200)
    ap.add_argument("--step", type=float, default=0.005)
    ap.add_argument("--scenario", action="append")
    ap.add_argument("--code", type=Path, help="another checkout's root, to run its tuner")
    args = ap.parse_args()
    _paths(args.code)
    if args.what == "forbidden":
        forbidden(args.scenario or ["glm5-nvfp4-sm120", "dsv32-fp8-h200", "glm5-nvfp4-b200-tp4"], args.seeds,
                  args.budget)  # fmt: skip
    elif args.what == "long":
        long((args.scenario or ["glm5-nvfp4-b200-tp4"])[0], args.seeds, args.long_budget, args.step)
    else:
        timing(args.step)


if __name__ == "__main__":
    main()
