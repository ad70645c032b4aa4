"""A stop request is only recorded by the handler; it is acted on at safe points, never inside bookkeeping."""

from __future__ import annotations

import signal
import time

import pytest

from tuner.interrupts import Interrupted, Interrupts


def test_the_handler_only_records_the_request() -> None:
    stops = Interrupts()
    stops.handler(signal.SIGTERM, None)  # no exception: an event loop or a callback cannot swallow it
    assert stops.requested and stops.count == 1 and stops.signum == signal.SIGTERM


def test_a_safe_point_raises_once_a_stop_was_asked() -> None:
    stops = Interrupts()
    stops.check()  # nothing asked: nothing happens
    stops.handler(signal.SIGINT, None)
    with pytest.raises(Interrupted, match="SIGINT"):
        stops.check()
    with pytest.raises(KeyboardInterrupt):  # Interrupted is a KeyboardInterrupt: old handlers still work
        stops.check()


def test_no_safe_point_inside_bookkeeping() -> None:
    stops = Interrupts()
    done = []
    with stops.deferred():
        stops.handler(signal.SIGTERM, None)
        stops.check()  # held: the trial is recorded whole
        with stops.deferred():
            stops.check()
        done.append("recorded")
        assert stops.pending
    assert done == ["recorded"]
    with pytest.raises(Interrupted):
        stops.check()


def test_bounded_waits_end_early_on_a_request() -> None:
    stops = Interrupts()
    assert stops.nap(0.01) is False
    stops.handler(signal.SIGINT, None)
    started = time.monotonic()
    assert stops.nap(30.0) is True
    with pytest.raises(Interrupted):
        stops.wait(30.0)
    assert time.monotonic() - started < 1.0
    stops.clear()
    assert not stops.requested
