"""`python -m tuner capacity`: the highest load a trial's configuration sustains within its SLOs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tuner.bench.settings import MAX_PROMPTS
from tuner.cli.output import MAX_COUNT, MAX_LOAD, MAX_REPEATS, bounded_float, bounded_int, stores_of


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add `capacity` to the command line."""
    cap = sub.add_parser(
        "capacity",
        help="relaunch a trial and find the highest request rate (or concurrency) whose SLOs hold",
    )
    cap.add_argument("--space", required=True, type=Path, help="the study's space file")
    which = cap.add_mutually_exclusive_group(required=True)
    which.add_argument("--trial", type=bounded_int(0, MAX_COUNT), default=None, help="the trial to measure")
    which.add_argument("--best", action="store_true", help="the trial `export --best` would choose")
    cap.add_argument("--db", default=None)
    cap.add_argument("--study", default=None)
    cap.add_argument(
        "--slo",
        action="append",
        default=[],
        metavar="METRIC<=BOUND",
        help="e.g. 'ttft_p99_ms<=2000' (repeatable; default: the space's constraints on latency metrics)",
    )
    knob = cap.add_mutually_exclusive_group()
    knob.add_argument("--request-rate", action="store_true", help="raise the offered request rate (default)")
    knob.add_argument("--concurrency", action="store_true", help="raise the number of concurrent requests")
    cap.add_argument(
        "--start",
        type=bounded_float(0.0, MAX_LOAD),
        default=None,
        help="first load (default: what the trial sustained)",
    )
    cap.add_argument(
        "--repeats",
        type=bounded_int(1, MAX_REPEATS),
        default=3,
        help="measurements per load near the boundary",
    )
    cap.add_argument("--max-points", type=bounded_int(1, 1_000), default=14, help="measurements in all")
    cap.add_argument(
        "--prompts", type=bounded_int(1, MAX_PROMPTS), default=None, help="requests per load point"
    )
    cap.set_defaults(handler=cmd_capacity)


def cmd_capacity(args: argparse.Namespace) -> int:
    from tuner.capacity.run import CapacityRequest, capacity, slos_for
    from tuner.capacity.search import Knob, Measurement, PointVerdict
    from tuner.space.loader import load_space
    from tuner.store.connect import database_url

    space = load_space(args.space)
    slos = slos_for(space, args.slo)
    knob = Knob.CONCURRENCY if args.concurrency else Knob.REQUEST_RATE
    request = CapacityRequest(
        trial=None if args.best else args.trial,
        slos=slos,
        knob=knob,
        start=args.start,
        repeats=args.repeats,
        max_points=args.max_points,
        prompts=args.prompts,
    )

    def on_point(m: Measurement, verdict: PointVerdict) -> None:
        shown = ", ".join(f"{s.metric}={_fmt(m.values.get(s.metric))}" for s in slos)
        said = "passes so far" if verdict.passed else f"fails ({verdict.why})"
        print(f"  {m.load:g} {knob.unit}: {shown}; {m.failed} failed: {said}", file=sys.stderr, flush=True)

    print(f"capacity under {', '.join(s.name for s in slos)}, raising the {knob.value}:", file=sys.stderr)
    url = database_url(args.db)
    record = capacity(space, request, db_url=url, study=args.study, on_point=on_point, stores=stores_of(args))
    for p in record.points:
        mark = "pass" if p["passed"] else "fail"
        print(f"  load {p['load']:g}: {mark} over {p['runs']} run(s){'; ' + p['why'] if p['why'] else ''}")
    print(f"capacity {record.line()}")
    return 0 if record.outcome == "ok" and record.capacity is not None else 1


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"
