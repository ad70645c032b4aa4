"""How many streamed tokens per second the tiny simulated server delivers to a closed-loop client.

The target (> 2000 output tokens/s at C=32, 64 requests of 64 tokens, graphs up to bs 32) is a speed
figure of this machine as much as of the simulator, so it lives here, not in the tests (a busy
machine must not fail a test); tests/integration/test_sim_server.py checks the stream's content.

    python benchmarks/sim_sse_rate.py [--runs 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.sim import Sim  # noqa: E402  (the tests' simulator launcher: one process, own session)

TARGET = 2000.0
TINY = ["--model-path", "/models/tiny", "--sim-seed", "1", "--cuda-graph-max-bs", "32"]


async def stream_load(url: str, *, concurrency: int, requests: int, output_len: int) -> tuple[float, int]:
    """Closed-loop streaming load on /v1/completions: (seconds, output tokens by usage)."""
    left = list(range(requests))
    tokens = 0
    limits = httpx.Limits(max_connections=concurrency + 8, max_keepalive_connections=concurrency + 8)
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(60.0, connect=10.0)) as client:

        async def worker() -> None:
            nonlocal tokens
            while left:
                i = left.pop()
                body = {
                    "prompt": [(i * 7 + k) % 1000 for k in range(8)],
                    "max_tokens": output_len,
                    "ignore_eos": True,
                    "stream": True,
                    "stream_options": {"include_usage": True},
                }
                async with client.stream("POST", url + "/v1/completions", json=body) as resp:
                    async for line in resp.aiter_lines():
                        if line.startswith("data: {"):
                            usage = orjson.loads(line[6:]).get("usage")
                            tokens += usage["completion_tokens"] if usage else 0

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return time.perf_counter() - t0, tokens


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    rates = []
    with tempfile.TemporaryDirectory() as tmp:
        sim = Sim(TINY, Path(tmp))
        try:
            sim.wait_ready()
            for _ in range(args.runs):
                seconds, tokens = asyncio.run(
                    stream_load(sim.url, concurrency=32, requests=64, output_len=64)
                )
                rates.append(tokens / seconds)
        finally:
            sim.kill()
    median = statistics.median(rates)
    print(
        f"streamed output tokens/s, C=32, n={len(rates)}: median {median:,.0f} "
        f"({min(rates):,.0f}-{max(rates):,.0f}); target > {TARGET:,.0f}: "
        f"{'met' if median > TARGET else 'MISSED'}"
    )
    return 0 if median > TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
