"""The command surface: parse, call, print. `python -m tuner <command> --help` for each.

Each command module adds its own sub-parsers with a handler (`register(sub)`); this module only
assembles them, sets up logging and turns a `TunerError` into one line and its exit code.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import logging
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from tuner.cli import capacity, probe, profile, study
from tuner.errors import ExitCode, TunerError
from tuner.interrupts import INTERRUPTS
from tuner.store.protocol import StoreOpener

log = logging.getLogger("tuner")


class _Parser(argparse.ArgumentParser):
    """argparse with a usage mistake as one line (`error: ...`) and exit 2, like every other mistake."""

    def error(self, message: str) -> NoReturn:
        self.exit(ExitCode.USAGE, f"error: {self.prog}: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: every command module registers its sub-parsers."""
    parser = _Parser(prog="python -m tuner", description="Tuning experiments for SGLang.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    study.register(sub)
    profile.register(sub)
    probe.register(sub)
    capacity.register(sub)
    return parser


def main(argv: Sequence[str] | None = None, *, stores: StoreOpener | None = None) -> int:
    """Entry point of `python -m tuner`; returns the exit code. `stores`: how every command opens
    its result store (default tuner.store.factory.open_store; tests hand in a FakeStore's)."""
    if sys.stdout is None or sys.stdout.closed:  # started with stdout closed (`>&-`): results would vanish
        _say("error: standard output is closed; run with it open (or redirected to a file)")
        return int(ExitCode.USAGE)
    code = _main(argv, stores)
    try:
        sys.stdout.flush()
    except OSError as exc:  # `> /dev/full`, a closed pipe: one line, not a traceback at exit
        _say(f"error: cannot write the output: {exc.strerror or exc}")
        _quiet_stdout()
        return int(ExitCode.USAGE)
    return code


def _say(line: str) -> None:
    with contextlib.suppress(OSError, ValueError, AttributeError):
        print(line, file=sys.stderr, flush=True)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush at exit has nothing to fail on."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _main(argv: Sequence[str] | None, stores: StoreOpener | None) -> int:
    args = build_parser().parse_args(argv)
    args.stores = stores
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    INTERRUPTS.install()  # the handler only records a stop; commands act on it at safe points
    try:
        code: int = args.handler(args)
        if INTERRUPTS.requested:
            if code != ExitCode.INTERRUPTED:
                print("interrupted", file=sys.stderr)
            return INTERRUPTS.exit_code()
        return int(code or 0)
    except TunerError as exc:
        if INTERRUPTS.requested:  # the stop ended a read, which failed: the stop is what happened
            _say("interrupted")
            return INTERRUPTS.exit_code()
        # one line whatever the cause said (a PostgreSQL error spans several): its lines joined
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        print(f"error: {'; '.join(lines)}", file=sys.stderr)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        _say("interrupted")
        return INTERRUPTS.exit_code()
    except OSError as exc:
        # the machine said no (stdout full or closed, a file where a folder belongs): one line, exit 2
        if exc.errno in (errno.EPIPE, errno.ENOSPC, errno.EBADF) and exc.filename is None:
            _say(f"error: cannot write the output: {exc.strerror or exc}")
            _quiet_stdout()
            return int(ExitCode.USAGE)
        where = f"{exc.filename}: " if exc.filename else ""
        _say(f"error: {where}{exc.strerror or exc}")
        return int(ExitCode.USAGE)
