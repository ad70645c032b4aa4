"""Classification accuracy over tests/fixtures/real_logs (class and stage, as the fixture test checks).

    python scripts/real_log_accuracy.py                 # every fixture, by platform and by prefix
    python scripts/real_log_accuracy.py --since NAME    # the fixtures indexed from NAME on
    python scripts/real_log_accuracy.py --held-out      # only those marked `held_out: true`
    PYTHONPATH=/path/to/other/checkout python scripts/real_log_accuracy.py --since NAME   # another version

Prints one line per wrong fixture, the share right per platform (the index's `platform`, cuda
when unset), per log-collector prefix the fixture carries (as the classifier's detector finds
it), and, with --prefixes, the share right when every fixture is wrapped in each collector's
prefix. Fixtures marked `held_out` were added after the signatures were written: their line says
how many of them were right.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

_STAGES = {"at load": "load", "at capture": "capture", "at warmup": "warmup", "under load": "serving"}
FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "real_logs"


def _right(entry: dict[str, Any], lines: list[str]) -> tuple[bool, str]:
    from tuner.config import Phase
    from tuner.sglang.logs import classify_failure

    expect = entry["expect"]
    try:
        verdict = classify_failure(
            lines, exit_code=entry.get("exit_code", -9), phase=Phase(entry.get("phase", "launch"))
        )
    except Exception as exc:  # an older checkout may raise on a line it cannot read
        return False, f"raised {type(exc).__name__}: {exc}"
    stage = expect.get("stage")
    stage_ok = not stage or stage in verdict.message or _STAGES.get(stage) == verdict.stage
    return verdict.outcome.value == expect[
        "outcome"
    ] and stage_ok, f"{verdict.outcome.value}: {verdict.message[:110]}"


def _prefix_of(lines: list[str]) -> str:
    try:
        from tuner.sglang.log_prefix import detect_prefix
    except ImportError:  # an older checkout: no detector
        return "?"
    return detect_prefix(lines) or "none"


def _share(right: int, total: int) -> str:
    return f"{right}/{total} ({100 * right / max(total, 1):.0f}%)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--since", default=None, help="only the fixtures indexed from this one on")
    parser.add_argument("--held-out", action="store_true", help="only the fixtures marked held_out")
    parser.add_argument("--prefixes", action="store_true", help="also wrap every fixture in each prefix")
    args = parser.parse_args()
    index = yaml.safe_load((FIXTURES / "INDEX.yaml").read_text(encoding="utf-8"))
    names = list(index)
    if args.since is not None:
        names = names[names.index(args.since) :]
    names = [n for n in names if index[n]["expect"].get("outcome") is not None]
    if args.held_out:
        names = [n for n in names if index[n].get("held_out")]
    groups: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    wrapped: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for name in names:
        entry = index[name]
        lines = (FIXTURES / f"{name}.log").read_text(encoding="utf-8").splitlines()
        ok, said = _right(entry, lines)
        if not ok:
            print(f"wrong  {name}: {said}")
        keys = ("all", f"platform {entry.get('platform', 'cuda')}", f"prefix {_prefix_of(lines)}")
        keys += ("held out",) if entry.get("held_out") else ()
        for key in keys:
            groups[key][0] += ok
            groups[key][1] += 1
        if args.prefixes:
            from tuner.sglang.log_prefix import FORMATS, apply_prefix

            for prefix in FORMATS:
                ok_p, _ = _right(entry, [apply_prefix(prefix, line, n) for n, line in enumerate(lines)])
                wrapped[prefix][0] += ok_p
                wrapped[prefix][1] += 1
    for key in sorted(groups, key=lambda k: (k != "all", k)):
        print(f"{key:<20} {_share(*groups[key])}")
    for prefix in sorted(wrapped):
        print(f"{'wrapped ' + prefix:<20} {_share(*wrapped[prefix])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
