"""Commands around a study: run, trial, validate, status, studies."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tuner.cli.output import (
    database_arg,
    gpu_list,
    release,
    stores_of,
)
from tuner.cli.run import _with_gpus, register_run
from tuner.errors import ConfigError, ExitCode, FlagError
from tuner.store.protocol import StoreOpener


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add run, trial, validate, status and studies to the command line."""
    register_run(sub)

    trial = sub.add_parser("trial", help="launch one configuration, gate and benchmark it, print the result")
    trial.add_argument("--space", required=True, type=Path)
    trial.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    trial.add_argument("--json", action="store_true", help="print the whole result as JSON")
    trial.add_argument(
        "--gpus", type=gpu_list, default=None, help="GPUs to use, e.g. 0,1 (overrides the space)"
    )
    trial.set_defaults(handler=cmd_trial)

    validate = sub.add_parser("validate", help="render and check every choice of a space without launching")
    validate.add_argument("--space", required=True, type=Path)
    validate.add_argument(
        "--sglang-version", type=release, default=None, help="check against this release's options"
    )
    validate.set_defaults(handler=cmd_validate)

    status = sub.add_parser("status", help="trials, failures by class and the Pareto front of a study")
    status.add_argument("--db", type=database_arg, default=None)
    status.add_argument("--study", default=None)
    status.add_argument("--space", type=Path, default=None, help="take the study name from this space")
    status.set_defaults(handler=cmd_status)

    studies = sub.add_parser("studies", help="list the studies in a database")
    studies.add_argument("--db", type=database_arg, default=None)
    studies.add_argument(
        "--show-space", metavar="STUDY", default=None, help="print the space file stored with it"
    )
    studies.set_defaults(handler=cmd_studies)


def _single(space: Any, config: Any, ctx: Any, stores: StoreOpener) -> Any:
    """One trial of a capacity objective: its load search, its points kept only for this run."""
    import tempfile

    from tuner.capacity.objective import CapacityExecutor

    with tempfile.TemporaryDirectory(prefix="tuner-trial-") as folder:
        url = f"sqlite:///{Path(folder) / 'capacity.db'}"
        executor = CapacityExecutor(space, db_url=url, study=space.study_name, stores=stores)
        return executor(config, ctx, label="single")


def cmd_trial(args: argparse.Namespace) -> int:
    from tuner.capacity.objective import capacity_spec
    from tuner.cli.display import result_line
    from tuner.cli.output import result_json
    from tuner.objectives import judge
    from tuner.report.why import missed_constraints
    from tuner.secrets import redact_argv, scrub, secret_values
    from tuner.session import trial_session
    from tuner.space.loader import config_from_params, load_space, parse_set_overrides
    from tuner.study.storage import objectives_of
    from tuner.trial import run_trial

    space = _with_gpus(load_space(args.space), args.gpus)
    params = dict(space.baselines[0]) if space.baselines else {}
    params.update(parse_set_overrides(space, args.sets))
    config = config_from_params(space, params)
    with trial_session(space, progress=not args.json) as ctx:
        single = capacity_spec(space) is not None
        result = (
            _single(space, config, ctx, stores_of(args)) if single else run_trial(config, ctx, label="single")
        )
    # The launch's keys and tokens were in memory only: what is printed has them scrubbed.
    secrets = frozenset(space.secret_values)
    if result.launch is not None:
        secrets |= secret_values(result.launch.argv, result.launch.env)
    # judged as the study judges it: the space's objectives and constraints
    verdict = judge(result, objectives_of(space), space.constraints)
    infeasible = result.ok and not verdict.feasible
    missed = missed_constraints(verdict.metrics, space.constraints) if infeasible else []
    if args.json:
        data = json.loads(result_json(result, secrets))
        data["verdict"] = {
            "outcome": verdict.outcome.value,
            "feasible": verdict.feasible,
            "constraints": dict(verdict.constraints),
            "missed": missed,
        }
        print(json.dumps(data, indent=2, sort_keys=False))
    else:
        if result.launch is not None:
            print("launch:", " ".join(redact_argv(result.launch.argv)))
            print("log:   ", result.launch.log_path)
        line = scrub(result_line(result), secrets)
        if missed:  # it ran, but the study would count it infeasible: say so first, with value and bound
            rest = line.removeprefix("ok").lstrip()
            line = f"{verdict.outcome.value} (missed {'; '.join(missed)})  {rest}"
        print(line)
    return 0 if verdict.feasible else 1


def cmd_validate(args: argparse.Namespace) -> int:
    from tuner.engine import engine_for
    from tuner.session import render_launch
    from tuner.space.loader import config_from_params, enumerate_choices, load_space

    space = load_space(args.space)
    engine = engine_for(space, state_root=None, sglang_version=args.sglang_version)
    version, table = engine.sglang_version, engine.table
    errors: dict[str, list[dict[str, object]]] = {}
    count = 0
    for params in enumerate_choices(space):
        count += 1
        try:
            config = config_from_params(space, params)
            render_launch(config, space, engine, port=30000, log_path=Path("x.log"))
        except (FlagError, ConfigError) as exc:
            errors.setdefault(str(exc), []).append(params)
    bad = sum(len(v) for v in errors.values())
    for message, failing in errors.items():
        print(f"INVALID ({len(failing)} of {count}, e.g. {failing[0]}): {message}")
    print(
        f"{count - bad}/{count} configurations of {space.path} render to flags SGLang {version} accepts "
        f"(option table: {table.source})"
    )
    return ExitCode.USAGE if bad else ExitCode.OK


def cmd_status(args: argparse.Namespace) -> int:
    from tuner.report.status import print_status
    from tuner.store.connect import database_url

    store = stores_of(args)(database_url(args.db), create=False)
    preferred = None
    if args.space is not None:
        from tuner.space.loader import load_space

        preferred = load_space(args.space).study_name
    with store:
        name = store.resolve_study(args.study, preferred=preferred)
        print_status(store, name, None)
    return 0


def cmd_studies(args: argparse.Namespace) -> int:
    from tuner.report.frame import study_data_from
    from tuner.store.connect import database_url
    from tuner.study.asks import classify, tally

    with stores_of(args)(database_url(args.db), create=False) as store:
        if args.show_space is not None:
            return _show_space(database_url(args.db), args.show_space)
        for name in store.studies():
            data = study_data_from(store, name)
            counts = tally(classify(data.trials, data.rows))
            repeats = sum(1 for r in data.rows if r.confirm_of is not None)
            print(f"{name}\t{counts.asked} asks, {counts.launched} launches, {repeats} re-measurements")
    return 0


def _show_space(url: str, name: str) -> int:
    from tuner.store.connect import mask_url
    from tuner.study.resume import choose_study, stored_studies
    from tuner.study.storage import make_storage

    studies = stored_studies(make_storage(url))
    found = next((s for s in studies if s.name == name), None)
    if found is None or found.space_text is None:
        choose_study(studies, name, mask_url(url))  # raises the one-line error naming the studies
        raise ConfigError(f"study {name}: no space file stored with it")
    sys.stdout.write(found.space_text)
    return 0
