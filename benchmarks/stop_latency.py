"""How fast `bench` and `gate` end after a stop signal while the server stalls (tests/support/faultserver.py).

For each (fault, command, signal) the command is started against a fault server, signalled once it
has asked the server, and timed from the signal to its exit; prints the median and the spread
(min-max) over the runs, and the exit codes seen (128 + n expected). The target: within 2 s.

    PYTHONPATH=. .venv/bin/python benchmarks/stop_latency.py [--reps 5]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support.faultserver import FaultServer  # noqa: E402

CASES = [
    ("trickle_models", "bench", signal.SIGTERM),
    ("trickle_headers", "bench", signal.SIGHUP),
    ("sse_comments", "bench", signal.SIGINT),
    ("sse_blank", "bench", signal.SIGQUIT),
    ("trickle_models", "gate", signal.SIGTERM),
    ("trickle_headers", "gate", signal.SIGUSR1),
]


def one(fault: str, command: str, sig: signal.Signals, folder: Path) -> tuple[float, int]:
    with FaultServer(fault) as server:
        extra = ["--num-prompts", "2", "--concurrency", "2", "--no-flush"] if command == "bench" else []
        if fault in ("sse_comments", "sse_blank"):
            extra += ["--model", "fault-model"]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen(
            [sys.executable, "-m", "tuner", command, "--url", server.url, *extra],
            cwd=folder,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while server.hits == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.5)  # inside the stalled read
        proc.send_signal(sig)
        sent = time.monotonic()
        code = proc.wait(120)
        return time.monotonic() - sent, code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="stop-latency-"))
    print(f"{'fault':<16} {'command':<6} {'signal':<8} {'median s':>9} {'min-max s':>13}  exits")
    for fault, command, sig in CASES:
        runs = [one(fault, command, sig, folder) for _ in range(args.reps)]
        took = [t for t, _ in runs]
        codes = sorted({c for _, c in runs})
        print(
            f"{fault:<16} {command:<6} {sig.name:<8} {statistics.median(took):>9.2f} "
            f"{min(took):>6.2f}-{max(took):<6.2f}  {codes} (128+{int(sig)}={128 + int(sig)})"
        )


if __name__ == "__main__":
    main()
