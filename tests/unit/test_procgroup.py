"""ProcessGroup against real processes: escalation, strays that left the group, ports."""

from __future__ import annotations

import os
import socket
import sys
import time

import psutil
import pytest

from tuner.errors import PortInUseError
from tuner.sglang.process import ProcessGroup, ensure_port_free, free_port, port_is_free

IGNORES_SIGINT_AND_SIGTERM = """
import signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print('ready', flush=True)
time.sleep(60)
"""

SPAWNS_STRAY = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)
print('stray', child.pid, flush=True)
time.sleep(60)
"""


def _wait_for(predicate, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)


def test_stop_escalates_to_sigkill_when_signals_are_ignored() -> None:
    lines: list[str] = []
    argv = [sys.executable, "-c", IGNORES_SIGINT_AND_SIGTERM]
    group = ProcessGroup(argv, env=dict(os.environ), on_line=lines.append)
    _wait_for(lambda: "ready" in lines)
    report = group.stop(sigint_grace_s=0.3, sigterm_grace_s=0.3)
    assert report.signals_sent == ("SIGINT", "SIGTERM", "SIGKILL")
    assert report.exit_code == -9
    assert not psutil.pid_exists(group.pid) or psutil.Process(group.pid).status() == psutil.STATUS_ZOMBIE


def test_stop_sweeps_a_descendant_that_left_the_group() -> None:
    lines: list[str] = []
    group = ProcessGroup([sys.executable, "-c", SPAWNS_STRAY], env=dict(os.environ), on_line=lines.append)
    _wait_for(lambda: any(line.startswith("stray") for line in lines))
    stray = int(next(line for line in lines if line.startswith("stray")).split()[1])
    assert os.getpgid(stray) != group.pgid
    group.remember_descendants()
    report = group.stop(sigint_grace_s=2.0, sigterm_grace_s=2.0)
    assert report.signals_sent[0] == "SIGINT"
    assert stray in report.swept_pids
    _wait_for(lambda: not psutil.pid_exists(stray) or psutil.Process(stray).status() == psutil.STATUS_ZOMBIE)


def test_a_clean_exit_needs_no_signal() -> None:
    lines: list[str] = []
    group = ProcessGroup([sys.executable, "-c", "print('bye')"], env=dict(os.environ), on_line=lines.append)
    assert group.exited.wait(10)
    report = group.stop(sigint_grace_s=1, sigterm_grace_s=1)
    assert report.signals_sent == ()
    assert report.exit_code == 0
    assert lines == ["bye"]


def test_port_checks() -> None:
    port = free_port()
    assert port_is_free("127.0.0.1", port)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        sock.listen()
        assert not port_is_free("127.0.0.1", port)
        with pytest.raises(PortInUseError, match=str(port)):
            ensure_port_free("127.0.0.1", port)
