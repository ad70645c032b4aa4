"""The tuner's own time per trial: everything except waiting for the server and the benchmark window.

Runs a real study on the simulator's `tiny-fast` scenario (servers start in
well under a second) into a fresh SQLite file and prints, over N trials, the
per-trial overhead: wall time from `ask` to after `tell` and the store write,
minus the time spent waiting on the server (GPU check, launch to ready, gate,
benchmark, stop and memory release). Target: median <= 0.3 s.

    python benchmarks/study_overhead.py [--trials 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tuner.space.loader import load_space  # noqa: E402
from tuner.study.events import Hooks
from tuner.study.runner import StudyRunner, TrialEvent  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=20)
    args = parser.parse_args()
    events: list[TrialEvent] = []
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        space = load_space(ROOT / "search_spaces" / "tiny-fast-sim.yaml")
        runner = StudyRunner(space, db_url=f"sqlite:///{tmp}/exp.db", n_trials=args.trials, timeout_s=None)
        runner.run(Hooks(on_trial=events.append))
    launched = [e for e in events if e.overhead_s is not None]
    reused = len(events) - len(launched)
    over = sorted(e.overhead_s for e in launched if e.overhead_s is not None)
    wall = sorted(e.duration_s for e in launched)
    print(f"trials: {len(events)} ({len(launched)} launched, {reused} reused an earlier measurement)")
    print(f"tuner overhead per launched trial: median {statistics.median(over) * 1000:.0f} ms, "
          f"min {over[0] * 1000:.0f} ms, max {over[-1] * 1000:.0f} ms, "
          f"p90 {over[int(0.9 * (len(over) - 1))] * 1000:.0f} ms (target <= 300 ms)")
    print(f"whole trial wall time for scale: median {statistics.median(wall):.2f} s, "
          f"min {wall[0]:.2f} s, max {wall[-1]:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
