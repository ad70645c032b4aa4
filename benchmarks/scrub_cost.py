"""Cost of scrubbing one server log line of secrets (names, values and shapes: tuner.secrets.scrub).

Prints the median and range over 5 passes of 20,000 SGLang decode-batch lines, with two launch
secrets to hide (none of which is in the lines: the common case).

    PYTHONPATH=. .venv/bin/python benchmarks/scrub_cost.py
"""

from __future__ import annotations

import statistics
import time

from tuner.secrets import scrub

LINES = [
    f"[2026-01-01 00:00:{i % 60:02d} TP0] Decode batch. #running-req: {i % 64}, #token: {i * 37}, "
    f"token usage: 0.{i % 99:02d}, cuda graph: True, "
    f"gen throughput (token/s): {1234.5 + i:.2f}, #queue-req: 0"
    for i in range(20_000)
]
SECRETS = frozenset({"sk-SECRET123xyz", "hf_SECRET456abc"})


def main() -> None:
    runs = []
    for _ in range(5):
        started = time.perf_counter()
        for line in LINES:
            scrub(line, SECRETS)
        runs.append((time.perf_counter() - started) / len(LINES) * 1e6)
    print(
        f"scrub: median {statistics.median(runs):.1f} us per line, range {min(runs):.1f}-{max(runs):.1f} "
        f"(5 passes x {len(LINES):,} lines)"
    )


if __name__ == "__main__":
    main()
