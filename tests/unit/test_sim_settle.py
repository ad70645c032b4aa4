"""An idle simulated scheduler lets a burst land before its first batch (virtual time, no real sleeps):
its front end parses requests slower than SGLang's, and a burst must not trickle into small batches."""

from __future__ import annotations

import asyncio
from collections import deque
from types import SimpleNamespace

import pytest

from tuner.sim import engine
from tuner.sim.sched import WAKE_S


def _settle_with(monkeypatch: pytest.MonkeyPatch, arrivals_per_wake: list[int]) -> tuple[float, int]:
    """Run Engine._settle while `arrivals_per_wake[i]` requests land during its i-th wait; (virtual
    seconds it waited, requests waiting when it returned)."""
    clock = SimpleNamespace(now=0.0)
    fake = SimpleNamespace(waiting=deque([object()]))  # the arrival that woke it
    schedule = list(arrivals_per_wake)

    async def sleep(dt: float) -> None:
        clock.now += dt
        for _ in range(schedule.pop(0) if schedule else 0):
            fake.waiting.append(object())

    monkeypatch.setattr(engine.asyncio, "sleep", sleep)
    loop = SimpleNamespace(time=lambda: clock.now)
    asyncio.run(engine.Engine._settle(fake, loop))  # type: ignore[arg-type]
    return clock.now, len(fake.waiting)


def test_a_lone_request_starts_after_one_wake_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    waited, waiting = _settle_with(monkeypatch, [0, 0, 0])
    assert waited == pytest.approx(WAKE_S) and waiting == 1


def test_a_burst_is_waited_for_until_it_stops_landing(monkeypatch: pytest.MonkeyPatch) -> None:
    waited, waiting = _settle_with(monkeypatch, [4, 5, 6, 3, 1, 0])
    assert waiting == 1 + 4 + 5 + 6 + 3 + 1  # the straggler after the burst landed too
    assert waited == pytest.approx(5 * WAKE_S)


def test_a_steady_trickle_does_not_hold_the_first_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    waited, _ = _settle_with(monkeypatch, [1] * 100)  # one arrival per interval: a steady load
    assert waited == pytest.approx(WAKE_S)


def test_an_endless_burst_is_waited_for_at_most_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    waited, _ = _settle_with(monkeypatch, [3] * 1000)
    assert engine.SETTLE_MAX_S <= waited <= engine.SETTLE_MAX_S + WAKE_S
