"""The stand-in's log handler: every line on stderr with SGLang's prefixes (`[time TP0] ` for the
scheduler's loggers, `[time] ` for the main process, bare for uvicorn-style lines)."""

from __future__ import annotations

import logging
import sys

from tuner.sim import logfmt
from tuner.sim.resolve import Launch

SCHEDULER_LOGGERS = ("tuner.sim.child", "tuner.sim.engine")


class _Formatter(logging.Formatter):
    """`[time TP0] msg` for scheduler loggers, `[time] msg` for the rest, bare for uvicorn-style lines."""

    def __init__(self, scheduler_prefix: str) -> None:
        super().__init__()
        self._prefix = scheduler_prefix

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if getattr(record, "bare", False):
            return message
        prefix = self._prefix if record.name in SCHEDULER_LOGGERS else ""
        return logfmt.stamp(prefix, record.created) + message


def configure_logging(launch: Launch) -> None:
    """Route the tuner.sim loggers to stderr in SGLang's format (aiohttp's own lines silenced)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter("TP0" if launch.tp_size > 1 else ""))
    root = logging.getLogger("tuner.sim")
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    root.propagate = False
    logging.getLogger("aiohttp").setLevel(logging.ERROR)
