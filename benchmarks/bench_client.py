"""Client capacity of the benchmark stage against a compiled fake server (reference bench-metrics §9).

Builds benchmarks/fakeserver (Rust, std only) into its ignored target/ dir,
runs it pinned to CPU 1 and each client run pinned to CPU 0 (taskset, when
the box has ≥ 2 CPUs), and prints, per client and load shape, the median and
spread (min–max) over the runs of:

  µs/ev     client CPU seconds over T0..T1 / content events
  ach %     content events per second / offered (C / ITL)
  TTFT p99 Δ  p99 TTFT − the server's true TTFT (ms)
  ITL p50 Δ   (median ITL − true ITL) / true ITL (%)
  zero-gap  share of ITL gaps < 50 µs (%)
  CPU %     client CPU / wall over T0..T1

Clients: `tuner` (run_benchmark: streams over aiohttp directly, httpx for the
control endpoints), `httpx` (a minimal client over plain httpx with its own
pool, what a benchmark written the obvious way gets) and `aiohttp-ref` (a
minimal aiohttp + iter_any client that starts its whole wave back to back:
the baseline that proves the fake server is not the limit, §9 step 4). The two
minimal clients share the wave and the SSE bookkeeping below; only the
transport differs.
Each run: warmup of C requests, flush, 1 s settle, then N = 3·C measured
requests.

    .venv/bin/python benchmarks/bench_client.py [--reps 3] [--httpx-reps 1]   (≈ 2.5 min; plain httpx is slow)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
FAKE_DIR = ROOT / "fakeserver"
FAKE_BIN = FAKE_DIR / "target" / "release" / "fakeserver"
TTFT_MS = 20.0
SHAPES = ((64, 5.0, 256), (256, 20.0, 128))  # (concurrency, ITL ms, output tokens): 12.8k ev/s offered
TARGETS = (
    "targets: ≤ 30 µs/ev, ≥ 97 % achieved, TTFT p99 Δ ≤ 5 ms (C=64) / 10 ms (C=256),"
    " ITL p50 ±2 %, zero-gap ≤ 2 %, CPU ≤ 70 %"
)


def build_fakeserver() -> Path:
    cargo = shutil.which("cargo")
    if cargo is None:
        sys.exit("cargo not found: needed to build benchmarks/fakeserver")
    subprocess.run([cargo, "build", "--release", "--offline", "--quiet"], cwd=FAKE_DIR, check=True)
    return FAKE_BIN


def pin(cpu: int) -> list[str]:
    if shutil.which("taskset") and (os.cpu_count() or 1) >= 2:
        return ["taskset", "-c", str(cpu)]
    return []


def start_server(itl_ms: float) -> tuple[subprocess.Popen[str], int]:
    cmd = [*pin(1), str(FAKE_BIN), "--port", "0", "--ttft-ms", str(TTFT_MS), "--itl-ms", str(itl_ms)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("LISTENING"):
        proc.kill()
        sys.exit(f"fake server did not start: {line!r}")
    return proc, int(line.split()[1])


def server_stats(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=5) as resp:
        return json.loads(resp.read())  # type: ignore[no-any-return]


# ---------------------------------------------------------------- child side


def child_tuner(port: int, conc: int, tokens: int) -> dict[str, float]:
    from tuner.bench.runner import benchmark
    from tuner.bench.settings import Api, BenchSettings, LoadPoint, RequestTimeouts, Workload

    settings = BenchSettings(
        workload=Workload(input_len=64, output_len=tokens, api=Api.CHAT),
        load_points=(LoadPoint(concurrency=conc, num_prompts=3 * conc),),
        timeouts=RequestTimeouts(stage_deadline_s=240.0),
    )
    res = benchmark(f"http://127.0.0.1:{port}", settings)
    point = res.points[0]
    m = point.metrics
    events = sum(r.content_events for r in point.records)
    return {
        "events": events,
        "duration_s": m.duration_s,
        "cpu_s": point.client_cpu_s or 0.0,
        "ttft_p99_ms": m.ttft.p99_ms,
        "itl_p50_ms": m.itl.median_ms,
        "zero_gap": m.zero_gap_fraction or 0.0,
        "failed": m.failed,
        "client_bound": float(res.client_bound),
        "lag_p99_ms": res.loop_lag_p99_ms or 0.0,
    }


class _Wave:
    """The SSE bookkeeping of a minimal client: content events, TTFTs and gaps."""

    def __init__(self) -> None:
        self.ttfts: list[float] = []
        self.gaps: list[float] = []
        self.count = 0

    async def stream(self, chunks: Any, t0: float) -> None:
        import orjson

        first = prev = None
        buf = b""
        async for chunk in chunks:
            t = time.perf_counter()
            buf += chunk
            *events, buf = buf.split(b"\n\n")
            for ev in events:
                data = ev[6:]
                if data == b"[DONE]":
                    continue
                choices = orjson.loads(data).get("choices")
                if choices and choices[0]["delta"].get("content"):
                    self.count += 1
                    if first is None:
                        first = t
                        self.ttfts.append(t - t0)
                    else:
                        self.gaps.append(t - prev)  # type: ignore[operator]
                    prev = t


def _body(tokens: int) -> bytes:
    import orjson

    return orjson.dumps(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "max_completion_tokens": tokens,
            "stream": True,
        }
    )


async def _measure(one: Any, conc: int) -> dict[str, float]:
    """Warmup wave of C, 1 s settle, then 3·C requests at concurrency C through `one(wave)`."""
    import numpy as np

    await asyncio.gather(*(one(_Wave()) for _ in range(conc)))
    await asyncio.sleep(1.0)
    wave = _Wave()
    sem = asyncio.Semaphore(conc)

    async def limited() -> None:
        async with sem:
            await one(wave)

    cpu0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(limited() for _ in range(3 * conc)))
    dur, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    g = np.asarray(wave.gaps)
    return {
        "events": wave.count,
        "duration_s": dur,
        "cpu_s": cpu,
        "ttft_p99_ms": float(np.percentile(np.asarray(wave.ttfts) * 1e3, 99)),
        "itl_p50_ms": float(np.median(g) * 1e3),
        "zero_gap": float(np.mean(g < 50e-6)),
        "failed": 0,
        "client_bound": 0.0,
        "lag_p99_ms": 0.0,
    }


def child_aiohttp_ref(port: int, conc: int, tokens: int) -> dict[str, float]:
    import aiohttp
    import uvloop

    url, body = f"http://127.0.0.1:{port}/v1/chat/completions", _body(tokens)

    async def main() -> dict[str, float]:
        conn = aiohttp.TCPConnector(limit=conc)
        async with aiohttp.ClientSession(connector=conn, read_bufsize=4 << 20) as session:

            async def one(wave: _Wave) -> None:
                t0 = time.perf_counter()
                async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as resp:
                    await wave.stream(resp.content.iter_any(), t0)

            return await _measure(one, conc)

    return uvloop.run(main())


def child_httpx_ref(port: int, conc: int, tokens: int) -> dict[str, float]:
    import httpx
    import uvloop

    body = _body(tokens)

    async def main() -> dict[str, float]:
        limits = httpx.Limits(max_connections=conc, max_keepalive_connections=conc)
        timeout = httpx.Timeout(60.0, pool=None)
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", limits=limits, timeout=timeout
        ) as client:

            async def one(wave: _Wave) -> None:
                t0 = time.perf_counter()
                headers = {"Content-Type": "application/json"}
                async with client.stream(
                    "POST", "/v1/chat/completions", content=body, headers=headers
                ) as resp:
                    await wave.stream(resp.aiter_raw(), t0)

            return await _measure(one, conc)

    return uvloop.run(main())


# ---------------------------------------------------------------- parent side


def run_child(client: str, port: int, conc: int, tokens: int) -> dict[str, float]:
    cmd = [
        *pin(0),
        sys.executable,
        __file__,
        "--child",
        client,
        "--port",
        str(port),
        "--conc",
        str(conc),
        "--tokens",
        str(tokens),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=300)
    if out.returncode != 0:
        sys.exit(f"client run failed ({client}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def figures(run: dict[str, float], conc: int, itl_ms: float) -> dict[str, float]:
    offered = conc / (itl_ms / 1000.0)
    return {
        "us_per_ev": run["cpu_s"] / max(1, run["events"]) * 1e6,
        "achieved_pct": run["events"] / run["duration_s"] / offered * 100.0,
        "ttft_p99_err_ms": run["ttft_p99_ms"] - TTFT_MS,
        "itl_p50_err_pct": (run["itl_p50_ms"] - itl_ms) / itl_ms * 100.0,
        "zero_gap_pct": run["zero_gap"] * 100.0,
        "cpu_pct": run["cpu_s"] / run["duration_s"] * 100.0,
    }


def summarize(rows: list[dict[str, float]]) -> dict[str, str]:
    out = {}
    for key in rows[0]:
        vals = [r[key] for r in rows]
        med = statistics.median(vals)
        out[key] = f"{med:7.1f} [{min(vals):.1f}–{max(vals):.1f}]" if len(vals) > 1 else f"{med:7.1f}"
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3, help="runs of the tuner client per shape")
    ap.add_argument("--httpx-reps", type=int, default=1, help="runs of the plain-httpx client per shape")
    ap.add_argument("--ref-reps", type=int, default=1, help="runs of the aiohttp reference client per shape")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--conc", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--tokens", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        sys.path.insert(0, str(ROOT.parent))
        child = {"aiohttp-ref": child_aiohttp_ref, "httpx": child_httpx_ref, "tuner": child_tuner}[args.child]
        res = child(args.port, args.conc, args.tokens)
        print(json.dumps(res))
        return

    build_fakeserver()
    started = time.perf_counter()
    print(f"cpus={os.cpu_count()} pinning={'taskset' if pin(0) else 'none'} TTFT={TTFT_MS} ms")
    print(TARGETS)
    header = f"{'client':<12}{'C':>5}{'ITL':>5}  " + "  ".join(
        f"{h:>20}" for h in ("µs/ev", "ach %", "TTFT p99 Δ ms", "ITL p50 Δ %", "zero-gap %", "CPU %")
    )
    print(header)
    for conc, itl_ms, tokens in SHAPES:
        proc, port = start_server(itl_ms)
        try:
            for client, reps in (
                ("tuner", args.reps),
                ("httpx", args.httpx_reps),
                ("aiohttp-ref", args.ref_reps),
            ):
                rows, late = [], []
                for _ in range(reps):
                    run = run_child(client, port, conc, tokens)
                    rows.append(figures(run, conc, itl_ms))
                    stats = server_stats(port)
                    late.append(stats["late_over_1ms"] / max(1, stats["events"]) * 100.0)
                if not rows:
                    continue
                s = summarize(rows)
                cells = "  ".join(f"{s[k]:>20}" for k in s)
                print(f"{client:<12}{conc:>5}{itl_ms:>5g}  {cells}   (server late >1 ms: {max(late):.1f} %)")
        finally:
            proc.terminate()
            proc.wait(timeout=5)
    print(f"matrix took {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
