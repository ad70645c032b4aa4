"""One study on PostgreSQL, many workers on many "hosts": the budget, heartbeats, retries, orphans, attempts.

A throwaway PostgreSQL server (tests/support/postgres.py) serves the module. Eight `python -m tuner
run` workers, each with its own host identity (TUNER_HOSTNAME) and its own working directory
(its own run directory, live-server records and simulated GPUs, as on separate nodes), share a
40-launch study on tests/fixtures/spaces/tiny-workers-sim.yaml (heartbeat 1 s, grace 5 s, one
retry). Two of them are SIGKILLed while benchmarking. The scenario runs once; the tests read it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import optuna
import psutil
import pytest
from optuna.trial import FrozenTrial, TrialState
from support.postgres import REQUIRE_ENV, PostgresServer, missing
from support.stored import make_result, record

from tuner.store import connect as store_connect
from tuner.store.lock import AdvisoryLock
from tuner.store.sql import SqlStore, StoredTrial
from tuner.study import finalists
from tuner.study.learn import launched as was_launched

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SPACE = ROOT / "tests" / "fixtures" / "spaces" / "tiny-workers-sim.yaml"
STUDY = "tiny-workers-sim-v1"
BUDGET = 40
HOSTS = tuple(f"node-{i}" for i in range(8))
KILLED = HOSTS[:2]



@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    reason = missing()
    if reason is not None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but PostgreSQL cannot run here: {reason}")
        pytest.skip(f"PostgreSQL tests skipped: {reason}")
    started = PostgresServer().start()
    yield started
    started.stop()


# --- the cluster scenario -------------------------------------------------------------------------


@dataclass
class Killed:
    host: str
    trial: int
    at: datetime
    orphans: list[int]  # the server (and its children) the killed worker left running


@dataclass
class ClusterRun:
    url: str
    wall_s: float
    study: optuna.Study
    rows: tuple[StoredTrial, ...]
    killed: list[Killed]
    orphans_alive_after_others: list[int]
    orphans_alive_after_return: list[int]
    live_records_left: list[Path]
    outputs: dict[str, str] = field(default_factory=dict)


def _worker(tmp: Path, url: str, host: str) -> subprocess.Popen[bytes]:
    home = tmp / host
    home.mkdir(exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "tuner",
        "run",
        "--space",
        str(SPACE),
        "--db",
        url,
        "--trials",
        str(BUDGET),
        "--plain",
    ]
    env = {**os.environ, "TUNER_HOSTNAME": host, "PYTHONUNBUFFERED": "1"}
    with (home / "worker.log").open("ab") as log:
        return subprocess.Popen(
            cmd, cwd=home, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )


def _output(tmp: Path, host: str) -> str:
    return (tmp / host / "worker.log").read_text(errors="replace")


def _servers_of(tmp: Path, host: str) -> list[int]:
    """Simulated servers (and children) running on `host`'s simulated GPUs."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            ours = str(tmp / host) in proc.environ().get("TUNER_SIM_STATE_DIR", "")
            if ours and "tuner.sim" in (proc.info["cmdline"] or []) and _alive(proc.pid):
                found.append(proc.pid)
        except psutil.Error:
            continue
    return found


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _kill_mid_bench(
    tmp: Path, workers: dict[str, subprocess.Popen[bytes]], timeout_s: float = 90.0
) -> list[Killed]:
    """SIGKILL each worker as soon as the last phase it printed is a benchmark."""
    killed: dict[str, Killed] = {}
    deadline = time.monotonic() + timeout_s
    while len(killed) < len(workers):
        for host, proc in workers.items():
            if host in killed:
                continue
            phases = re.findall(r"^trial (\d+): (\w+)", _output(tmp, host), re.MULTILINE)
            if phases and phases[-1][1] == "bench":
                os.kill(proc.pid, signal.SIGKILL)
                at = datetime.now()
                proc.wait(10)
                killed[host] = Killed(
                    host=host, trial=int(phases[-1][0]), at=at, orphans=_servers_of(tmp, host)
                )
            assert proc.poll() is None or host in killed, f"{host} exited early:\n{_output(tmp, host)}"
        assert time.monotonic() < deadline, "a worker never reached a benchmark"
        time.sleep(0.02)
    return [killed[host] for host in workers]


@pytest.fixture(scope="module")
def cluster(server: PostgresServer, tmp_path_factory: pytest.TempPathFactory) -> ClusterRun:
    tmp = tmp_path_factory.mktemp("cluster")
    url = server.url()
    t0 = time.monotonic()
    workers = {host: _worker(tmp, url, host) for host in HOSTS}
    killed = _kill_mid_bench(tmp, {host: workers[host] for host in KILLED})
    for host in HOSTS[len(KILLED) :]:
        try:
            code = workers[host].wait(240)
        except subprocess.TimeoutExpired:
            for proc in workers.values():
                proc.kill()
            raise AssertionError(f"{host} did not finish:\n{_output(tmp, host)}") from None
        assert code == 0, f"{host} exited {code}:\n{_output(tmp, host)}"
    wall_s = time.monotonic() - t0
    alive_after_others = [pid for k in killed for pid in k.orphans if _alive(pid)]
    # The killed hosts come back: the same command, the same host identity, the same run directory.
    back = [_worker(tmp, url, host) for host in KILLED]
    for host, proc in zip(KILLED, back, strict=True):
        assert proc.wait(120) == 0, f"{host} after its return:\n{_output(tmp, host)}"
    alive_after_return = [pid for k in killed for pid in k.orphans if _alive(pid)]
    study = optuna.load_study(study_name=STUDY, storage=url)
    with SqlStore(url) as store:
        rows = store.trials(STUDY)
    return ClusterRun(
        url=url,
        wall_s=wall_s,
        study=study,
        rows=rows,
        killed=killed,
        orphans_alive_after_others=alive_after_others,
        orphans_alive_after_return=alive_after_return,
        live_records_left=sorted(tmp.glob("node-*/runs/*/live/*.json")),
        outputs={host: _output(tmp, host) for host in HOSTS},
    )


def _launched(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    return [
        t
        for t in trials
        if t.state is TrialState.COMPLETE and was_launched(t.user_attrs)
    ]


@pytest.mark.chaos  # eight workers for a minute: run with the storms (make chaos)
def test_eight_hosts_spend_exactly_the_budget(cluster: ClusterRun) -> None:
    trials = cluster.study.get_trials(deepcopy=False)
    launched = _launched(trials)
    claimed = finalists.claimed(cluster.study.user_attrs.get(finalists.STATE_ATTR) or {})
    states = [t.state for t in trials]
    assert len(launched) + claimed == BUDGET, (len(launched), claimed)
    assert TrialState.RUNNING not in states and TrialState.WAITING not in states

    numbered = [r.trial_number for r in cluster.rows if r.trial_number is not None]
    assert len(numbered) == len(set(numbered)), "a trial number was recorded twice"
    assert {t.number for t in launched} <= set(numbered), "a launched trial has no row"
    repeats = [r for r in cluster.rows if r.confirm_of is not None]
    assert len(repeats) == claimed, "a finalist repeat has no row"
    launch_rows = [r for r in cluster.rows if r.trial_number in {t.number for t in launched}] + repeats
    assert len(launch_rows) == BUDGET
    hosts = {r.hostname for r in launch_rows}
    assert hosts <= set(HOSTS) and len(hosts) >= len(HOSTS) - len(KILLED)
    per_host = {h: sum(r.hostname == h for r in launch_rows) for h in HOSTS}
    print(
        f"\n{len(HOSTS)} workers, {BUDGET} launches ({claimed} finalist repeats) in {cluster.wall_s:.1f} s; "
        f"{len(trials)} asks ({len(trials) - len(launched)} reused, pruned, or lost); per host {per_host}"
    )


@pytest.mark.chaos  # eight workers for a minute: run with the storms (make chaos)
def test_killed_workers_trials_are_reaped_elsewhere_and_retried_once(cluster: ClusterRun) -> None:
    trials = cluster.study.get_trials(deepcopy=False)
    for k in cluster.killed:
        lost = trials[k.trial]
        assert lost.state is TrialState.FAIL and lost.user_attrs.get("host") == k.host
        retries = [t for t in trials if t.system_attrs.get("failed_trial") == k.trial]
        assert len(retries) == 1, f"trial {k.trial} of {k.host}: retries {[t.number for t in retries]}"
        (retry,) = retries
        assert retry.state is TrialState.COMPLETE and retry.params == lost.params
        assert retry.user_attrs["host"] not in KILLED, "the retry ran on a surviving host"
        assert lost.datetime_complete is not None
        reaped_s = (lost.datetime_complete - k.at).total_seconds()
        assert reaped_s < 60, f"reaped {reaped_s:.1f} s after the kill"
        print(
            f"\n{k.host}: trial {k.trial} killed mid-benchmark, reaped {reaped_s:.1f} s later "
            f"(grace 5 s), retried as trial {retry.number} on {retry.user_attrs['host']}"
        )
    assert not [t for t in trials if len(t.system_attrs.get("retry_history", [])) > 1], "retried twice"


@pytest.mark.chaos  # eight workers for a minute: run with the storms (make chaos)
def test_orphaned_servers_wait_for_their_own_host(cluster: ClusterRun) -> None:
    orphans = [pid for k in cluster.killed for pid in k.orphans]
    assert all(k.orphans for k in cluster.killed), "a killed worker left no server running"
    assert cluster.orphans_alive_after_others == orphans, "another host touched a server it does not own"
    assert cluster.orphans_alive_after_return == [], "the returning host did not stop its orphan"
    assert cluster.live_records_left == []
    for k in cluster.killed:
        assert "left by a killed run" in cluster.outputs[k.host]


# --- the lock and the attempt numbers ---------------------------------------------------------------


def test_advisory_lock_is_exclusive_per_study(server: PostgresServer) -> None:
    url = server.url()
    first, second, other = AdvisoryLock(url, "s1"), AdvisoryLock(url, "s1"), AdvisoryLock(url, "s2")
    order: list[str] = []
    try:
        with first.hold():
            waiter = threading.Thread(target=lambda: _hold(second, order))
            waiter.start()
            with other.hold():  # another study's lock is free
                order.append("other")
            time.sleep(0.3)
            order.append("first")
        waiter.join(10)
    finally:
        for lock in (first, second, other):
            lock.close()
    assert order == ["other", "first", "second"]


def _hold(lock: AdvisoryLock, order: list[str]) -> None:
    with lock.hold():
        order.append("second")


def test_concurrent_records_of_one_config_get_distinct_attempts(server: PostgresServer) -> None:
    url = server.url()
    threads_n, rounds = 12, 3
    stores = [SqlStore(url, hostname=f"node-{i}") for i in range(threads_n)]
    barrier = threading.Barrier(threads_n)
    errors: list[BaseException] = []

    def write(store: SqlStore) -> None:
        try:
            for _ in range(rounds):
                barrier.wait()
                record(store, make_result(), config_hash="same")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    retried = sum(s.attempt_retries for s in stores)
    attempts = sorted(r.attempt for r in stores[0].trials("glm5-v1"))
    for s in stores:
        s.close()
    assert errors == []
    assert attempts == list(range(1, threads_n * rounds + 1))
    assert retried > 0, "no INSERT ever collided: the race was not provoked"
    print(f"\n{threads_n} writers x {rounds} rounds of one config: {retried} colliding INSERTs counted again")


def test_a_connection_cut_while_idle_is_replaced_before_use(
    server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg

    url = server.url()
    monkeypatch.setattr(store_connect, "IDLE_CHECK_S", 0.0)  # every pooled connection counts as idle
    with SqlStore(url) as store:
        record(store, make_result())
        with psycopg.connect(server._dsn("postgres"), autocommit=True) as admin:  # a restart, a firewall
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                (url.rsplit("/", 1)[1],),
            )
        assert len(store.trials("glm5-v1")) == 1


def test_workers_opening_a_database_missing_a_metric_column_add_it_once(server: PostgresServer) -> None:
    import psycopg

    url = server.url()
    with SqlStore(url) as store:
        record(store, make_result())
    with psycopg.connect(server._dsn(url.rsplit("/", 1)[1]), autocommit=True) as admin:
        admin.execute("ALTER TABLE tuner_trials DROP COLUMN ttft_p99_ms")
    barrier = threading.Barrier(6)
    errors: list[BaseException] = []

    def open_and_record(i: int) -> None:
        try:
            barrier.wait()
            with SqlStore(url, hostname=f"node-{i}") as store:
                record(store, make_result(), config_hash=f"c{i}")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_and_record, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    with SqlStore(url) as store:
        rows = store.trials("glm5-v1")
    values = [r.metrics["ttft_p99_ms"] for r in rows]
    assert len(values) == 7 and values[0] is None and None not in values[1:]
