"""The simulator as a real process over real HTTP: calibration, endpoints, SSE, logs, state files."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import time
from pathlib import Path

import httpx
import orjson
import pytest
import support.sim as sim_support

from tuner.sim import perf
from tuner.sim.scenario import load_scenario

pytestmark = pytest.mark.integration

GLM5 = [
    "--model-path",
    "/models/GLM-5-NVFP4",
    "--tp-size",
    "8",
    "--nsa-prefill-backend",
    "trtllm",
    "--nsa-decode-backend",
    "trtllm",
    "--sim-scenario",
    "glm5-nvfp4-sm120",
    "--sim-seed",
    "7",
]
TINY = ["--model-path", "/models/tiny", "--sim-seed", "1"]
RE_KV = re.compile(r"KV Cache is allocated\. (?:dtype: \S+, )?#tokens: (\d+)")
RE_SUMMARY = re.compile(
    r"max_total_num_tokens=(\d+), chunked_prefill_size=(-?\d+), max_prefill_tokens=(\d+), "
    r"max_running_requests=(\d+), context_len=(\d+), available_gpu_mem=([\d.]+) GB"
)
RE_DECODE = re.compile(
    r"Decode batch.*?#running-req: (\d+), .*?token usage: ([\d.]+), .*?cuda graph: (True|False), "
    r"gen throughput \(token/s\): ([\d.]+), #queue-req: (\d+)"
)


async def _stream_load(
    url: str, *, concurrency: int, requests: int, input_len: int, output_len: int
) -> tuple[float, int, int]:
    """Closed-loop streaming load on /v1/completions: (seconds, output tokens, content events)."""
    limits = httpx.Limits(max_connections=concurrency + 8, max_keepalive_connections=concurrency + 8)
    timeout = httpx.Timeout(60.0, connect=10.0)
    left = list(range(requests))
    tokens = events = 0
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:

        async def worker() -> None:
            nonlocal tokens, events
            while left:
                i = left.pop()
                body = {
                    "prompt": [(i * 7 + k) % 1000 for k in range(input_len)],
                    "max_tokens": output_len,
                    "ignore_eos": True,
                    "stream": True,
                    "stream_options": {"include_usage": True},
                }
                async with client.stream("POST", url + "/v1/completions", json=body) as resp:
                    async for line in resp.aiter_lines():
                        if line.startswith("data: ") and line != "data: [DONE]":
                            chunk = orjson.loads(line[6:])
                            if chunk["choices"] and chunk["choices"][0]["text"]:
                                events += 1
                            if chunk.get("usage"):
                                tokens += chunk["usage"]["completion_tokens"]

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return time.perf_counter() - t0, tokens, events


def _server_info(sim) -> dict:
    return httpx.get(sim.url + "/server_info", timeout=5).json()


def test_glm5_seed_launch_calibration_and_throughput(sim_factory):
    sim = sim_factory(*GLM5, "--mem-fraction-static", "0.85", "--disable-cuda-graph")
    sim.wait_ready()
    info = _server_info(sim)
    legacy = httpx.get(sim.url + "/get_server_info", timeout=5).json()
    for doc in (info, legacy):
        assert doc["max_total_num_tokens"] == pytest.approx(370_000, rel=0.02)
        assert doc["internal_states"][0]["memory_usage"]["token_capacity"] == doc["max_total_num_tokens"]
    assert info["mem_fraction_static"] == 0.85 and info["disable_cuda_graph"] is True
    assert info["version"] == "0.5.9"
    procs = {pid: d for pid, d in sim.procs().items() if pid != sim.proc.pid}
    assert len(procs) == 1
    (doc,) = procs.values()
    assert sorted(doc["used_mib"]) == [str(i) for i in range(8)]
    free = 97_887 - doc["used_mib"]["0"]
    assert free == pytest.approx(16_574, rel=0.10)

    in_len, out_len = 16, 16
    seconds, tokens, events = asyncio.run(
        _stream_load(sim.url, concurrency=64, requests=64, input_len=in_len, output_len=out_len)
    )
    assert tokens == events == 64 * out_len
    want = perf.predict_closed_loop(
        load_scenario("glm5-nvfp4-sm120").perf,
        concurrency=64,
        input_len=in_len,
        output_len=out_len,
        captured=(),
        chunked_prefill=8192,
    )
    # The server is paced by the wall clock: a busy machine (the client and the server share its
    # cores) can only slow it, never speed it up, so the model's pace is an upper bound here; how close
    # a quiet machine comes to it is a figure of benchmarks/seed_calibration.py (a machine kept busy by
    # 4 CPU hogs measured 0.72 of it). Below 0.3 the pacer itself is broken, not the machine busy.
    assert 0.3 * want.output_tok_s <= tokens / seconds <= 1.10 * want.output_tok_s
    # at the seed workload the same model says 225 tok/s (checked in the unit tests)
    log = sim.log()
    assert "[" in log and " TP0] KV Cache is allocated. #tokens: " in log
    assert int(RE_KV.search(log).group(1)) == info["max_total_num_tokens"]
    assert int(RE_SUMMARY.search(log).group(1)) == info["max_total_num_tokens"]


def test_glm5_graphs_at_092_calibration_new_dialect(sim_factory):
    sim = sim_factory(
        "--model-path",
        "/models/GLM-5-NVFP4",
        "--tp-size",
        "8",
        "--dsa-prefill-backend",
        "trtllm",
        "--dsa-decode-backend",
        "trtllm",
        "--sim-scenario",
        "glm5-nvfp4-sm120",
        "--sim-sglang-version",
        "0.5.23",
        "--mem-fraction-static",
        "0.92",
        "--cuda-graph-bs-decode",
        *["1", "2", "4", "8", "12", "16", "24", "32", "40", "48", "56", "64"],
    )
    sim.wait_ready()
    info = _server_info(sim)
    assert info["max_total_num_tokens"] == pytest.approx(498_000, rel=0.02)
    assert info["cuda_graph_bs_decode"] == [1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64]
    assert info["internal_states"][0]["memory_usage"]["graph"]["decode"] > 4
    (doc,) = [d for pid, d in sim.procs().items() if pid != sim.proc.pid]
    assert 97_887 - doc["used_mib"]["7"] == pytest.approx(5.2 * 1024, rel=0.10)
    log = sim.log()
    assert "Set DSA backends for fp8_e4m3 KV Cache: prefill=trtllm, decode=trtllm." in log
    assert "KV Cache is allocated. dtype: torch.float8_e4m3fn, #tokens: " in log
    m = re.search(r"Capture target decode CUDA graph end\. bs=\[([\d, ]+)\]", log)
    assert m and m.group(1).startswith("1, 2, 4") and m.group(1).endswith("56, 64")
    assert httpx.get(sim.url + "/ready", timeout=5).status_code == 200


def test_startup_log_sequence_and_version_endpoints(sim_factory):
    sim = sim_factory(*TINY, "--enable-metrics", "--decode-log-interval", "5", "--served-model-name", "tiny")
    sim.wait_ready()
    log = sim.wait_log("The server is fired up and ready to roll!")
    order = [
        "server_args=ServerArgs(",
        "Set NSA backends for ",
        "Load weight begin. avail mem=",
        "Load weight end. elapsed=",
        "KV Cache is allocated. #tokens: ",
        "Memory pool end. avail mem=",
        "Capture cuda graph begin.",
        "Capture cuda graph end. Time elapsed:",
        "max_total_num_tokens=",
        f"Uvicorn running on http://127.0.0.1:{sim.port}",
        "The server is fired up and ready to roll!",
    ]
    positions = [log.index(s) for s in order]
    assert positions == sorted(positions)
    assert re.search(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] server_args=ServerArgs\(", log, re.M)
    assert httpx.get(sim.url + "/ready").status_code == 404  # only from 0.5.20
    assert httpx.get(sim.url + "/model_info").json()["architectures"] == ["DeepseekV32ForCausalLM"]
    assert httpx.get(sim.url + "/v1/models").json()["data"][0]["id"] == "tiny"
    r = httpx.post(
        sim.url + "/generate",
        json={
            "text": "Tell me a story",
            "sampling_params": {"max_new_tokens": 30, "ignore_eos": True, "temperature": 0},
        },
    )
    assert r.json()["meta_info"]["completion_tokens"] == 30
    metrics = httpx.get(sim.url + "/metrics").text
    assert re.search(r"^sglang:max_total_num_tokens\{.*\} \d+", metrics, re.M)
    assert float(re.search(r"^sglang:generation_tokens_total\{.*\} ([\d.]+)", metrics, re.M).group(1)) >= 30
    m = RE_DECODE.search(sim.wait_log("Decode batch"))
    assert m and m.group(3) == "True"
    assert httpx.get(sim.url + "/flush_cache").status_code == 200


def test_sse_framing_usage_and_determinism(sim_factory):
    sim = sim_factory(*TINY)
    sim.wait_ready()
    body = {
        "messages": [{"role": "user", "content": "What is the capital of France? Answer in one word."}],
        "temperature": 0,
        "max_tokens": 64,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    raw = httpx.post(sim.url + "/v1/chat/completions", json=body, timeout=10)
    assert raw.headers["content-type"].startswith("text/event-stream")
    assert raw.text.endswith("data: [DONE]\n\n")
    events = [e for e in raw.text.split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events)
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    content = [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"]]
    text = "".join(x for x in content if x)
    assert "Paris" in text
    usage_chunk = chunks[-1]
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] == len(
        [x for x in content if x]
    )
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    plain = httpx.post(sim.url + "/v1/chat/completions", json={**body, "stream": False}).json()
    assert plain["choices"][0]["message"]["content"] == text
    assert plain["usage"]["prompt_tokens"] == usage_chunk["usage"]["prompt_tokens"]
    exact = httpx.post(
        sim.url + "/v1/completions",
        json={"prompt": "Hello there", "max_tokens": 50, "ignore_eos": True, "temperature": 0},
    ).json()
    assert exact["usage"]["completion_tokens"] == 50 and exact["choices"][0]["finish_reason"] == "length"
    stream = httpx.post(
        sim.url + "/generate",
        json={"text": "What is 17 + 25?", "stream": True, "sampling_params": {"temperature": 0}},
    ).text
    gens = [json.loads(e[6:]) for e in stream.split("\n\n") if e.startswith("data: {")]
    assert gens[-1]["text"] == "42" and gens[-1]["meta_info"]["finish_reason"]["type"] == "stop"


def test_tiny_sustains_thousands_of_sse_tokens_per_second(sim_factory):
    sim = sim_factory(*TINY, "--cuda-graph-max-bs", "32")
    sim.wait_ready()
    seconds, tokens, events = asyncio.run(
        _stream_load(sim.url, concurrency=32, requests=64, input_len=8, output_len=64)
    )
    assert events == tokens == 64 * 64  # every token streamed as its own event, none lost
    assert seconds > 0  # the speed target (> 2000 tokens/s) is a benchmark: benchmarks/sim_sse_rate.py


def test_a_sim_whose_port_was_taken_before_its_bind_starts_again_on_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The port is picked free and bound only once the server is ready (as SGLang does): another
    process may take it between the two, and the helper then starts the simulator on a fresh port."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        picks = iter([taken])
        fresh = sim_support.free_port
        monkeypatch.setattr(sim_support, "free_port", lambda: next(picks, None) or fresh())
        sim = sim_support.Sim(TINY, tmp_path)
        try:
            sim.wait_ready()
            assert sim.port != taken
            assert httpx.get(sim.url + "/health", timeout=5).status_code == 200
        finally:
            sim.kill()
        assert "error while attempting to bind on address" in (tmp_path / f"sim-{taken}.log").read_text()
