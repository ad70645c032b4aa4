"""Chaos, second round: a full runs/ disk, a SIGKILLed worker beside a live one, a frozen server.

Same rules as test_chaos.py: real `python -m tuner run` processes, faults at points found from
output lines, invariants afterwards (no trial RUNNING, no server left, the baseline measured).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from chaos_harness import STUDY, Tuner, check_invariants, make_space, study_facts
from support.sim import poll as wait_until

pytestmark = [pytest.mark.integration, pytest.mark.chaos, pytest.mark.timeout(300)]

BASELINE = {"mem-fraction-static": 0.8, "cuda_graph": "off", "chunked-prefill-size": None}


@pytest.fixture
def tiny_runs_disk(tmp_path: Path):
    """runs/ on a 64 KiB tmpfs (root only: mounting needs it), unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system for runs/ needs root")
    runs = tmp_path / "runs"
    runs.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(runs)], check=False)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield runs
    finally:
        subprocess.run(["umount", "-l", str(runs)], check=False)


def test_a_full_runs_disk_is_the_machines_fault_and_the_baseline_is_measured_after_it(
    tmp_path: Path, tiny_runs_disk: Path
) -> None:
    make_space(tmp_path)
    filler = tiny_runs_disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:  # fill it: every log, record and state file now fails to write
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    tuner = Tuner(tmp_path, 2)
    code = tuner.wait(120)
    out = tuner.output
    assert code == 3, out[-3000:]  # infrastructure faults in a row stop the run, resumable
    assert "Traceback" not in out and "No space left on device" in out, out[-3000:]
    assert "not retrying" not in out
    facts = study_facts(tmp_path)
    assert all(s.name != "RUNNING" for s in facts.states.values()), facts.states
    assert {o for _, o, *_ in facts.rows} == {"infra_error"}, facts.rows  # never blamed on the config
    filler.unlink()  # the disk has room again: the same command resumes and measures the baseline
    resumed = Tuner(tmp_path, 2)
    assert resumed.wait(120) == 0, resumed.output[-3000:]
    facts = check_invariants(tmp_path, complete=2)
    measured = [n for n, o, *_ in facts.rows if o == "ok"]
    assert any(facts.attrs[n].get("retry_reason") == "infra_error" for n in measured), facts.attrs
    assert STUDY in resumed.output


def test_a_worker_sigkilled_in_its_gate_leaves_no_server_behind_the_survivor(tmp_path: Path) -> None:
    """Two workers on one host and one study; one dies in its gate: the survivor stops its server
    before launching on that GPU, finishes the budget, and nothing is left running."""
    make_space(tmp_path)
    victim, survivor = Tuner(tmp_path, 4), Tuner(tmp_path, 4)
    victim.wait_line(r"^trial \d+: gate", timeout_s=60)
    victim.signal(signal.SIGKILL)
    victim.wait(30)
    assert survivor.wait(120) == 0, survivor.output[-3000:]
    assert "launching anyway" not in survivor.output, survivor.output[-3000:]
    facts = check_invariants(tmp_path, complete=4)  # no server, no live record, nothing RUNNING
    assert any(a.get("retry_reason") == "worker died" for a in facts.attrs.values()), facts.attrs


def test_a_server_frozen_in_the_benchmark_is_a_hang_and_the_study_goes_on(tmp_path: Path) -> None:
    """SIGSTOP of the server during the benchmark: the trial is a hang (a result), the frozen
    server is killed, the next trials are measured."""
    make_space(
        tmp_path,
        replace={
            "  scenario: tiny-fast\n": '  scenario: tiny-fast\n  sim_inject: ["freeze_at=bench"]\n',
            "idle_read: 5s": "idle_read: 0.5s",
            "first_byte: 5s": "first_byte: 0.5s",
            "sigint_grace: 2s": "sigint_grace: 0.3s",
            "sigterm_grace: 2s": "sigterm_grace: 0.3s",
        },
    )
    tuner = Tuner(tmp_path, 2)
    assert tuner.wait(120) == 0, tuner.output[-3000:]
    facts = check_invariants(tmp_path, complete=2)
    assert [o for _, o, *_ in facts.rows] == ["hang", "hang"], facts.rows
    assert "no progress on any open request" in tuner.output


LOCKER = """
import sqlite3, sys, time
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
time.sleep(120)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_while_waiting_on_a_locked_database_exits_128_plus_n_within_seconds(
    tmp_path: Path, sig: signal.Signals
) -> None:
    make_space(tmp_path)
    locker = subprocess.Popen(
        [sys.executable, "-c", LOCKER, str(tmp_path / "exp.db")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert locker.stdout is not None and locker.stdout.readline().strip() == "locked"
        tuner = Tuner(tmp_path, 1)
        wait_until(tuner.handlers_installed, 30, "the tuner's stop handler")
        wait_until(lambda: "option table" in tuner.output, 30, "the tuner opening the database")
        tuner.signal(sig)
        started = time.monotonic()
        code = tuner.wait(30)
        assert code == 128 + sig, tuner.output[-2000:]
        # waiting for the lock takes the busy timeout (60 s); a loaded 2-core machine took 5.0 s to exit
        assert time.monotonic() - started < 15, "the stop waited for the lock"
        assert "Traceback" not in tuner.output
    finally:
        locker.kill()
        locker.wait()
