"""What SGLang's scheduler did, read from its batch log lines (pure).

Every release logs `Prefill batch, #new-seq: N, ..., token usage: U, #running-req: R, ...` for each
prefill batch (R requests were decoding when N more joined) and `Decode batch, #running-req: R,
#token: T, token usage: U, ...` every `--decode-log-interval` decode steps (hybrid models: `full
token usage`), and `KV cache pool is full. Retract requests. #retracted_reqs: K, ...` when decode
runs out of KV cache. The largest R (+ N) is what the server really batched and the largest U the
most of its KV pool in use: lower bounds, since decode lines are sampled.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from tuner.config import ServerLoad

_RUNNING = re.compile(r"#running-req: (\d+)")
_NEW_SEQ = re.compile(r"Prefill batch[^#]*#new-seq: (\d+)")
_USAGE = re.compile(r"(?:^|, )(?:full )?token usage: ([\d.]+)")
_RETRACTED = re.compile(r"#retracted_reqs: (\d+)")


def running_requests(lines: Iterable[str]) -> int | None:
    """The most requests the scheduler's batch lines show running at once; None without such a line."""
    load = server_load(lines)
    return None if load is None else load.peak_running


@dataclass(kw_only=True, slots=True)
class LoadMeter:
    """The scheduler's load over the lines given to it one at a time, as they arrive (a server's
    reader thread keeps one per benchmark, so no line is lost to a bounded buffer)."""

    peak_running: int | None = None
    peak_kv_usage: float | None = None
    retractions: int = 0

    def add(self, line: str) -> None:
        running = _RUNNING.search(line)
        if running is not None:
            count = int(running.group(1))
            new = _NEW_SEQ.search(line)
            count += int(new.group(1)) if new is not None else 0
            self.peak_running = count if self.peak_running is None else max(self.peak_running, count)
        for m in _USAGE.finditer(line):
            usage = float(m.group(1))
            self.peak_kv_usage = usage if self.peak_kv_usage is None else max(self.peak_kv_usage, usage)
        self.retractions += sum(int(m.group(1)) for m in _RETRACTED.finditer(line))

    def load(self) -> ServerLoad | None:
        """What the lines showed; None when no batch line was among them."""
        if self.peak_running is None:
            return None
        return ServerLoad(
            peak_running=self.peak_running, peak_kv_usage=self.peak_kv_usage, retractions=self.retractions
        )


def server_load(lines: Iterable[str]) -> ServerLoad | None:
    """The scheduler's peak batch, peak KV-pool share and retractions over `lines` (a benchmark's);
    None when no batch line is among them."""
    meter = LoadMeter()
    for line in lines:
        meter.add(line)
    return meter.load()
