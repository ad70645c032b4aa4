"""The tuner's own time per trial, on SQLite and PostgreSQL, with one worker or many.

Runs real studies on the simulator's `tiny-fast` scenario (servers start in well under a
second; tests/fixtures/spaces/tiny-workers-sim.yaml, with the default heartbeat settings) and
prints, over every launched trial of every worker:

- own time: wall time from `ask` to after `tell` and the store write, minus the time spent
  waiting on the server (GPU check, launch to ready, gate, benchmark, stop, memory release);
  with several workers on one small machine it includes waiting for the CPU and for the lock;
- own CPU: the worker process's CPU time over the same span (its threads, not the server's):
  what the tuner itself spends, whatever else competes for the machine;
- trial CPU: the worker's CPU over the whole trial, the client side of gate and benchmark too;
- ask: the locked reap + count + ask (`StudyRunner._next`), lock wait included;
- tell: judging, the store row and Optuna's tell of a launched trial (`Teller.launched`);
- DB: time inside SQL statements of the worker's main thread (every engine: Optuna's, the
  store's, the lock's), and their number.

Each worker is a process with its own host identity (TUNER_HOSTNAME) and working directory,
as on separate nodes. PostgreSQL is a throwaway server (tests/support/postgres.py,
needs initdb/pg_ctl and psycopg) unless --postgres-url names one. Target: median own time
<= 0.3 s per trial with 8 workers on PostgreSQL.

On a small machine, 8 workers and their 8 servers compete for the CPU, and the own time then
measures the queue for it. `--replay S` isolates the tuner and the database, as on a cluster
where each worker has a node: each worker launches its first trial for real, then every later
launch sleeps S seconds and returns that measurement again (asks, the lock, the store rows and
Optuna's tell are all real); the figures then cover the replayed trials only.

    python benchmarks/study_overhead.py [--trials 40] [--db sqlite,postgres] [--workers 1,8]
    python benchmarks/study_overhead.py --db postgres,sqlite --workers 8 --replay 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SPACE = ROOT / "tests" / "fixtures" / "spaces" / "tiny-workers-sim.yaml"


# --- one worker (a process of its own) ----------------------------------------------------------


def _worker(url: str, host: str, trials: int, out: Path, replay_s: float | None) -> None:
    import sqlalchemy as sa

    os.environ["TUNER_HOSTNAME"] = host
    from tuner.space.loader import load_space
    from tuner.space.sections import WorkerSettings
    from tuner.study.events import Hooks, TrialEvent
    from tuner.study.runner import StudyRunner

    main = threading.get_ident()
    db = {"s": 0.0, "n": 0}
    started: dict[int, float] = {}

    def before(conn: Any, cursor: Any, statement: Any, params: Any, context: Any, many: Any) -> None:
        if threading.get_ident() == main:
            started[id(cursor)] = time.perf_counter()

    def after(conn: Any, cursor: Any, statement: Any, params: Any, context: Any, many: Any) -> None:
        t0 = started.pop(id(cursor), None)
        if t0 is not None:
            db["s"] += time.perf_counter() - t0
            db["n"] += 1

    sa.event.listen(sa.engine.Engine, "before_cursor_execute", before)
    sa.event.listen(sa.engine.Engine, "after_cursor_execute", after)

    space = replace(load_space(SPACE), workers=WorkerSettings())  # production heartbeats
    runner = StudyRunner(space, db_url=url, n_trials=trials, timeout_s=None)
    mark: dict[str, float] = {}
    current: dict[str, float | None] = {"ask": None, "tell": None, "exec_cpu": 0.0, "replayed": 0.0}
    rows: list[dict[str, Any]] = []

    def timed_next(inner: Any) -> Any:
        def call() -> Any:
            mark.update(db_s=db["s"], db_n=db["n"], cpu=time.process_time())
            t0 = time.perf_counter()
            job = inner()
            current["ask"], current["tell"], current["exec_cpu"] = time.perf_counter() - t0, None, 0.0
            return job

        return call

    def timed_tell(inner: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            verdict = inner(*args, **kwargs)
            current["tell"] = time.perf_counter() - t0
            return verdict

        return call

    def timed_execute(inner: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            c0 = time.process_time()
            try:
                return inner(*args, **kwargs)
            finally:
                current["exec_cpu"] = (current["exec_cpu"] or 0.0) + time.process_time() - c0

        return call

    first: dict[str, Any] = {}

    def replayed(inner: Any) -> Any:
        from dataclasses import replace as evolve

        from tuner.config import StageTimings

        def call(config: Any, ctx: Any, **kwargs: Any) -> Any:
            if "result" not in first:
                first["result"] = inner(config, ctx, **kwargs)
                current["replayed"] = 0.0
                return first["result"]
            t0 = time.perf_counter()
            time.sleep(replay_s or 0.0)
            current["replayed"] = 1.0
            waited = StageTimings(launch_s=time.perf_counter() - t0)
            return evolve(first["result"], config=config, timings=waited)

        return call

    def on_trial(event: TrialEvent) -> None:
        if event.overhead_s is None:
            return  # reused or pruned: no launch
        if replay_s is not None and not current.get("replayed"):
            return  # the worker's one real launch
        rows.append(
            {
                "own_s": event.overhead_s,
                "cpu_s": time.process_time() - mark["cpu"],
                "own_cpu_s": time.process_time() - mark["cpu"] - (current["exec_cpu"] or 0.0),
                "ask_s": current["ask"],
                "tell_s": current["tell"],
                "db_s": db["s"] - mark["db_s"],
                "db_n": db["n"] - mark["db_n"],
            }
        )

    runner._next = timed_next(runner._next)  # type: ignore[method-assign]
    runner.teller.launched = timed_tell(runner.teller.launched)  # type: ignore[method-assign]
    runner.execute = timed_execute(runner.execute if replay_s is None else replayed(runner.execute))
    runner.run(Hooks(on_trial=on_trial))
    out.write_text(json.dumps(rows))


# --- the driver ---------------------------------------------------------------------------------


def _run(
    url: str, workers: int, trials: int, tmp: Path, replay_s: float | None
) -> tuple[list[dict[str, Any]], float]:
    procs = []
    t0 = time.monotonic()
    for i in range(workers):
        home = tmp / f"node-{i}"
        home.mkdir(parents=True)
        cmd = [sys.executable, __file__, "--worker", f"node-{i}", "--url", url, "--trials", str(trials),
               "--out", str(home / "rows.json")]
        if replay_s is not None:
            cmd += ["--replay", str(replay_s)]
        log = (home / "worker.log").open("wb")
        procs.append((subprocess.Popen(cmd, cwd=home, stdout=log, stderr=subprocess.STDOUT), home))
    rows: list[dict[str, Any]] = []
    for proc, home in procs:
        if proc.wait() != 0:
            raise SystemExit(f"worker in {home} failed:\n{(home / 'worker.log').read_text()[-3000:]}")
        rows += json.loads((home / "rows.json").read_text())
    return rows, time.monotonic() - t0


def _ms(values: list[float]) -> str:
    values = sorted(values)
    if not values:
        return "-"
    p = lambda q: values[min(len(values) - 1, int(q * (len(values) - 1) + 0.5))]  # noqa: E731
    return f"{statistics.median(values) * 1000:.0f} ({p(0.1) * 1000:.0f}–{p(0.9) * 1000:.0f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=40, help="launches per study (all workers together)")
    parser.add_argument("--db", default="sqlite,postgres", help="storages to measure: sqlite, postgres")
    parser.add_argument("--workers", default="1,8", help="worker counts to measure")
    parser.add_argument("--postgres-url", help="a PostgreSQL database to use (default: a throwaway server)")
    parser.add_argument("--replay", type=float, help="after one real launch per worker: sleep S s per launch")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(args.url, args.worker, args.trials, Path(args.out), args.replay)
        return 0

    storages = args.db.split(",")
    counts = [int(n) for n in args.workers.split(",")]
    server = None
    if "postgres" in storages and not args.postgres_url:
        sys.path.insert(0, str(ROOT / "tests"))
        from support.postgres import PostgresServer, missing

        reason = missing()
        if reason:
            raise SystemExit(f"cannot start PostgreSQL: {reason}")
        server = PostgresServer().start()
    header = (
        "| storage | workers | launched | wall s | own time ms, median (p10–p90) | own CPU ms | trial CPU ms "
        "| ask ms | tell ms | DB time ms | DB statements |"
    )
    lines = [header, "|" + "---|" * 11]
    try:
        for storage in storages:
            for n in counts:
                with tempfile.TemporaryDirectory() as tmp:
                    if storage == "sqlite":
                        url = f"sqlite:///{tmp}/exp.db"
                    elif args.postgres_url:
                        url = args.postgres_url
                    else:
                        assert server is not None
                        url = server.url()
                    rows, wall_s = _run(url, n, args.trials, Path(tmp), args.replay)
                tells = [r["tell_s"] for r in rows if r["tell_s"] is not None]
                counts_n = sorted(r["db_n"] for r in rows)
                line = (
                    f"| {storage} | {n} | {len(rows)} | {wall_s:.0f} | {_ms([r['own_s'] for r in rows])} "
                    f"| {_ms([r['own_cpu_s'] for r in rows])} | {_ms([r['cpu_s'] for r in rows])} "
                    f"| {_ms([r['ask_s'] for r in rows])} | {_ms(tells)} "
                    f"| {_ms([r['db_s'] for r in rows])} | {statistics.median(counts_n):.0f} |"
                )
                lines.append(line)
                print(line, flush=True)
    finally:
        if server is not None:
            server.stop()
    print()
    print("\n".join(lines))
    replay = f"; each worker's launches after its first replayed ({args.replay:g} s)" if args.replay else ""
    print(f"\n{args.trials} launches per study on {SPACE.name}{replay}; medians (p10–p90) over the launched "
          "trials of every worker; own time = ask to tell minus waiting on the server (target <= 300 ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
