"""Chaos, third round: every stop signal, and stops while a server stalls.

SIGHUP (the terminal closed), SIGQUIT and SIGUSR1/SIGUSR2 end `run` like SIGTERM: the trial in flight
recorded interrupted, its server stopped, exit 128 + n. `bench` and `gate` against a server that
never finishes an answer (tests/support/faultserver.py) end within seconds of a stop, whatever the
server does, with the same exit code.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from chaos_harness import ROOT, Tuner, make_space, sim_processes, study_facts
from optuna.trial import TrialState
from support.faultserver import FaultServer
from support.sim import poll as wait_until

pytestmark = [pytest.mark.integration, pytest.mark.chaos, pytest.mark.timeout(300)]

STOP_WITHIN_S = 10.0  # the stop is polled every 50 ms; the bound is loose for a busy machine
OTHER_SIGNALS = [signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2]


def _handles(pid: int, sig: int) -> bool:
    """The process has a handler for `sig` (its SigCgt mask), or has ended."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    found = re.search(r"SigCgt:\s*([0-9a-f]+)", status)
    return found is not None and bool(int(found.group(1), 16) & (1 << (sig - 1)))


@pytest.mark.parametrize("sig", OTHER_SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_every_stop_signal_ends_a_run_like_sigterm(tmp_path: Path, sig: signal.Signals) -> None:
    make_space(tmp_path)
    tuner = Tuner(tmp_path, 3)
    wait_until(lambda: _handles(tuner.proc.pid, sig), 30, f"the tuner's {sig.name} handler")
    tuner.wait_line(r"^trial 0: bench\b", timeout_s=120)
    tuner.signal(sig)
    started = time.monotonic()
    code = tuner.wait(60)
    took = time.monotonic() - started
    assert code == 128 + sig, f"{sig.name}: exit {code}\n{tuner.output[-2000:]}"
    assert took < STOP_WITHIN_S, f"{sig.name}: the run took {took:.1f} s to end"
    assert "Traceback" not in tuner.output
    facts = study_facts(tmp_path)
    assert facts.count(TrialState.RUNNING) == 0, "a trial was left RUNNING"
    assert {r[0]: r[1] for r in facts.rows}.get(0) == "interrupted", facts.rows
    assert not sim_processes(tmp_path), f"{sig.name} left a server running"


def _cli(tmp: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "tuner", *args],
        cwd=tmp,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


@pytest.mark.parametrize(
    ("fault", "command", "sig"),
    [
        ("trickle_models", "bench", signal.SIGTERM),
        ("sse_comments", "bench", signal.SIGINT),
        ("trickle_headers", "bench", signal.SIGHUP),
        ("sse_blank", "bench", signal.SIGQUIT),
        ("trickle_models", "gate", signal.SIGTERM),
        ("trickle_headers", "gate", signal.SIGUSR1),
    ],
)
def test_a_stop_ends_bench_and_gate_against_a_stalled_server(
    tmp_path: Path, fault: str, command: str, sig: signal.Signals
) -> None:
    """The server never finishes an answer and every limit is minutes away: only the stop ends it."""
    with FaultServer(fault) as server:
        extra = ["--num-prompts", "2", "--concurrency", "2", "--no-flush"] if command == "bench" else []
        if fault in ("sse_comments", "sse_blank"):
            extra += ["--model", "fault-model"]
        proc = _cli(tmp_path, command, "--url", server.url, *extra)
        wait_until(lambda: _handles(proc.pid, sig) and server.hits > 0, 60, "the command asking the server")
        time.sleep(0.3)  # inside the stalled read
        proc.send_signal(sig)
        started = time.monotonic()
        try:
            out, _ = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        took = time.monotonic() - started
    assert proc.returncode == 128 + sig, out[-2000:]
    assert took < STOP_WITHIN_S, f"{command} took {took:.1f} s to end after {sig.name}"
    assert "Traceback" not in out, out[-2000:]
