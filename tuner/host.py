"""This host as the tuner sees it: its name in a study, whether a pid lives, loopback ports, how
much other work keeps a process from a CPU.

Generic helpers with no SGLang knowledge, used by the launcher, the store (who wrote a row),
the study (whose worker holds a trial), the GPU files (whose process holds a GPU) and the
benchmark's self-check.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import psutil

from tuner.errors import PortInUseError

HOSTNAME_ENV = "TUNER_HOSTNAME"
# Starved: a process (group) waited in the run queue past this share of its runnable time (the benchmark
# client's self-check default, and the launch watchdogs' threshold)
STARVED_WAIT_SHARE = 0.2


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS says is free on `host` right now."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_is_free(host: str, port: int) -> bool:
    """True when nothing listens on host:port (a bind would succeed)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def ensure_port_free(host: str, port: int) -> None:
    """Raise PortInUseError naming the holder when host:port is taken."""
    if port_is_free(host, port):
        return
    holder = ""
    with contextlib.suppress(psutil.Error, OSError):
        for conn in psutil.net_connections(kind="tcp"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
                proc = psutil.Process(conn.pid)
                holder = f" (held by pid {conn.pid}: {' '.join(proc.cmdline())[:120]})"
                break
    raise PortInUseError(f"port {host}:{port} is already in use{holder}")


def wait_port_free(host: str, port: int, timeout_s: float) -> bool:
    """Poll until host:port can be bound again; False on timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        if port_is_free(host, port):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def pid_alive(pid: int) -> bool:
    """True for an existing process that is not a zombie (one we may not look inside counts as alive)."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True
    except psutil.Error:
        return False


def host_name() -> str:
    """This worker's host identity in a study: $TUNER_HOSTNAME if set, else the system's host name.

    Trials and rows carry it; a worker reaps by pid only the trials of its own host, so two
    workers that share a host name must share a process table (and a run directory).
    """
    return os.environ.get(HOSTNAME_ENV) or socket.gethostname()


def task_schedstat(pid: int | str, tid: int) -> tuple[int, int] | None:
    """(ns on a CPU, ns runnable but waiting in the run queue) of one thread of a process ("self" for
    this one), or None where Linux does not say (no schedstats, gone, another OS)."""
    try:
        with open(f"/proc/{pid}/task/{tid}/schedstat", encoding="ascii") as fh:
            run_ns, wait_ns, *_ = fh.read().split()
        return int(run_ns), int(wait_ns)
    except (OSError, ValueError):
        return None


@dataclass(frozen=True, kw_only=True, slots=True)
class CpuPressure:
    """How much the host kept a group of processes from running, and how loaded it was."""

    wait_share: float  # run-queue wait / (run + wait), summed over the group's threads over a window
    load_per_cpu: float  # the 1-minute load average over the CPUs this process may use

    def starved(self, wait_share: float = STARVED_WAIT_SHARE) -> bool:
        """Other work kept the group waiting: past `wait_share` of its runnable time and more runnable
        tasks than CPUs (a group that crowds its own threads onto few CPUs is not starved by the host)."""
        return self.wait_share > wait_share and self.load_per_cpu > 1.0

    def describe(self) -> str:
        return (
            f"its processes waited for a CPU {100 * self.wait_share:.0f}% of the time they could run, "
            f"load average {self.load_per_cpu:.1f} per CPU"
        )


def group_schedstat(pids: Iterable[int]) -> tuple[int, int] | None:
    """(ns on a CPU, ns waiting in the run queue) summed over every thread of `pids` (each over its life),
    or None where Linux reports no thread of them."""
    run = wait = 0
    seen = False
    for pid in pids:
        with contextlib.suppress(OSError):
            for tid in os.listdir(f"/proc/{pid}/task"):
                got = task_schedstat(pid, int(tid)) if tid.isdigit() else None
                if got is not None:
                    seen = True
                    run, wait = run + got[0], wait + got[1]
    return (run, wait) if seen else None


def load_per_cpu() -> float:
    """The 1-minute load average over the CPUs this process may use."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return os.getloadavg()[0] / max(1, cpus)


class CpuWatch:
    """The run-queue wait of a process group over the last WINDOW_S seconds, from samples taken as it
    runs: a group asleep (hung) asks for no CPU and is never starved, however loaded the host."""

    WINDOW_S = 30.0  # the stretch before a verdict that is judged
    MIN_WINDOW_S = 10.0  # shorter stretches are start-up cost, not a state of the host
    MIN_DEMAND = 0.25  # runnable CPU-seconds per second the group must have wanted over the window
    EVERY_S = 2.0

    def __init__(
        self,
        pids: Callable[[], Iterable[int]],
        read: Callable[[Iterable[int]], tuple[int, int] | None] = group_schedstat,
        load: Callable[[], float] = load_per_cpu,
    ) -> None:
        self._pids, self._read, self._load = pids, read, load
        self._marks: deque[tuple[float, int, int]] = deque()

    def sample(self, now: float, *, always: bool = False) -> None:
        """Record the group's figures now (at most every EVERY_S unless `always`)."""
        last = self._marks[-1][0] if self._marks else None
        if last is not None and (now <= last or (now - last < self.EVERY_S and not always)):
            return
        got = self._read(self._pids())
        if got is None:
            return
        self._marks.append((now, *got))
        while len(self._marks) > 2 and now - self._marks[1][0] >= self.WINDOW_S:
            self._marks.popleft()

    def pressure(self, now: float) -> CpuPressure | None:
        """The window's figures, or None: too short a window, a group that wanted little CPU, no figures."""
        self.sample(now, always=True)
        if len(self._marks) < 2:
            return None
        (t0, run0, wait0), (t1, run1, wait1) = self._marks[0], self._marks[-1]
        span = t1 - t0
        run, wait = max(0, run1 - run0), max(0, wait1 - wait0)
        if span < self.MIN_WINDOW_S or (run + wait) / 1e9 < self.MIN_DEMAND * span:
            return None
        return CpuPressure(wait_share=wait / (run + wait), load_per_cpu=self._load())
