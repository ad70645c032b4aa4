"""The policy's decision on every configuration of a shipped sim space, as a fingerprint, to show that
two checkouts prune the same configurations (a refactor of the rules or the knobs keeps their meaning).

For each scenario and seed, launches drawn at random from the space's configurations are answered by
the simulator's oracle (benchmarks/search_world.py); the policy built from them (failure rules and
the memory model) decides every configuration. Printed per (seed, launches): configurations, how many
are pruned, and a hash of every (launch, outcome) decision; equal lines: equal decisions.

    python benchmarks/policy_decisions.py [--scenario NAME ...] [--code DIR]

`--code DIR` runs another checkout's tuner (e.g. the previous release) for the comparison.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scenario", action="append", default=None)
    parser.add_argument("--code", type=Path, default=None)
    parser.add_argument("--step", type=float, default=0.01, help="the memory fraction's step")
    args = parser.parse_args()
    root = args.code.resolve() if args.code is not None else HERE.parent
    sys.path[:0] = [str(root), str(root / "benchmarks")]
    import study_asks
    from search_world import WORLD_FILES, World

    from tuner.search.policy import build_policy

    for name in args.scenario or sorted(WORLD_FILES):
        with tempfile.TemporaryDirectory() as tmp:
            w = World(study_asks._fine_space(name, args.step, Path(tmp)))
        for seed in range(3):
            rng = random.Random(seed)
            for n in (20, 80):
                points = [rng.choice(w.points) for _ in range(n)]
                policy = build_policy([w.evidence(i, w.config(p), w.shot(p)) for i, p in enumerate(points)])
                decisions = [policy.decide(w.config(p)) for p in w.points]
                pruned = sum(1 for d in decisions if not d.launch)
                digest = hashlib.sha1(
                    repr([(d.launch, str(d.outcome)) for d in decisions]).encode()
                ).hexdigest()
                print(
                    f"{name} seed {seed}, {n} launches: {len(w.points)} configurations, "
                    f"{pruned} pruned, {digest[:12]}"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
