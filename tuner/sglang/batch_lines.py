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
from collections.abc import Iterable, Sequence

from tuner.config import ServerLoad

_RUNNING = re.compile(r"#running-req: (\d+)")
_NEW_SEQ = re.compile(r"Prefill batch[^#]*#new-seq: (\d+)")
_USAGE = re.compile(r"(?:^|, )(?:full )?token usage: ([\d.]+)")
_RETRACTED = re.compile(r"#retracted_reqs: (\d+)")


def running_requests(lines: Iterable[str]) -> int | None:
    """The most requests the scheduler's batch lines show running at once; None without such a line."""
    most: int | None = None
    for line in lines:
        running = _RUNNING.search(line)
        if running is None:
            continue
        count = int(running.group(1))
        new = _NEW_SEQ.search(line)
        if new is not None:
            count += int(new.group(1))
        most = count if most is None else max(most, count)
    return most


def server_load(lines: Sequence[str], *, complete: bool = True) -> ServerLoad | None:
    """The scheduler's peak batch, peak KV-pool share and retractions over `lines` (a benchmark's);
    None when no batch line is among them. `complete` False: lines were lost before these (a log
    buffer's end), so the retractions are not known."""
    running = running_requests(lines)
    if running is None:
        return None
    usage = [float(m.group(1)) for line in lines for m in _USAGE.finditer(line)]
    retracted = sum(int(m.group(1)) for line in lines for m in _RETRACTED.finditer(line))
    return ServerLoad(
        peak_running=running,
        peak_kv_usage=max(usage) if usage else None,
        retractions=retracted if complete else None,
    )
