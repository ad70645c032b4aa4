"""Classification accuracy over tests/fixtures/real_logs (class and stage, as the fixture test checks).

    python scripts/real_log_accuracy.py                 # every fixture
    python scripts/real_log_accuracy.py --since NAME    # the fixtures indexed from NAME on
    PYTHONPATH=/path/to/other/checkout python scripts/real_log_accuracy.py --since NAME   # another version

Prints one line per wrong fixture and the share right.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

_STAGES = {"at load": "load", "at capture": "capture", "at warmup": "warmup", "under load": "serving"}
FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "real_logs"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--since", default=None, help="only the fixtures indexed from this one on")
    args = parser.parse_args()
    from tuner.config import Phase
    from tuner.sglang.logs import classify_failure

    index = yaml.safe_load((FIXTURES / "INDEX.yaml").read_text(encoding="utf-8"))
    names = list(index)
    if args.since is not None:
        names = names[names.index(args.since) :]
    right = total = 0
    for name in names:
        entry, expect = index[name], index[name]["expect"]
        if expect.get("outcome") is None:
            continue
        lines = (FIXTURES / f"{name}.log").read_text(encoding="utf-8").splitlines()
        verdict = classify_failure(
            lines, exit_code=entry.get("exit_code", -9), phase=Phase(entry.get("phase", "launch"))
        )
        stage = expect.get("stage")
        stage_ok = not stage or stage in verdict.message or _STAGES.get(stage) == verdict.stage
        ok = verdict.outcome.value == expect["outcome"] and stage_ok
        total += 1
        right += ok
        if not ok:
            print(f"wrong  {name}: {verdict.outcome.value}: {verdict.message[:110]}")
    print(f"{right}/{total} right ({100 * right / max(total, 1):.0f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
