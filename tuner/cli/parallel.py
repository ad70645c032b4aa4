"""`run --parallel N`: N ordinary workers of one study, each on its own disjoint set of the node's GPUs.

The parent cuts the node into sets (tuner.study.parallel), starts one `python -m tuner run
--gpus SET --parallel 1` per set in its own process group (so a terminal's Ctrl-C reaches only
the parent, which forwards one stop to each worker: a second signal would cut a teardown short),
shows their events in one live view and exits like a single `run` (130 when interrupted).
Each worker dies with a SIGTERM if the parent is killed, tearing its server down first.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO

from tuner.cli.run_options import RunOptions
from tuner.cli.worker_events import PhaseChanged, TrialStarted, parse_event
from tuner.errors import ConfigError, ExitCode
from tuner.interrupts import INTERRUPTS, STOP_EXIT_CODES
from tuner.space.loader import SearchSpace
from tuner.store.factory import open_store
from tuner.store.protocol import StoreOpener
from tuner.study.events import TrialEvent

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
INTERRUPTED = ExitCode.INTERRUPTED


@dataclass(eq=False, kw_only=True, slots=True)
class Worker:
    """One child `run` on one GPU set."""

    gpus: tuple[int, ...]
    proc: subprocess.Popen[str]

    @property
    def label(self) -> str:
        return f"GPUs {','.join(map(str, self.gpus))}"


def node_gpus(space: SearchSpace, given: tuple[int, ...] | None) -> tuple[int, ...]:
    """The GPUs to share out: --gpus, else the space's `gpus`, else every GPU the engine's probe sees."""
    if given:
        return given
    if space.gpus:
        return space.gpus
    from tuner.engine import engine_for, probe_for

    with tempfile.TemporaryDirectory(prefix="tuner-gpus-") as scratch:  # nothing under runs/ yet
        probe = probe_for(engine_for(space, state_root=Path(scratch)))
        try:
            found = tuple(d.index for d in probe.devices())
        finally:
            probe.close()
    if not found:
        raise ConfigError(
            "--parallel: the engine's probe sees no GPUs; name the node's GPUs with --gpus 0,1,... "
            "or `gpus:` in the space"
        )
    return found


def worker_argv(
    options: RunOptions, *, space: Path, db_url: str, study: str, gpus: Sequence[int], verbose: bool = False
) -> list[str]:
    """The command line of one worker: the parent's `run`, every option kept, on one GPU set with
    events on stdout."""
    mine = replace(
        options,
        space=space,
        db=db_url,
        study=study,
        gpus=tuple(gpus),
        parallel=1,
        plain=True,
        worker_events=True,
    )
    return [sys.executable, "-m", "tuner", *(["-v"] if verbose else []), "run", *mine.argv()]


def _own_group_dying_with_parent() -> None:  # runs in the child between fork and exec
    os.setpgid(0, 0)
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def start_workers(argvs: Sequence[tuple[tuple[int, ...], list[str]]]) -> list[Worker]:
    """Start each worker in its own process group, dying (SIGTERM) with this process."""
    workers = []
    for gpus, argv in argvs:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
            preexec_fn=_own_group_dying_with_parent,
        )
        workers.append(Worker(gpus=gpus, proc=proc))
    return workers


Line = tuple[Worker, str, bool]  # (worker, line, from stderr)


def _pump(worker: Worker, stream: IO[str], is_err: bool, lines: queue.Queue[Line | None]) -> None:
    for line in stream:
        lines.put((worker, line.rstrip("\n"), is_err))
    lines.put(None)


class Supervisor:
    """Reads every worker's output, forwards one stop request to each, and waits for all of them."""

    def __init__(self, workers: list[Worker]) -> None:
        self.workers = workers
        self.lines: queue.Queue[Line | None] = queue.Queue()
        self.stopping = False
        self._open = 0
        for w in workers:
            assert w.proc.stdout is not None and w.proc.stderr is not None
            for stream, is_err in ((w.proc.stdout, False), (w.proc.stderr, True)):
                threading.Thread(target=_pump, args=(w, stream, is_err, self.lines), daemon=True).start()
                self._open += 1

    def stop(self) -> None:
        """Ask every worker still running to stop (once): it tears its server down and records the trial."""
        if self.stopping:
            return
        self.stopping = True
        for w in self.workers:
            if w.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    w.proc.send_signal(signal.SIGINT)

    def lines_until_done(self) -> Iterator[Line]:
        """Every line the workers write, until all their streams are closed; Ctrl-C stops them, once."""
        while self._open:
            if INTERRUPTS.requested:  # the signal handler only records it: act on it here
                self.stop()
            try:
                item = self.lines.get(timeout=0.25)
            except KeyboardInterrupt:
                self.stop()
                continue
            except queue.Empty:
                continue
            if item is None:
                self._open -= 1
            else:
                yield item

    def wait(self) -> list[int]:
        """Exit codes of all workers (waiting out a Ctrl-C by forwarding it)."""
        codes = []
        for w in self.workers:
            while True:
                if INTERRUPTS.requested:
                    self.stop()
                try:
                    codes.append(w.proc.wait(timeout=0.25))
                    break
                except subprocess.TimeoutExpired:
                    continue
                except KeyboardInterrupt:
                    self.stop()
        return codes


def exit_code(codes: Sequence[int], interrupted: bool) -> int:
    """130 when stopped by a signal or any worker was; else the first failing worker's code; else 0."""
    if interrupted or any(c in STOP_EXIT_CODES or c < 0 for c in codes):
        return INTERRUPTED
    return next((c for c in codes if c != 0), 0)


def run_parallel(
    options: RunOptions, space: SearchSpace, sets: int, *, db_url: str, study: str, verbose: bool = False,
    stores: StoreOpener = open_store,
) -> int:  # fmt: skip
    """Run `sets` workers of the space's study at once, each on its own GPUs; the exit code."""
    gpu_sets = gpu_sets_for(space, node_gpus(space, options.gpus), sets)
    path = Path(space.path)
    argvs = [
        (g, worker_argv(options, space=path, db_url=db_url, study=study, gpus=g, verbose=verbose))
        for g in gpu_sets
    ]
    sets_text = " | ".join(",".join(map(str, g)) for g in gpu_sets)
    print(f"study {study}: {sets} workers on GPUs {sets_text}", file=sys.stderr, flush=True)
    supervisor = Supervisor(start_workers(argvs))
    while True:
        try:
            _follow(options, space, supervisor, db_url=db_url, study=study)
            break
        except KeyboardInterrupt:  # outside the queue wait (e.g. while drawing): stop, keep following
            supervisor.stop()
    codes = supervisor.wait()
    interrupted = supervisor.stopping or any(c in STOP_EXIT_CODES for c in codes)
    if not interrupted and not any(codes):  # every worker done: the study's stages after its launches
        from tuner.capacity.stage import AFTER_STUDY
        from tuner.study.stages import StudyEnd, run_after

        end = StudyEnd(space=space, db_url=db_url, study=study, interrupted=False, stores=stores)
        for line in run_after(AFTER_STUDY, end):
            print(line)
    budget = options.trials or space.budget.n_trials
    _summary(db_url, study, budget, interrupted, stores)
    return exit_code(codes, supervisor.stopping)


def gpu_sets_for(space: SearchSpace, gpus: tuple[int, ...], sets: int) -> tuple[tuple[int, ...], ...]:
    """The GPU sets of `sets` workers on `gpus` for this space: each as large as its largest launch."""
    from tuner.engine import engine_for
    from tuner.study.parallel import gpus_per_trial, split_gpus

    return split_gpus(gpus, gpus_per_trial(space, engine_for(space, state_root=None)), sets)


def _follow(
    options: RunOptions, space: SearchSpace, supervisor: Supervisor, *, db_url: str, study: str
) -> None:
    """Show the workers' events: plain lines, or the live display of every running trial."""
    if options.plain or not sys.stderr.isatty():
        for worker, line, is_err in supervisor.lines_until_done():
            event = parse_event(line)
            if isinstance(event, TrialEvent):
                print(
                    f"[{worker.label}] trial {event.number}: {event.outcome.value} "
                    f"{event.duration_s:.1f}s {event.message[:100]}",
                    file=sys.stderr,
                    flush=True,
                )
            elif isinstance(event, PhaseChanged):
                print(
                    f"[{worker.label}] trial {event.trial}: {event.phase.value} {event.detail}".rstrip(),
                    file=sys.stderr,
                    flush=True,
                )
            elif event is None and (is_err or line.strip()):
                print(f"[{worker.label}] {line}", file=sys.stderr, flush=True)
        return
    from tuner.cli.display import RunDisplay, study_best

    names = [o.metric for o in space.objectives]
    directions = [o.direction for o in space.objectives]
    budget = options.trials or space.budget.n_trials
    display = RunDisplay(
        budget=budget,
        metric_names=names,
        parallel=len(supervisor.workers),
        directions=directions,
        best=study_best(db_url, study, names, directions),  # the whole study, from before a resume too
    )
    with display:
        for worker, line, _ in supervisor.lines_until_done():
            event = parse_event(line)
            if isinstance(event, TrialStarted):
                display.on_start(event.trial, event.done)
                display.set_where(event.trial, worker.label)
            elif isinstance(event, PhaseChanged):
                display.on_phase(event.trial, event.phase, event.detail)
            elif isinstance(event, TrialEvent):
                display.on_trial(event)
            elif line.strip():
                display.console.print(f"[{worker.label}] {line}", markup=False, highlight=False)


def _summary(db_url: str, study: str, budget: int | None, interrupted: bool, stores: StoreOpener) -> None:
    from tuner.report.status import print_status

    with stores(db_url) as store:
        launched = sum(1 for r in store.trials(study) if r.launch is not None and r.confirm_of is None)
        resume = " (interrupted; run the same command to resume)" if interrupted else ""
        print(f"study {study}: {launched}/{budget or '∞'} launches recorded{resume}")
        print_status(store, study, None)
