"""`run`: a study from its space (or resumed from the database), one worker or `--parallel` ones, then
the stages after its launches (tuner/study/stages.run_after), and its status."""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.logging import RichHandler

from tuner.cli.output import (
    bounded_int,
    check_folder,
    database_arg,
    duration,
    gpu_list,
    positive_int,
    seed,
    stores_of,
    study_name,
)
from tuner.cli.run_options import RunOptions
from tuner.config import MAX_GPU_INDEX, Phase
from tuner.errors import ConfigError, ExitCode
from tuner.names import one_line
from tuner.space.loader import SearchSpace
from tuner.store.protocol import StoreOpener

if TYPE_CHECKING:
    from tuner.study.events import Hooks, RunSummary
    from tuner.study.runner import StudyRunner


def register_run(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add `run` to the command line (every option is a field of RunOptions too)."""
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


def cmd_run(args: argparse.Namespace) -> int:
    from tuner.store.connect import database_url

    options = RunOptions.from_args(args)
    url = database_url(options.db)
    stores = stores_of(args)
    if options.space is None and (done := _finished_study(options, url, stores)) is not None:
        return done
    space, study_name = _space_to_run(options, url)
    sets = _preflight(space, url, options)
    if sets > 1:
        from tuner.cli.parallel import run_parallel

        verbose = bool(getattr(args, "verbose", False))
        name = study_name or space.study_name
        return run_parallel(options, space, sets, db_url=url, study=name, verbose=verbose, stores=stores)
    runner = _open_runner(options, space, study_name, url, stores)
    if options.worker_events:
        from tuner.cli.worker_events import event_hooks

        summary = runner.run(event_hooks(sys.stdout))
        return ExitCode.INTERRUPTED if summary.interrupted else ExitCode.OK
    summary = _run_shown(runner, options, space, url, stores)
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


def _preflight(space: SearchSpace, url: str, options: RunOptions) -> int:
    """Refuse what would fail later before anything is written; the number of workers."""
    from tuner.engine import engine_for
    from tuner.session import check_gpu_indices
    from tuner.store.preflight import check_database

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
    return sets


def _open_runner(
    options: RunOptions, space: SearchSpace, study_name: str | None, url: str, stores: StoreOpener
) -> StudyRunner:
    """This worker of the study (a warm start checked first)."""
    from tuner.capacity.objective import executor_for
    from tuner.interrupts import INTERRUPTS
    from tuner.store.connect import database_url
    from tuner.study.runner import StudyRunner

    warm = None
    if options.warm_start is not None:
        from tuner.study.warm import WarmStart

        warm = WarmStart(url=database_url(options.warm_start_db or options.db), study=options.warm_start)
        warm.trials()  # an absent study or database is refused before this run writes anything
    execute = executor_for(
        space, db_url=url, study=study_name or space.study_name,
        warm=(warm.url, warm.study) if warm is not None else None, stores=stores,
    )  # fmt: skip
    # opening may wait up to a minute on a database another process holds locked: a stop ends the wait
    return INTERRUPTS.blocking(
        lambda: StudyRunner(
            space,
            db_url=url,
            study_name=study_name,
            n_trials=options.trials,
            timeout_s=options.timeout,
            warm_start=warm,
            execute=execute,
            stores=stores,
        )  # fmt: skip
    )


def _run_shown(
    runner: StudyRunner, options: RunOptions, space: SearchSpace, url: str, stores: StoreOpener
) -> RunSummary:
    """Run the study with its trials shown: log lines, or the live display on a terminal."""
    from tuner.cli.display import RunDisplay, study_best
    from tuner.study.events import Hooks

    metric_names = [o.metric for o in space.objectives]
    if options.plain or not sys.stderr.isatty():
        return runner.run(_plain_hooks(metric_names))
    directions = [o.direction for o in space.objectives]
    best = study_best(url, runner.name, metric_names, directions, stores=stores)
    display = RunDisplay(budget=runner.budget, metric_names=metric_names, directions=directions, best=best)
    with display, _log_to(display.console):
        return runner.run(
            Hooks(on_trial=display.on_trial, on_phase=display.on_phase, on_start=display.on_start)
        )


def _plain_hooks(metric_names: list[str]) -> Hooks:
    """One line per trial and per phase on stderr (a server's text escaped)."""
    from tuner.study.events import Hooks, TrialEvent

    def on_trial(ev: TrialEvent) -> None:
        pairs = zip(metric_names, ev.values, strict=False)
        values = " ".join(f"{n}={v:.1f}" for n, v in pairs) if ev.outcome.measured else ""
        reused = f" (reused #{ev.reused_from})" if ev.reused_from is not None else ""
        head = f"trial {ev.number}: {ev.outcome.value} {values} {ev.duration_s:.1f}s{reused}"
        print(one_line(f"{head} {ev.message[:100]}"), file=sys.stderr, flush=True)

    def on_phase(number: int, phase: Phase, detail: str) -> None:
        print(f"trial {number}: {phase.value} {detail}".rstrip(), file=sys.stderr, flush=True)

    return Hooks(on_trial=on_trial, on_phase=on_phase)


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
