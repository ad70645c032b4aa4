"""How concurrent the gate's burst really was (pure): the check is of batched decode only if it batched.

A burst is sent all at once, but a client kept off the CPU sends and reads its requests one by
one, and the server then decodes them one or two at a time: the "burst" silently becomes a
sequential check, and NaN that shows only in batched decode graphs passes. So the burst's
concurrency is measured twice: on the client (the most requests in flight together, from each
request's send and answer times) and on the server (the most requests its scheduler's batch lines
show running at once, when the log has them: the truth, since the client's view cannot tell a
request sent late from one sent on time). Below the target the burst is tried again, and a gate
whose every try stayed below it is inconclusive (retried as the machine's fault), never passed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

BURST_TRIES = 3  # a starved client recovers between tries more often than not
MIN_SHARE = 0.75  # of the burst that must run at once: a burst drains as its requests finish


def required(target: int) -> int:
    """The concurrency a burst of `target` requests must reach to count as batched."""
    return max(1, math.ceil(MIN_SHARE * target))


def client_overlap(spans: Sequence[tuple[float, float]]) -> int:
    """The most (start, end) intervals open at one instant (an end before a start at a tie)."""
    events = sorted([(t0, 1) for t0, _ in spans] + [(t1, -1) for _, t1 in spans], key=lambda e: (e[0], e[1]))
    most = current = 0
    for _, step in events:
        current += step
        most = max(most, current)
    return most


@dataclass(frozen=True, kw_only=True, slots=True)
class BurstLoad:
    """The concurrency the gate's burst reached: asked, on the client, on the server (None: not logged)."""

    target: int
    client: int
    server: int | None
    tries: int = 1

    @property
    def reached(self) -> int:
        return self.server if self.server is not None else self.client

    @property
    def reached_target(self) -> bool:
        return self.reached >= required(self.target)

    def reason(self) -> str:
        server = "not in its log" if self.server is None else str(self.server)
        return (
            f"inconclusive: the gate's burst of {self.target} reached {self.reached} concurrent requests "
            f"(client overlap {self.client}, server running {server}; needs {required(self.target)}) in "
            f"{self.tries} tries: batched decode was not checked (a busy client sends one by one)"
        )
