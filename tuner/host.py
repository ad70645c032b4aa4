"""This host as the tuner sees it: its name in a study, whether a pid lives, loopback ports.

Generic helpers with no SGLang knowledge, used by the launcher, the store (who wrote a row),
the study (whose worker holds a trial) and the GPU files (whose process holds a GPU).
"""

from __future__ import annotations

import contextlib
import os
import socket
import time

import psutil

from tuner.errors import PortInUseError

HOSTNAME_ENV = "TUNER_HOSTNAME"


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
