"""Ctrl-C, SIGTERM and every other stop signal: the handler records the request; the work stops at
safe points.

SIGHUP (the terminal closed), SIGQUIT and SIGUSR1/SIGUSR2 are stop requests too (`STOP_SIGNALS`):
their default action would kill the tuner on the spot and leave the trial's servers running. Each
ends the run like SIGTERM (servers stopped, the trial recorded interrupted) and the process exits
128 + the signal's number, as a shell reports a death by that signal (`exit_code()`).

The handler does nothing but remember the signal (no exception, no lock, no I/O):
an exception raised inside a signal handler lands wherever the main thread
happens to be, and an event loop or a weakref callback may swallow it. The code
asks instead, at points where stopping is safe:

- `check()` raises `Interrupted` (a KeyboardInterrupt) when a stop was asked; the
  trial calls it between its phases and while it waits for a server;
- `requested` is polled by the gate and the benchmark (they cancel their asyncio
  tasks) and by the study loop before it asks for the next trial;
- inside `deferred()` blocks (writing a result to the store and to Optuna)
  `check()` does nothing, so a trial is either fully recorded or not at all.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, TypeVar

T = TypeVar("T")

POLL_S = 0.05  # how often a bounded wait looks at the request
STOP_SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name)
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")
    if hasattr(signal, name)
)
STOP_EXIT_CODES = frozenset(128 + int(s) for s in STOP_SIGNALS)


class Interrupted(KeyboardInterrupt):
    """Raised at a safe point after a stop signal (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1/2)."""


class Interrupts:
    """The process's stop requests."""

    def __init__(self) -> None:
        self._depth = 0
        self.signum: int | None = None
        self.count = 0

    def handler(self, signum: int, frame: FrameType | None) -> None:
        """Record the request: nothing else may happen inside a signal handler."""
        self.count += 1
        self.signum = signum

    @property
    def requested(self) -> bool:
        """A stop was asked (and not yet cleared)."""
        return self.signum is not None

    @property
    def pending(self) -> bool:
        """A stop was asked while bookkeeping was running; it is acted on at the next safe point."""
        return self.requested and self._depth > 0

    def check(self) -> None:
        """A safe point: raise Interrupted if a stop was asked, unless inside a `deferred()` block."""
        if self.signum is not None and not self._depth:
            raise Interrupted(signal.Signals(self.signum).name)

    def wait(self, seconds: float) -> None:
        """Sleep up to `seconds`, ending early (Interrupted) when a stop is asked."""
        deadline = time.monotonic() + seconds
        while True:
            self.check()
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(POLL_S, left))

    def blocking(self, fn: Callable[[], T]) -> T:
        """`fn()` run in a helper thread, so a stop request ends the wait within POLL_S even while `fn`
        blocks in C (a database another process holds locked): Interrupted is raised here and the
        helper, a daemon, ends with the process."""
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["value"] = fn()
            except BaseException as exc:  # noqa: BLE001 - handed to the caller below
                box["error"] = exc

        helper = threading.Thread(target=target, daemon=True, name="blocking")
        helper.start()
        while helper.is_alive():
            helper.join(POLL_S)
            self.check()
        if "error" in box:
            raise box["error"]
        value: T = box["value"]
        return value

    def nap(self, seconds: float) -> bool:
        """Sleep up to `seconds`, returning early (True) when a stop is asked; never raises."""
        deadline = time.monotonic() + seconds
        while not self.requested:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(POLL_S, left))
        return True

    def exit_code(self, default: int = 130) -> int:
        """128 + the number of the signal that asked the stop (`default` when none did)."""
        return 128 + self.signum if self.signum is not None else default

    def clear(self) -> None:
        """Forget a request (tests, and a command that has acted on it)."""
        self.signum = None
        self.count = 0

    def install(self) -> None:
        """Handle every stop signal (also when started with SIGINT ignored, as a background job)."""
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                signal.signal(sig, self.handler)

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """Bookkeeping: `check()` does not raise inside the block; a request waits for the next safe point."""
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1


INTERRUPTS = Interrupts()
