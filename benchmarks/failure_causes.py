"""How many failure causes the generated landscapes hold, per landscape and per family.

For each landscape of a split (tuner.sim.generate: train = seeds 0-49, test = 1000-1029) the oracle
answers every point (benchmarks/search_world.py); printed per landscape: its family, points, the
feasible share and the failure causes (World.failure_causes: the rules a greedy set cover of the
failing points needs), with `--kinds` the cover's rules by kind; then per family and overall the
median and [min-max] of the causes and the share of landscapes with 20-30 of them. A real decode-bound
GLM-5-class landscape on 8 x B300 had 27 causes across 960 configurations.

    python benchmarks/failure_causes.py [--split train|test] [--count N] [--kinds]

Landscapes are built once and cached under the temp folder (tuner-generated-<GENERATOR>).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from search_world import world  # noqa: E402

from tuner.sim.generate import TEST_SEEDS, TRAIN_SEEDS  # noqa: E402
from tuner.sim.generate_families import FAMILIES, family_of  # noqa: E402

REAL = (20, 30)  # the range of causes real deployments show


def summary(label: str, causes: list[int], feasible: list[float]) -> str:
    """One line: median [min-max] causes, the share with 20-30, the median feasible share."""
    if not causes:
        return f"{label:<13} -"
    real = sum(1 for c in causes if REAL[0] <= c <= REAL[1])
    return (
        f"{label:<13} n={len(causes):<3} causes median {statistics.median(causes):>4g} "
        f"[{min(causes)}-{max(causes)}], {REAL[0]}-{REAL[1]}: {real}/{len(causes)} "
        f"({100 * real / len(causes):.0f}%), feasible median {100 * statistics.median(feasible):.0f}%"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--split", choices=("train", "test"), default="train")
    parser.add_argument(
        "--count", type=int, default=None, help="the first N seeds of the split (default: all)"
    )
    parser.add_argument("--kinds", action="store_true", help="also the cover's rules by kind")
    args = parser.parse_args()
    seeds = (TRAIN_SEEDS if args.split == "train" else TEST_SEEDS)[: args.count]
    rows: list[tuple[str, int, float]] = []
    for seed in seeds:
        w = world(f"gen-{seed}")
        _, cover, unexplained = w.failure_cover()
        causes = len(cover) + unexplained
        feasible = sum(1 for s in w.shots if s.feasible) / len(w.shots)
        family = family_of(seed)
        rows.append((family, causes, feasible))
        line = f"seed {seed:>4} {family:<13} {len(w.points):>5} points, {100 * feasible:3.0f}% feasible, "
        line += f"{causes:>3} causes"
        if args.kinds:
            kinds = Counter(r.kind.value for r in cover)
            line += "  " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
            line += f", unexplained {unexplained}" if unexplained else ""
        print(line, flush=True)
    print()
    for family in FAMILIES:
        mine = [r for r in rows if r[0] == family]
        print(summary(family, [r[1] for r in mine], [r[2] for r in mine]))
    print(summary("all", [r[1] for r in rows], [r[2] for r in rows]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
