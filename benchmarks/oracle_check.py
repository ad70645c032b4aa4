"""The oracle against real simulator runs: noise-free throughput within 2 %, every predicted failure seen.

For each checked point of the shipped sim spaces, launch `python -m tuner.sim` with the
point's flags and `--sim-noise 0`, then
  * a predicted startup failure must end the process with its log line;
  * otherwise send the gate's burst (NaN shows as garbage tokens or the NaN log line), then the
    space's benchmark workload (closed loop, token-id prompts, ignore_eos, streaming) and
    compare output tok/s = output tokens / (first dispatch -> last completion) with the oracle;
    a predicted OOM under load must kill the server.

    python benchmarks/oracle_check.py [--quick]       (about 2 minutes; --quick: 4 points)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tuner.sglang.process import free_port  # noqa: E402
from tuner.sim.oracle import Outcome, Prediction, Workload, predict  # noqa: E402
from tuner.sim.spacefile import read_space  # noqa: E402

G = "search_spaces/glm5-nvfp4-sm120-sim.yaml"
H = "search_spaces/dsv32-fp8-h200-sim.yaml"
B = "search_spaces/glm5-nvfp4-b200-tp4-sim.yaml"
SEED_BS = "bs:1,2,4,8,12,16,24,32,40,48,56,64"
POINTS: list[tuple[str, dict[str, Any]]] = [
    (G, {"mem-fraction-static": 0.85, "cuda_graph": "off", "sparse_backends": "trtllm/trtllm"}),
    (G, {"mem-fraction-static": 0.92, "cuda_graph": SEED_BS, "sparse_backends": "trtllm/trtllm"}),
    (G, {"mem-fraction-static": 0.85, "cuda_graph": "off", "sparse_backends": "flashmla_kv/flashmla_kv"}),
    (G, {"mem-fraction-static": 0.88, "cuda_graph": "max:32", "sparse_backends": "trtllm/trtllm"}),
    (G, {"mem-fraction-static": 0.95, "cuda_graph": SEED_BS, "sparse_backends": "trtllm/trtllm"}),
    (H, {"mem-fraction-static": 0.91, "cuda_graph": "max:128", "sparse_backends": "fa3/flashmla_kv"}),
    (H, {"mem-fraction-static": 0.85, "cuda_graph": "off", "sparse_backends": "fa3/flashmla_kv"}),
    (
        H,
        {
            "mem-fraction-static": 0.85,
            "cuda_graph": "max:64",
            "sparse_backends": "flashmla_sparse/flashmla_kv",
        },
    ),
    (
        H,
        {
            "mem-fraction-static": 0.85,
            "cuda_graph": "max:128",
            "sparse_backends": "flashmla_sparse/flashmla_sparse",
        },
    ),
    (
        H,
        {
            "mem-fraction-static": 0.85,
            "cuda_graph": "off",
            "sparse_backends": "flashmla_sparse/flashmla_sparse",
        },
    ),
    (H, {"mem-fraction-static": 0.93, "cuda_graph": "off", "sparse_backends": "flashmla_kv/flashmla_kv"}),
    (H, {"mem-fraction-static": 0.85, "cuda_graph": "max:256", "sparse_backends": "flashmla_kv/flashmla_kv"}),
    (H, {"mem-fraction-static": 0.85, "cuda_graph": "off", "sparse_backends": "trtllm/trtllm"}),
    (
        B,
        {
            "mem-fraction-static": 0.9,
            "cuda_graph": "max:64",
            "sparse_backends": "flashmla_sparse/flashinfer_sparse_mla",
            "chunked-prefill-size": 16384,
        },
    ),
    (
        B,
        {
            "mem-fraction-static": 0.72,
            "cuda_graph": "max:64",
            "sparse_backends": "flashmla_sparse/flashinfer_sparse_mla",
            "chunked-prefill-size": 16384,
        },
    ),
    (
        B,
        {
            "mem-fraction-static": 0.76,
            "cuda_graph": "max:64",
            "sparse_backends": "flashmla_sparse/flashinfer_sparse_mla",
            "chunked-prefill-size": 16384,
        },
    ),
    (
        B,
        {
            "mem-fraction-static": 0.8,
            "cuda_graph": "off",
            "sparse_backends": "trtllm/trtllm",
            "chunked-prefill-size": 8192,
        },
    ),
    (
        B,
        {
            "mem-fraction-static": 0.92,
            "cuda_graph": "max:64",
            "sparse_backends": "trtllm/trtllm",
            "chunked-prefill-size": 16384,
        },
    ),
    (
        B,
        {
            "mem-fraction-static": 0.8,
            "cuda_graph": "max:32",
            "sparse_backends": "flashmla_sparse/flashmla_kv",
            "chunked-prefill-size": 8192,
        },
    ),
]
QUICK = (0, 5, 10, 13)
STARTUP_LINES = {
    Outcome.NOT_ENOUGH_MEMORY: "Not enough memory",
    Outcome.UNSUPPORTED: "Unsupported architecture",
    Outcome.OOM_AT_CAPTURE: "Capture cuda graph failed",
    Outcome.OOM_AT_LOAD: "CUDA out of memory",
}


def _body(i: int, input_len: int, max_tokens: int) -> bytes:
    prompt = [(i * 7 + k) % 1000 + 1 for k in range(input_len)]
    body = {"prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True, "stream": True, "temperature": 0}
    return orjson.dumps(body)


async def _one(session: aiohttp.ClientSession, url: str, body: bytes) -> tuple[int, bool]:
    tokens, garbage = 0, False
    headers = {"Content-Type": "application/json"}
    async with session.post(url + "/v1/completions", data=body, headers=headers) as resp:
        data = b"".join([chunk async for chunk in resp.content.iter_any()])  # parse after the end: less CPU
    for event in data.split(b"\n\n"):
        if event.startswith(b"data: {"):
            text = orjson.loads(event[6:])["choices"][0]["text"]
            if text:
                tokens += 1
                garbage = garbage or "!" in text
    return tokens, garbage


async def closed_loop(
    session: aiohttp.ClientSession, url: str, *, clients: int, requests: int, input_len: int, output_len: int
) -> tuple[float, int, bool]:
    """(seconds from first dispatch to last completion, output tokens, any garbage)."""
    left = [_body(i, input_len, output_len) for i in range(requests)]  # built before T0, as the tuner does
    out = {"tokens": 0, "garbage": False}

    async def worker() -> None:
        while left:
            tokens, garbage = await _one(session, url, left.pop())
            out["tokens"] += tokens
            out["garbage"] = out["garbage"] or garbage

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)), return_exceptions=True)
    return time.perf_counter() - t0, int(out["tokens"]), bool(out["garbage"])


async def gate_then_bench(url: str, workload: Workload) -> tuple[float, int, bool]:
    """The gate's burst, a warmup through every connection, then the measured closed loop."""
    conn = aiohttp.TCPConnector(limit=max(workload.concurrency, workload.gate_burst) + 8)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=600)) as session:
        garbage = False
        if workload.gate_burst:
            burst = workload.gate_burst
            _, _, garbage = await closed_loop(
                session, url, clients=burst, requests=burst, input_len=24, output_len=16
            )
        c = workload.concurrency
        await closed_loop(session, url, clients=c, requests=c, input_len=4, output_len=2)  # open connections
        await asyncio.sleep(0.2)
        seconds, tokens, g2 = await closed_loop(
            session,
            url,
            clients=c,
            requests=workload.num_prompts,
            input_len=workload.input_len,
            output_len=workload.output_len,
        )
        return seconds, tokens, garbage or g2


def _wait_ready(proc: subprocess.Popen[bytes], url: str, log: Path, timeout_s: float = 30) -> bool:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"not ready after {timeout_s}s:\n{log.read_text()[-2000:]}")


def check(space_path: str, point: dict[str, Any], tmp: Path) -> tuple[bool, str, Prediction, float | None]:
    """Run one point; (agrees, description, prediction, measured output tok/s)."""
    space = read_space(ROOT / space_path)
    scenario = space.scenario()
    launch = space.launch(scenario, point)
    workload: Workload = space.workload_for(launch)
    want = predict(scenario, launch, workload)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp / f"sim-{port}.log"
    argv = [
        sys.executable,
        "-m",
        "tuner.sim",
        "--sim-scenario",
        space.scenario_ref,
        "--sim-sglang-version",
        space.version,
        "--sim-noise",
        "0",
        "--sim-seed",
        "1",
        *space.argv(point),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    try:
        up = _wait_ready(proc, url, log)
        if want.outcome.at_startup:
            proc.wait(15)
            seen = STARTUP_LINES.get(want.outcome, "") in log.read_text()
            return (not up and seen), f"startup failure {want.outcome.value} seen: {seen}", want, None
        if not up:
            return False, "died at startup: " + log.read_text()[-300:], want, None
        seconds, tokens, garbage = asyncio.run(gate_then_bench(url, workload))
        died = proc.poll() is not None or "CUDA out of memory" in log.read_text()
        if want.outcome is Outcome.OOM_UNDER_LOAD:
            return died, f"OOM under load seen: {died}", want, None
        if want.outcome in (Outcome.NAN, Outcome.GARBAGE):
            return garbage, f"NaN/garbage seen: {garbage}", want, None
        measured = tokens / seconds
        assert want.output_tok_s is not None
        err = measured / want.output_tok_s - 1
        complete = tokens == workload.num_prompts * workload.output_len and not died and not garbage
        return (
            complete and abs(err) <= 0.02,
            f"{measured:,.1f} vs {want.output_tok_s:,.1f} ({err:+.2%})",
            want,
            measured,
        )
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait(10)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    chosen = [POINTS[i] for i in QUICK] if args.quick else POINTS
    failures, errors = 0, []
    with tempfile.TemporaryDirectory() as tmp:
        for space_path, point in chosen:
            ok, text, want, measured = check(space_path, point, Path(tmp))
            failures += not ok
            if measured is not None and want.output_tok_s:
                errors.append(abs(measured / want.output_tok_s - 1))
            name = Path(space_path).stem
            shown = " ".join(f"{k}={v}" for k, v in point.items())
            print(
                f"{'ok ' if ok else 'BAD'} {name}: {shown}: predicted {want.outcome.value}; {text}",
                flush=True,
            )
    print(
        f"{len(chosen)} points, {failures} disagreements; throughput checked on {len(errors)} points, "
        f"max error {max(errors, default=0):.2%}"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
