"""Ctrl-C and SIGTERM: interrupt trial work at once, but never in the middle of bookkeeping.

The handler raises KeyboardInterrupt, except inside `deferred()` blocks (writing
a result to the store and to Optuna), where it only remembers the request and
raises as the block ends, so a trial is either fully recorded or not at all.
A second signal while deferred still waits for the block: bookkeeping takes
milliseconds.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType


class Interrupts:
    """The process's stop requests."""

    def __init__(self) -> None:
        self._depth = 0
        self.pending = False
        self.count = 0

    def handler(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        if self._depth:
            self.pending = True
            return
        raise KeyboardInterrupt

    def install(self) -> None:
        """Handle SIGINT and SIGTERM (also when started with SIGINT ignored, as a background job)."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, self.handler)
            signal.signal(signal.SIGTERM, self.handler)

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """Hold a stop request until the block is done, then raise it."""
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
        if not self._depth and self.pending:
            self.pending = False
            raise KeyboardInterrupt


INTERRUPTS = Interrupts()
