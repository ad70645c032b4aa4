"""The stage's dispatch: a wave of starts lets the event loop poll its sockets between sends."""

from __future__ import annotations

import asyncio
from typing import Any

from tuner.bench.client import Flight
from tuner.bench.settings import RequestTimeouts, Workload
from tuner.bench.stage import Stage
from tuner.bench.types import OutputSource, RequestRecord
from tuner.bench.workload import RequestSpec, build_requests


class FakeSender:
    """Records the loop pass in which each request was sent, then finishes after `hold_s`."""

    def __init__(self, passes: list[int], hold_s: float = 0.01) -> None:
        self.passes = passes
        self.sent_in: list[int] = []
        self.hold_s = hold_s

    async def send(self, spec: RequestSpec, flight: Flight, *, label: str, t_queued: float, **_: Any) -> Any:
        self.sent_in.append(self.passes[0])
        await asyncio.sleep(self.hold_s)
        return RequestRecord(
            load_point=label,
            index=spec.index,
            input_tokens_declared=spec.input_tokens,
            input_tokens_server=None,
            output_tokens_requested=spec.output_tokens,
            output_tokens=spec.output_tokens,
            output_source=OutputSource.USAGE,
            success=True,
            t_queued_s=t_queued,
            t_sent_s=t_queued,
        )


async def _dispatch(concurrency: int | None, n: int) -> list[int]:
    """Run n requests and return, per send, the number of loop passes seen before it."""
    loop = asyncio.get_running_loop()
    passes = [0]

    def tick() -> None:  # runs once per loop pass, after that pass's I/O poll
        passes[0] += 1
        loop.call_soon(tick)

    loop.call_soon(tick)
    sender = FakeSender(passes)
    stage = Stage(RequestTimeouts(), None)
    specs = build_requests(Workload(input_len=4, output_len=4), n)
    records = await stage.run_requests(sender, specs, label="c", concurrency=concurrency)  # type: ignore[arg-type]
    assert len(records) == n and all(r.success for r in records)
    return sender.sent_in


def test_a_wave_of_starts_is_spread_over_loop_passes() -> None:
    sent_in = asyncio.run(_dispatch(concurrency=8, n=24))
    first_wave = sent_in[:8]
    assert len(set(first_wave)) == 8  # one start per pass: the sockets are polled in between
    assert len(sent_in) == 24


def test_unbounded_concurrency_also_spreads_its_starts() -> None:
    sent_in = asyncio.run(_dispatch(concurrency=None, n=10))
    assert len(set(sent_in)) == 10
