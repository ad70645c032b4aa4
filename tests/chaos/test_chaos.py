"""Chaos: a study on the tiny simulated scenario through kills, signals, workers and broken machines.

Each test drives real `python -m tuner run` processes and real simulator servers, injects its
faults at seeded random points (phase lines of the plain output, plus a seeded delay), and then
checks invariants, never timings: exact COMPLETE counts, rows consistent with Optuna, nothing
RUNNING, no server or live record left, no launch run twice at once, the exit codes.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from chaos_harness import (
    Tuner,
    check_invariants,
    finish,
    live_server_pids,
    make_space,
    sim_processes,
    study_facts,
)
from optuna.trial import TrialState
from support.sim import poll as wait_until

from tuner.config import Outcome

pytestmark = [pytest.mark.integration, pytest.mark.chaos, pytest.mark.timeout(900)]

STORM = 1000  # the budget while faults are injected: never reached, so each run is ended by a fault
PHASES = ("render", "launch", "gate", "bench", "teardown")
OUTCOME = "|".join(o.value for o in Outcome)
# `make chaos` (and CI) runs the storms at full size: 20 SIGKILLs of the tuner, 10 of its server, 20
# SIGINT/SIGTERMs; `make test` runs them smaller to stay within its time.
FULL = os.environ.get("TUNER_CHAOS") == "full"
KILLS, SERVER_KILLS, SIGNALS = (20, 10, 20) if FULL else (6, 3, 6)


def _phase_pattern(rng: random.Random) -> str:
    """A seeded point of a trial: one of its phases, or the moment it was told."""
    choice = rng.choice([*PHASES, "told"])
    return rf"^trial \d+: ({OUTCOME})\b" if choice == "told" else rf"^trial \d+: {choice}\b"


def test_sigkills_of_the_tuner_and_of_its_servers_lose_nothing(tmp_path: Path) -> None:
    """20 SIGKILLs of `tuner run` and 10 of its server during one study; then it completes exactly."""
    make_space(tmp_path)
    rng = random.Random(20261201)
    events = ["tuner"] * KILLS + ["server"] * SERVER_KILLS
    rng.shuffle(events)
    exits: list[int] = []
    done = Counter[str]()
    tuner: Tuner | None = None
    mark = 0
    for event in events:
        while True:
            if tuner is None or tuner.proc.poll() is not None:
                if tuner is not None:
                    exits.append(tuner.wait())
                tuner, mark = Tuner(tmp_path, STORM), 0
            pattern = _phase_pattern(rng) if event == "tuner" else r"^trial \d+: (gate|bench)\b"
            found = tuner.wait_line(pattern, after=mark, timeout_s=90)
            if found is None:
                continue  # it stopped by itself (infrastructure faults in a row): start it again
            mark = found + 1
            if event == "tuner":
                time.sleep(rng.uniform(0.0, 0.3))
                tuner.signal(signal.SIGKILL)
                exits.append(tuner.wait())
                tuner = None
            else:
                time.sleep(rng.uniform(0.0, 0.05))
                pids = live_server_pids(tmp_path)
                if not pids:
                    continue  # that trial's server was already gone: take the next one
                os.kill(pids[0], signal.SIGKILL)
            done[event] += 1
            break
    if tuner is not None:
        tuner.signal(signal.SIGKILL)
        exits.append(tuner.wait())
    assert done == Counter(tuner=KILLS, server=SERVER_KILLS)
    assert exits.count(-signal.SIGKILL) >= KILLS
    assert set(exits) <= {-signal.SIGKILL, 3}, exits  # 3: stopped after infrastructure faults in a row
    before = study_facts(tmp_path).complete
    finish(tmp_path, before + 2)
    facts = check_invariants(tmp_path, complete=before + 2)
    infra = [r for r in facts.rows if r[1] == "infra_error"]
    # a death from outside blamed under any of the names a stage's failure can take
    blamed_as = ("crashed", "crashed_during_bench", "gate_error", "bench_failed", "bench_errors")
    blamed = [r for r in facts.rows if r[1] in blamed_as]
    assert len(infra) >= 1 and not blamed, "a server killed from outside was blamed on its configuration"
    print(
        f"\nchaos kills: {done['tuner']} tuner SIGKILLs, {done['server']} server SIGKILLs survived; "
        f"{len(facts.states)} trials, {facts.complete} COMPLETE (exact), lost 0, duplicates 0, orphans 0; "
        f"exits {dict(Counter(exits))}"
    )


def test_sigint_and_sigterm_at_any_moment_end_the_run_within_10_s(tmp_path: Path) -> None:
    """20 SIGINT/SIGTERMs at seeded moments: exit 128 + n within 10 s, the trial in flight is interrupted."""
    make_space(tmp_path)
    rng = random.Random(1201)
    interrupted_seen = 0
    for _ in range(SIGNALS):
        sig = rng.choice([signal.SIGINT, signal.SIGTERM])
        tuner = Tuner(tmp_path, STORM)
        wait_until(tuner.handlers_installed, 30, "the stop handler")
        if rng.random() < 0.3:
            time.sleep(rng.uniform(0.0, 1.5))  # start-up, database, first ask: any moment
        else:
            tuner.wait_line(_phase_pattern(rng), timeout_s=60)
            time.sleep(rng.uniform(0.0, 0.3))
        sent = time.monotonic()
        tuner.signal(sig)
        code = tuner.wait(30)
        took = time.monotonic() - sent
        assert code == 128 + sig, f"{sig.name}: exit {code}\n{tuner.output[-2000:]}"
        assert took < 10.0, f"{sig.name}: the run took {took:.1f} s to end"
        facts = study_facts(tmp_path)
        assert facts.count(TrialState.RUNNING) == 0, "a trial was left RUNNING after a graceful stop"
        started = {int(line.split()[1].rstrip(":")) for line in tuner.lines if line.startswith("trial ")}
        told = dict(_told(line) for line in tuner.lines if _told(line) is not None)
        rows = {r[0]: r[1] for r in facts.rows}
        for number in started:
            if told.get(number, "interrupted") == "interrupted":  # in flight when the stop came
                assert rows.get(number) == "interrupted", f"trial {number} in flight: row {rows.get(number)}"
                assert facts.states[number] is TrialState.FAIL
                interrupted_seen += 1
            elif number in rows:
                said = told[number]
                assert rows[number] == said, f"trial {number}: said {said}, row {rows[number]}"
        assert not sim_processes(tmp_path), "a stop left a server running"
    before = study_facts(tmp_path).complete
    finish(tmp_path, before + 2)
    facts = check_invariants(tmp_path, complete=before + 2)
    print(
        f"\nchaos signals: {SIGNALS} SIGINT/SIGTERM, all exit 128 + n within 10 s; {interrupted_seen} trials "
        f"recorded interrupted; {facts.complete} COMPLETE (exact), orphans 0"
    )


def _told(line: str) -> tuple[int, str] | None:
    """(trial number, outcome) of a plain-output line announcing how a trial ended, else None."""
    parts = line.split()
    if len(parts) >= 3 and parts[0] == "trial" and parts[2] in {o.value for o in Outcome}:
        return int(parts[1].rstrip(":")), parts[2]
    return None


def test_four_workers_share_one_sqlite_file(tmp_path: Path) -> None:
    """Four workers, one study, one file: exactly the budget, no launch twice at once."""
    make_space(tmp_path)
    workers = [Tuner(tmp_path, 8) for _ in range(4)]
    codes = [w.wait(240) for w in workers]
    assert codes == [0, 0, 0, 0], [w.output[-1500:] for w in workers]
    facts = check_invariants(tmp_path, complete=8)
    print(f"\nchaos workers: 4 workers, {facts.complete} COMPLETE (exact), {len(facts.rows)} launches")


PATCH_PORT = """
import socket, sys
import tuner.session
held = int(sys.argv[1])
tuner.session.free_port = lambda host="127.0.0.1": held
sys.argv[1:2] = []
from tuner.cli import main
raise SystemExit(main(sys.argv[1:]))
"""


def test_a_port_held_by_another_process_backs_off_and_stops(tmp_path: Path) -> None:
    """Every launch finds its port taken: 3 infrastructure faults with backoff, then exit 3; resumable."""
    make_space(tmp_path)
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        tuner = Tuner(tmp_path, 4, prefix=["-c", PATCH_PORT, str(port)])
        code = tuner.wait(60)
    finally:
        holder.close()
    assert code == 3, tuner.output[-2000:]
    last = [line for line in tuner.lines if line.strip()][-1]
    assert last.startswith("error: stopped after 3 infrastructure failures in a row") and str(port) in last
    facts = study_facts(tmp_path)
    assert facts.count(TrialState.FAIL) == 3 and facts.complete == 0, "infrastructure faults must not spin"
    assert [r[1] for r in facts.rows] == ["infra_error"] * 3
    finish(tmp_path, 2)  # the port is free again: the same command resumes the study
    check_invariants(tmp_path, complete=2)


def test_a_deleted_database_stops_the_run_loudly(tmp_path: Path) -> None:
    make_space(tmp_path)
    tuner = Tuner(tmp_path, STORM)
    tuner.wait_line(r"^trial 1: gate\b", timeout_s=60)
    (tmp_path / "exp.db").unlink()
    code = tuner.wait(60)
    assert code == 1, tuner.output[-2000:]
    last = [line for line in tuner.lines if line.strip()][-1]
    assert last.startswith("error: experiments database ") and str(tmp_path / "exp.db") in last, last
    assert "was deleted" in last and "launches finished" not in tuner.output
    assert not sim_processes(tmp_path) and not live_server_pids(tmp_path)


def test_a_replaced_database_stops_the_run_loudly(tmp_path: Path) -> None:
    make_space(tmp_path)
    tuner = Tuner(tmp_path, STORM)
    tuner.wait_line(r"^trial 1: gate\b", timeout_s=60)
    sqlite3.connect(tmp_path / "other.db").close()
    os.replace(tmp_path / "other.db", tmp_path / "exp.db")
    code = tuner.wait(60)
    last = [line for line in tuner.lines if line.strip()][-1]
    assert code == 1 and "was replaced" in last and str(tmp_path / "exp.db") in last, tuner.output[-2000:]


FULL_DISK = """
import resource, sys
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1])))
sys.argv[1:2] = []
from tuner.cli import main
raise SystemExit(main(sys.argv[1:]))
"""


def test_a_full_disk_stops_the_run_and_the_next_start_agrees_with_optuna(tmp_path: Path) -> None:
    """Writes fail mid-study (file size limit): one line naming the database, then a clean resume."""
    make_space(tmp_path)
    Tuner(tmp_path, 1).wait(60)  # the database exists and holds one trial
    size = (tmp_path / "exp.db").stat().st_size
    tuner = Tuner(tmp_path, STORM, prefix=["-c", FULL_DISK, str(size + 64 * 1024)])
    code = tuner.wait(120)
    assert code == 1, tuner.output[-2000:]
    last = [line for line in tuner.lines if line.strip()][-1]
    assert last.startswith("error: experiments database") and "exp.db" in last, tuner.output[-2000:]
    assert "Traceback" not in tuner.output
    before = study_facts(tmp_path).complete
    finish(tmp_path, before + 1)
    check_invariants(tmp_path, complete=before + 1)


HOG = "import os\nos.nice(0)\nwhile True:\n    pass\n"


def test_a_busy_machine_is_noisy_not_an_infrastructure_fault(tmp_path: Path) -> None:
    """CPU hogs beside the benchmark: trials are measured (maybe marked noisy), never infra_error."""
    make_space(tmp_path, replace={"{concurrency: 4, num_prompts: 8}": "{concurrency: 4, num_prompts: 96}"})
    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(2 * (os.cpu_count() or 1))]
    try:
        tuner = Tuner(tmp_path, 3)
        code = tuner.wait(240)
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait()
    assert code == 0, tuner.output[-2000:]
    facts = check_invariants(tmp_path, complete=3)
    outcomes = [r[1] for r in facts.rows]
    assert "infra_error" not in outcomes, outcomes
    noisy = sum(1 for a in facts.attrs.values() if a.get("warning"))
    print(f"\nchaos busy machine: {len(hogs)} CPU hogs, outcomes {outcomes}, {noisy} marked noisy")
