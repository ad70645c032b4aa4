"""Optuna's side of a study: storage on the tuner's database, the sampler, heartbeats, the worker lock.

The worker lock serialises table creation and count + ask between the workers of a study: a
lock file beside a SQLite file (every worker of that file is on its host), a PostgreSQL
advisory lock on a server (workers on any node); another server keeps a lock file in the run
directory, which holds the budget on one host only.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import logging
import math
import os
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import optuna
import sqlalchemy as sa
from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback
from sqlalchemy.engine import make_url

from tuner.errors import ConfigError, StoreError
from tuner.names import one_line
from tuner.private import private_dir
from tuner.search.sampler import StructuredSampler
from tuner.space.goals import Objective
from tuner.space.loader import SearchSpace
from tuner.space.sections import WorkerSettings
from tuner.store.connect import mask_url, optuna_storage_kwargs, ping_idle_connections
from tuner.store.lock import AdvisoryLock, supports_advisory_lock
from tuner.study.learn import study_policy
from tuner.study.resume import remember_space

log = logging.getLogger(__name__)

WorkerLock = Path | AdvisoryLock  # a lock file, or a lock in the database


def make_storage(url: str, workers: WorkerSettings | None = None) -> RDBStorage:
    """Optuna's RDB storage on the tuner's database: heartbeats, and retries of trials gone stale."""
    workers = workers or WorkerSettings()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        storage = RDBStorage(
            url,
            engine_kwargs=optuna_storage_kwargs(url),
            heartbeat_interval=max(1, math.ceil(workers.heartbeat_s)),  # Optuna takes whole seconds
            grace_period=max(2, math.ceil(workers.grace_s)),
            heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=workers.retries),
        )
    if make_url(url).get_backend_name() != "sqlite":
        ping_idle_connections(storage.engine)
    return storage


def make_sampler(
    space: SearchSpace, *, seed: int | None = None, budget: int | None = None
) -> optuna.samplers.BaseSampler:
    """The sampler the space asks for: structured (the default; tuner.search.sampler) scores every
    candidate with a surrogate of the knobs; TPE (multivariate, grouped), GP and random stay selectable.

    `seed` overrides the space's (the study derives one per ask, so no stream is drawn twice);
    `budget` (launches in all, default the space's) lets the structured sampler weigh what is left.
    """
    spec = space.sampler
    seed = spec.seed if seed is None else seed
    if spec.kind == "structured":
        return StructuredSampler(
            space, seed=seed, budget=budget,
            policy_of=lambda trials: study_policy(space, trials),
        )  # fmt: skip
    if spec.kind == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if spec.kind == "gp":
        missing = [m for m in ("torch", "scipy") if importlib.util.find_spec(m) is None]
        if missing:
            raise ConfigError(
                f"sampler: gp needs {' and '.join(missing)} (pip install {' '.join(missing)}), "
                f"or use kind: tpe, in {space.path}"
            )
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=spec.n_startup_trials)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(
            multivariate=True,
            group=True,
            constant_liar=True,
            n_startup_trials=spec.n_startup_trials,
            seed=seed,
        )


OBJECTIVE_SPEC = "objective_spec"  # study attribute: the objectives as the space declared them


def open_study(space: SearchSpace, url: str, study_name: str | None = None) -> optuna.Study:
    """Create or resume the space's study (directions and metric names from its objectives)."""
    name = study_name or space.study_name
    objectives = objectives_of(space)
    storage = make_storage(url, space.workers)
    try:
        study = optuna.create_study(
            study_name=name,
            storage=storage,
            directions=[optuna.study.StudyDirection[o.direction.upper()] for o in objectives],
            sampler=make_sampler(space),
            load_if_exists=True,
        )
    except (optuna.exceptions.StorageInternalError, sa.exc.SQLAlchemyError) as exc:
        cause = exc.__cause__ or exc
        text = one_line(str(getattr(cause, "orig", None) or cause).strip().split("\n")[0])
        if "locked" in text:
            text += " (another process held the write lock for more than 60 s)"
        raise StoreError(f"experiments database {mask_url(url)}: cannot open study {name!r}: {text}") from exc
    stored = [d.name.lower() for d in study.directions]
    wanted = [o.direction for o in objectives]
    if stored != wanted:
        raise StoreError(
            f"study {name!r} in {mask_url(url)} was created with objectives {stored}, "
            f"the space now has {wanted}: "
            f"bump `version:` in {space.path} to start a new study"
        )
    remember_space(study, space)
    if OBJECTIVE_SPEC not in study.user_attrs:  # which objective the study used (a capacity's SLOs, load)
        declared = [o.model_dump(mode="json", exclude_none=True) for o in space.objectives]
        study.set_user_attr(OBJECTIVE_SPEC, declared)
    if not study.metric_names:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names([o.metric for o in objectives])
    return study


def state_label(outcome: str, feasible: bool, retryable: bool) -> str:
    """The `state` user attribute: the verdict in one line (`FAILED: oom`, `INFEASIBLE: ...`)."""
    if feasible:
        return "ok"
    if retryable:
        return f"FAILED: {outcome} (not the configuration's fault; retried once)"
    if outcome == "slo_violation":
        return "INFEASIBLE: slo_violation (ran, missed a constraint)"
    return f"FAILED: {outcome}"


def objectives_of(space: SearchSpace) -> tuple[Objective, ...]:
    return tuple(Objective(metric=o.metric, direction=o.direction) for o in space.objectives)


def worker_lock(db_url: str, run_dir: Path, study_name: str) -> WorkerLock:
    """The lock of `study_name` that every worker of it shares: in the database on PostgreSQL."""
    if supports_advisory_lock(db_url):
        return AdvisoryLock(db_url, study_name)
    path = lock_path(db_url, run_dir)
    if not path.name.endswith(".tuner-lock"):
        log.warning(
            "%s has no lock shared across hosts: the budget holds among one host's workers", mask_url(db_url)
        )
    return path


def lock_path(db_url: str, run_dir: Path) -> Path:
    """Beside a SQLite file (every worker of that file sees it), else in the run directory."""
    url = make_url(db_url)
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
        db = Path(url.database)
        if not db.parent.is_dir():
            raise StoreError(f"cannot open {mask_url(db_url)}: the directory {db.parent} does not exist")
        return db.with_name(db.name + ".tuner-lock")
    return run_dir / ".ask.lock"


@contextlib.contextmanager
def ask_lock(lock: WorkerLock) -> Iterator[None]:
    """Serialise table creation and count + ask between the workers of a study."""
    if isinstance(lock, AdvisoryLock):
        with lock.hold():
            yield
        return
    fh = _lock_file(lock)
    try:
        yield
    finally:
        # removed while held: a waiter then holds a file no longer at the path, sees it and opens anew,
        # so no lock file is left beside the database once no worker asks
        with contextlib.suppress(OSError):
            lock.unlink()
        fcntl.flock(fh, fcntl.LOCK_UN)
        fh.close()


def _lock_file(path: Path) -> IO[str]:
    """The lock file at `path`, held exclusively, and still the file at `path` (its inode checked)."""
    while True:
        try:
            private_dir(path.parent)
            fh = path.open("a")
        except OSError as exc:
            raise StoreError(f"cannot create the workers' lock file {path}: {exc.strerror or exc}") from exc
        try:
            fcntl.flock(fh, fcntl.LOCK_EX)
            held = os.fstat(fh.fileno())
            now = os.stat(path)
        except FileNotFoundError:  # removed by the worker before us after we opened it
            fh.close()
            continue
        except BaseException:
            fh.close()
            raise
        if (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino):
            return fh
        fh.close()  # replaced meanwhile: lock the file that is there now


def record_heartbeat(study: optuna.Study, trial: optuna.Trial) -> None:
    """One heartbeat of a running trial (a RUNNING trial that never beat is never found stale)."""
    study._storage.record_heartbeat(trial._trial_id)  # type: ignore[attr-defined]


class Heartbeat:
    """Record the trial's heartbeat while it runs (ask/tell has no built-in heartbeat thread)."""

    def __init__(self, study: optuna.Study, trial: optuna.Trial) -> None:
        self._storage = study._storage
        self._trial_id = trial._trial_id
        interval = self._storage.get_heartbeat_interval()  # type: ignore[attr-defined]
        self._interval_s = float(interval or WorkerSettings().heartbeat_s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True, name="heartbeat")

    def _beat(self) -> None:
        while True:
            with contextlib.suppress(Exception):
                self._storage.record_heartbeat(self._trial_id)  # type: ignore[attr-defined]
            if self._stop.wait(self._interval_s):
                return

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(2.0)
