"""Do the in-process figures of search_efficiency.py hold against the live simulator?

Runs `python -m tuner run` (real simulator processes, real gate and benchmark over HTTP) on a
shipped sim space for a few sampler seeds, reads the launches back from the study's database,
and scores them exactly like the in-process benchmark (true throughput, outcome and rules from
the oracle); then runs the in-process tuner for the same seeds and prints both, with how well
the oracle predicted each live launch (outcome agreement, measured / oracle throughput).

    python benchmarks/search_live_check.py [--scenario glm5-nvfp4-sm120] [--seeds 1 2] [--budget 16]

glm5-nvfp4-sm120 (64 streams, short answers) is the default: on a busy 2-core machine the
benchmark client's self-check rejects most measurements of dsv32-fp8-h200's 128 streams as
client-bound (INFRA_ERROR, retried), which says nothing about the search.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]

from search_efficiency import Score, score  # noqa: E402
from search_strategies import Run, Step, run_tuner  # noqa: E402
from search_world import WORLD_FILES, World, world  # noqa: E402

from tuner.config import Outcome  # noqa: E402
from tuner.search.evidence import GATE_OUTCOMES  # noqa: E402
from tuner.store.sql import SqlStore  # noqa: E402


def live_run(w: World, seed: int, budget: int, tmp: Path) -> tuple[Run, list[str]]:
    """One `tuner run` of the space with this sampler seed; its launches in order, scored by the oracle."""
    raw = yaml.safe_load((ROOT / "search_spaces" / WORLD_FILES[w.name]).read_text())
    raw["name"] = f"live-{w.name}-{seed}"
    raw["sampler"] = {**(raw.get("sampler") or {}), "seed": seed}
    raw["budget"] = {"n_trials": budget, "timeout": "20m"}  # a busy machine: not-trusted measurements retry
    space_file = tmp / "space.yaml"
    space_file.write_text(yaml.safe_dump(raw, sort_keys=False))
    db = tmp / "live.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "tuner", "run", "--space", str(space_file), "--db", str(db)]
    cmd += ["--trials", str(budget), "--plain"]
    done = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"tuner run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    rows = SqlStore(f"sqlite:///{db}").trials(f"{raw['name']}-v{raw.get('version', 1)}")
    steps: list[Step] = []
    checks: list[str] = []
    for row in rows:
        if row.outcome is Outcome.PRUNED or row.launch is None:
            continue
        config = w.config(row.params)
        shot = w.shot(row.params)
        predicted = shot.failure.outcome if shot.failure else Outcome.OK
        live = Outcome.OK if row.outcome in (Outcome.OK, Outcome.SLO_VIOLATION) else row.outcome
        measured = row.metrics.get("output_throughput") if live is Outcome.OK else None
        ratio = f"{measured / shot.throughput:.3f}" if measured and shot.throughput else "-"
        agree = "same" if agrees(predicted, live) else "DIFFERENT"
        checks.append(f"{live.value:<12} oracle {predicted.value:<12} {agree:<9} measured/oracle {ratio}")
        steps.append(Step(config=config, shot=shot, measured=measured, repeat=row.confirm_of is not None))
    pruned = sum(1 for r in rows if r.outcome is Outcome.PRUNED)
    infra = sum(1 for r in rows if r.outcome is Outcome.INFRA_ERROR)
    if infra:
        checks.append(f"({infra} launches not trusted (client-bound benchmark on a busy machine), retried)")
    return Run(strategy="live", steps=steps, asks=len(rows), extra={"pruned": pruned}), checks


def agrees(predicted: Outcome, live: Outcome) -> bool:
    """The oracle's outcome and the live one are the same class. NaN, garbage and a wrong answer are
    one: which the gate reports for the simulator's broken output depends on the release (0.5.23
    reads its NaN as a wrong answer)."""
    return predicted is live or {predicted, live} <= GATE_OUTCOMES


def _line(label: str, s: Score) -> str:
    to_best = str(s.to_best) if s.to_best is not None else f">{s.launches}"
    return (
        f"  {label:<11} to 2%: {to_best:<4} wasted {s.wasted:<3} bad {s.proven_bad:<3} HV {s.hv:.2f}  "
        f"pick {s.pick:5.1f}%  launches {s.launches}, asks {s.asks} ({s.pruned} pruned)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scenario", default="glm5-nvfp4-sm120", choices=list(WORLD_FILES))
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--budget", type=int, default=16)
    args = parser.parse_args()
    w = world(args.scenario)
    print(f"live check on {w.name}: true best {w.best:,.1f} out tok/s; budget {args.budget}")
    ratios: list[float] = []
    disagree = total = 0
    for seed in args.seeds:
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory() as tmp:
            live, checks = live_run(w, seed, args.budget, Path(tmp))
        took = time.monotonic() - t0
        print(f"seed {seed} ({took:.0f} s live):")
        print(_line("live", score(w, live, seed)))
        print(_line("in-process", score(w, run_tuner(w, seed, args.budget), seed)))
        for i, c in enumerate(checks):
            print(f"    {c}" if c.startswith("(") else f"    launch {i + 1:>2}: {c}")
            if not c.startswith("("):
                total += 1
                disagree += "DIFFERENT" in c
            if "measured/oracle " in c and "measured/oracle -" not in c:
                ratios.append(float(c.rsplit(" ", 1)[1]))
    if ratios:
        print(
            f"oracle vs live: {total - disagree}/{total} outcomes as predicted; measured / oracle throughput "
            f"median {statistics.median(ratios):.3f} [{min(ratios):.3f}–{max(ratios):.3f}]"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
