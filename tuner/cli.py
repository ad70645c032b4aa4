"""The command surface: parse, call, print. `python -m tuner <command> --help` for each."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from tuner.errors import TunerError
from tuner.interrupts import INTERRUPTS

log = logging.getLogger("tuner")


def _duration(text: str) -> float:
    from tuner.space_yaml import parse_duration

    try:
        return float(parse_duration(text))
    except (TypeError, ValueError) as exc:
        raise argparse.ArgumentTypeError(
            f"expected a duration such as 90s, 30m or 8h (got {text!r})"
        ) from exc


def _gpu_list(text: str) -> tuple[int, ...]:
    try:
        gpus = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected GPU indices such as 0,1,2,3 (got {text!r})") from exc
    if not gpus or any(g < 0 for g in gpus):
        raise argparse.ArgumentTypeError(f"expected GPU indices such as 0,1,2,3 (got {text!r})")
    return gpus


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tuner", description="Tuning experiments for SGLang.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run or resume a study (until its trial budget is spent)")
    run.add_argument("--space", required=True, type=Path, help="search space YAML")
    run.add_argument("--db", default=None, help="SQLAlchemy URL or SQLite path (default ./experiments.db)")
    run.add_argument("--study", default=None, help="study name (default from the space: NAME-vVERSION)")
    run.add_argument("--trials", type=int, default=None, help="finished trials wanted in the study")
    run.add_argument("--timeout", type=_duration, default=None, help="wall-time budget, e.g. 8h, 30m")
    run.add_argument("--plain", action="store_true", help="log lines instead of the live display")
    run.add_argument(
        "--gpus", type=_gpu_list, default=None, help="this worker's GPUs, e.g. 0,1,2,3 (overrides the space)"
    )

    trial = sub.add_parser("trial", help="launch one configuration, gate and benchmark it, print the result")
    trial.add_argument("--space", required=True, type=Path)
    trial.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    trial.add_argument("--json", action="store_true", help="print the whole result as JSON")
    trial.add_argument(
        "--gpus", type=_gpu_list, default=None, help="GPUs to use, e.g. 0,1 (overrides the space)"
    )

    validate = sub.add_parser("validate", help="render and check every choice of a space without launching")
    validate.add_argument("--space", required=True, type=Path)
    validate.add_argument("--sglang-version", default=None, help="check against this release's options")

    status = sub.add_parser("status", help="trials, failures by class and the Pareto front of a study")
    status.add_argument("--db", default=None)
    status.add_argument("--study", default=None)
    status.add_argument("--space", type=Path, default=None, help="take the study name from this space")

    studies = sub.add_parser("studies", help="list the studies in a database")
    studies.add_argument("--db", default=None)

    from tuner import cli_profile

    cli_profile.add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    INTERRUPTS.install()
    try:
        return int(_dispatch(args) or 0)
    except TunerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _dispatch(args: argparse.Namespace) -> int:
    from tuner import cli_profile, cli_study

    handlers = {
        "run": cli_study.cmd_run,
        "trial": cli_study.cmd_trial,
        "validate": cli_study.cmd_validate,
        "status": cli_study.cmd_status,
        "studies": cli_study.cmd_studies,
        **cli_profile.HANDLERS,
    }
    return handlers[args.command](args)


def print_json(value: object) -> None:
    from tuner.store_codec import to_jsonable

    print(json.dumps(to_jsonable(value), indent=2, sort_keys=False))
