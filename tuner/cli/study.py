"""Commands around a study: run, trial, validate, status, studies."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.logging import RichHandler

from tuner.cli.output import (
    bounded_int,
    check_folder,
    database_arg,
    duration,
    gpu_list,
    positive_int,
    release,
    seed,
    stores_of,
    study_name,
)
from tuner.cli.run_options import RunOptions
from tuner.config import MAX_GPU_INDEX, Phase
from tuner.errors import ConfigError, ExitCode, FlagError
from tuner.names import one_line
from tuner.space.loader import SearchSpace
from tuner.store.protocol import StoreOpener


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add run, trial, validate, status and studies to the command line."""
    run = sub.add_parser("run", help="run or resume a study (until its trial budget is spent)")
    run.add_argument(
        "--space",
        type=Path,
        default=None,
        help="search space YAML (default: resume the database's one unfinished study from its stored space)",
    )
    run.add_argument(
        "--db",
        type=database_arg,
        default=None,
        help="SQLAlchemy URL or SQLite path (default ./experiments.db)",
    )
    run.add_argument(
        "--study", type=study_name, default=None, help="study name (default from the space: NAME-vVERSION)"
    )
    run.add_argument(
        "--trials", type=positive_int, default=None, help="launches wanted (≥ 1; pruned asks are free)"
    )
    run.add_argument("--timeout", type=duration, default=None, help="wall-time budget, e.g. 8h, 30m")
    run.add_argument("--plain", action="store_true", help="log lines instead of the live display")
    run.add_argument(
        "--gpus", type=gpu_list, default=None, help="this worker's GPUs, e.g. 0,1,2,3 (overrides the space)"
    )
    run.add_argument(
        "--parallel",
        type=bounded_int(1, MAX_GPU_INDEX + 1),
        default=None,
        metavar="N",
        help="N trials at once on disjoint GPU sets of this node (default: the space's budget.parallel)",
    )
    run.add_argument("--worker-events", action="store_true", help=argparse.SUPPRESS)  # a --parallel worker
    run.add_argument(
        "--warm-start",
        default=None,
        metavar="STUDY",
        help="begin with an earlier study's feasible configs and rules",
    )
    run.add_argument(
        "--warm-start-db",
        type=database_arg,
        default=None,
        metavar="URL",
        help="the earlier study's database (default: --db)",
    )
    run.add_argument(
        "--seed", type=seed, default=None, help="sampler seed (overrides the space's sampler.seed)"
    )
    run.add_argument(
        "--sampler",
        choices=("structured", "tpe", "gp", "random"),
        default=None,
        help="overrides the space's sampler.kind",
    )
    run.set_defaults(handler=cmd_run)

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


def cmd_run(args: argparse.Namespace) -> int:
    from tuner.cli.display import RunDisplay, study_best
    from tuner.engine import engine_for
    from tuner.session import check_gpu_indices
    from tuner.store.connect import database_url
    from tuner.store.preflight import check_database
    from tuner.study.events import Hooks, TrialEvent
    from tuner.study.runner import StudyRunner

    options = RunOptions.from_args(args)
    url = database_url(options.db)
    stores = stores_of(args)
    if options.space is None and (done := _finished_study(options, url, stores)) is not None:
        return done
    space, study_name = _space_to_run(options, url)
    if space.search.finalists.capacity:
        from tuner.capacity.run import slos_for

        slos_for(space, ())  # refused before the study starts when the space has no SLO to measure under
    check_folder(space.log_dir / "live", "log_dir")  # a file where the run folder belongs: before any write
    check_database(url, create=True)  # the database first: its mistakes are the likelier ones
    engine_for(space, state_root=None)  # a missing interpreter is refused before anything is written
    check_gpu_indices(space)  # so are GPUs the node does not have
    sets = options.parallel if options.parallel is not None else space.budget.parallel
    if sets < 1:
        raise ConfigError(f"--parallel: expected at least 1 (got {sets})")
    if sets > 1:
        from tuner.cli.parallel import run_parallel

        verbose = bool(getattr(args, "verbose", False))
        name = study_name or space.study_name
        return run_parallel(options, space, sets, db_url=url, study=name, verbose=verbose, stores=stores)
    warm = None
    if options.warm_start is not None:
        from tuner.study.warm import WarmStart

        warm = WarmStart(url=database_url(options.warm_start_db or options.db), study=options.warm_start)
        warm.trials()  # an absent study or database is refused before this run writes anything
    # opening may wait up to a minute on a database another process holds locked: a stop ends the wait
    from tuner.capacity.objective import executor_for
    from tuner.interrupts import INTERRUPTS

    runner = INTERRUPTS.blocking(
        lambda: StudyRunner(
            space,
            db_url=url,
            study_name=study_name,
            n_trials=options.trials,
            timeout_s=options.timeout,
            warm_start=warm,
            execute=executor_for(
                space,
                db_url=url,
                study=study_name or space.study_name,
                warm=(warm.url, warm.study) if warm is not None else None,
                stores=stores,
            ),  # fmt: skip
            stores=stores,
        )
    )
    metric_names = [o.metric for o in space.objectives]
    if options.worker_events:
        from tuner.cli.worker_events import event_hooks

        summary = runner.run(event_hooks(sys.stdout))
        return ExitCode.INTERRUPTED if summary.interrupted else ExitCode.OK
    if options.plain or not sys.stderr.isatty():

        def on_trial(ev: TrialEvent) -> None:
            measured = ev.outcome.measured
            pairs = zip(metric_names, ev.values, strict=False)
            values = " ".join(f"{n}={v:.1f}" for n, v in pairs) if measured else ""
            reused = f" (reused #{ev.reused_from})" if ev.reused_from is not None else ""
            head = f"trial {ev.number}: {ev.outcome.value} {values} {ev.duration_s:.1f}s{reused}"
            print(
                one_line(f"{head} {ev.message[:100]}"),  # a server's text escaped
                file=sys.stderr,
                flush=True,
            )

        def on_phase(number: int, phase: Phase, detail: str) -> None:
            print(f"trial {number}: {phase.value} {detail}".rstrip(), file=sys.stderr, flush=True)

        summary = runner.run(Hooks(on_trial=on_trial, on_phase=on_phase))
    else:
        directions = [o.direction for o in space.objectives]
        best = study_best(url, runner.name, metric_names, directions, stores=stores)
        display = RunDisplay(
            budget=runner.budget, metric_names=metric_names, directions=directions, best=best
        )
        with display, _log_to(display.console):
            summary = runner.run(
                Hooks(on_trial=display.on_trial, on_phase=display.on_phase, on_start=display.on_start)
            )
    print(
        f"study {summary.study_name}: {summary.completed}/{summary.budget or '∞'} launches finished"
        f"{' (interrupted; run the same command to resume)' if summary.interrupted else ''}"
    )
    if summary.exhausted:
        print(f"search stopped early: {summary.exhausted}")
    from tuner.capacity.stage import AFTER_STUDY
    from tuner.study.stages import StudyEnd, run_after

    end = StudyEnd(
        space=space, db_url=url, study=summary.study_name, interrupted=summary.interrupted, stores=stores
    )
    for line in run_after(AFTER_STUDY, end):  # the same stages as `run --parallel`'s, after its workers
        print(line)
    from tuner.report.status import print_status

    print_status(runner.store, summary.study_name, runner.study)
    return ExitCode.INTERRUPTED if summary.interrupted else ExitCode.OK


def _finished_study(args: RunOptions, url: str, stores: StoreOpener) -> int | None:
    """A bare `run` on a database whose study is complete: its summary and exit 0, as `run --space` on
    it does (None where there is a study to resume, or no study: `_space_to_run` says which)."""
    from tuner.report.status import print_status
    from tuner.store.connect import mask_url
    from tuner.store.preflight import check_database
    from tuner.study.resume import stored_studies
    from tuner.study.storage import make_storage

    try:
        check_database(url, create=False)
    except ConfigError:
        return None  # no database to read: `_space_to_run` says so
    studies = [s for s in stored_studies(make_storage(url)) if s.space_text is not None]
    if args.study is not None:
        done = [s for s in studies if s.name == args.study and not s.unfinished]
    else:
        done = studies if studies and not any(s.unfinished for s in studies) and len(studies) == 1 else []
    if not done:
        return None
    study = done[0]
    print(f"study {study.line()} is complete in {mask_url(url)}: nothing to run", file=sys.stderr, flush=True)
    print(f"study {study.name}: {study.finished}/{study.budget or '∞'} launches finished")
    with stores(url, create=False) as store:
        print_status(store, study.name, None)
    return ExitCode.OK


def _space_to_run(args: RunOptions, url: str) -> tuple[SearchSpace, str | None]:
    """The space of `run` (given, or stored with the one unfinished study) with the command's overrides."""
    from tuner.space.loader import load_space

    study_name = args.study
    if args.space is None:
        from tuner.store.connect import mask_url
        from tuner.study.resume import choose_study, stored_studies
        from tuner.study.storage import make_storage

        chosen = choose_study(stored_studies(make_storage(url)), args.study, mask_url(url))
        assert chosen.space_path is not None
        print(f"resuming study {chosen.line()}", file=sys.stderr, flush=True)
        path: Path = Path(chosen.space_path)
        study_name = chosen.name
    else:
        path = args.space
    space = _with_gpus(load_space(path), args.gpus)
    updates = {k: v for k, v in (("seed", args.seed), ("kind", args.sampler)) if v is not None}
    if updates:
        space = replace(space, sampler=space.sampler.model_copy(update=updates))
    return space, study_name


def _with_gpus(space: SearchSpace, gpus: tuple[int, ...] | None) -> SearchSpace:
    """The space with this worker's GPUs (the study stays the same: several workers can split a host)."""
    return space if gpus is None else replace(space, gpus=gpus)


@contextlib.contextmanager
def _log_to(console: Console) -> Iterator[None]:
    """Route log records through the live display's console so they print above it, not through it."""
    root = logging.getLogger()
    saved = root.handlers[:]
    root.handlers = [RichHandler(console=console, show_path=False, show_time=True, markup=False)]
    try:
        yield
    finally:
        root.handlers = saved


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
