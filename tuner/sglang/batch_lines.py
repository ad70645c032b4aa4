"""How many requests SGLang's scheduler ran at once, read from its batch log lines (pure).

Every release logs `Prefill batch, #new-seq: N, ..., #running-req: R, ...` for each prefill
batch (R requests were decoding when N more joined) and `Decode batch, #running-req: R, ...`
every `--decode-log-interval` decode steps. The largest R (+ N) is what the server really
batched: a lower bound, since decode lines are sampled.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_RUNNING = re.compile(r"#running-req: (\d+)")
_NEW_SEQ = re.compile(r"Prefill batch[^#]*#new-seq: (\d+)")


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
