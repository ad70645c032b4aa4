"""Stop requests wait for bookkeeping to finish, and interrupt everything else at once."""

from __future__ import annotations

import pytest

from tuner.interrupts import Interrupts


def test_a_request_outside_bookkeeping_interrupts_at_once() -> None:
    stops = Interrupts()
    with pytest.raises(KeyboardInterrupt):
        stops.handler(2, None)


def test_a_request_during_bookkeeping_waits_for_the_block_to_finish() -> None:
    stops = Interrupts()
    done = []
    with pytest.raises(KeyboardInterrupt), stops.deferred():
        stops.handler(15, None)
        done.append("recorded")  # still runs: the stop is held
    assert done == ["recorded"] and not stops.pending and stops.count == 1


def test_nested_blocks_raise_only_when_the_outermost_ends() -> None:
    stops = Interrupts()
    steps = []
    with pytest.raises(KeyboardInterrupt), stops.deferred():
        with stops.deferred():
            stops.handler(2, None)
        steps.append("after inner")
    assert steps == ["after inner"]
