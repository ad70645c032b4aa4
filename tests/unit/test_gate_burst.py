"""The gate's burst: a reference-only gate bursts too, and a burst that never ran batched proves nothing."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tuner.config import LaunchSpec, ServerLoad
from tuner.gate.load import BurstLoad, client_overlap, required
from tuner.gate.run import GateVerdict, run_gate
from tuner.gate.settings import GateSettings, ReferenceSettings
from tuner.sglang import server as server_module
from tuner.sglang.batch_lines import running_requests, server_load
from tuner.sglang.server import ServerProcess

PROMPTS = ("def fibonacci(n):", "Once upon a time")


class Generate:
    """/v1/models and /generate: greedy ids per prompt (wrong ones when `bad_at` requests run at once)."""

    def __init__(self, *, bad_at: int | None = None, serial: bool = False) -> None:
        self.bad_at = bad_at
        self.serial = serial  # answer one request at a time (a starved client / server)
        self.in_flight = 0
        self.peak = 0
        self.calls = 0
        self.lock = asyncio.Lock()
        self.log: list[str] = []  # the scheduler's batch lines, as SGLang prints them

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "m"}]})
        body = json.loads(request.content)
        assert body["top_logprobs_num"] == 2 and body["sampling_params"]["temperature"] == 0
        if self.serial:
            async with self.lock:
                return await self._answer(body)
        return await self._answer(body)

    async def _answer(self, body: dict[str, Any]) -> httpx.Response:
        self.calls += 1
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        self.log.append(
            f"[x] Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, "
            f"#running-req: {self.in_flight - 1}, #queue-req: 0"
        )
        try:
            await asyncio.sleep(0.01)
            batched = self.bad_at is not None and self.in_flight >= self.bad_at
            base = 7 if body["text"].startswith("def") else 3
            ids = [base + i + (50 if batched and i > 2 else 0) for i in range(6)]
            top = [[[-0.01, t, None], [-6.0, t + 1000, None]] for t in ids]
            return httpx.Response(
                200, json={"text": "x", "output_ids": ids, "meta_info": {"output_top_logprobs": top}}
            )
        finally:
            self.in_flight -= 1


def settings() -> GateSettings:
    return GateSettings(
        prompts=(), reference=ReferenceSettings(enabled=True, prompts=PROMPTS, tokens=6), timeout_s=30
    )


def gate(server: Generate, **kw: Any) -> Any:
    kw.setdefault("log_lines", lambda: tuple(server.log))
    return asyncio.run(run_gate("http://g.test", settings(), transport=httpx.MockTransport(server), **kw))


def test_a_reference_only_gate_bursts_at_the_largest_captured_batch_and_catches_batched_errors() -> None:
    healthy = Generate()
    result = gate(healthy, captured_bs=(1, 2, 4, 8, 16))
    assert result.passed and result.burst_size == 16 and healthy.peak == 16
    assert healthy.calls == len(PROMPTS) + 16 and len(result.reference.burst) == 16
    assert result.load is not None and result.load.client == 16 and result.load.target == 16
    assert result.load.server == 16
    broken = gate(Generate(bad_at=4), captured_bs=(1, 2, 4, 8, 16))
    assert broken.verdict is GateVerdict.WRONG_ANSWER
    assert broken.reason.startswith("reference mismatch in the burst:")  # sequential outputs agreed


def test_a_burst_that_never_ran_batched_is_retried_then_inconclusive() -> None:
    """All 8 requests were out at once, but the server ran them one by one: not a batched check."""
    server = Generate(serial=True)
    result = gate(server, captured_bs=(1, 2, 4, 8))
    assert result.verdict is GateVerdict.INCONCLUSIVE and not result.passed
    assert result.load is not None and result.load.server == 1 and result.load.tries == 3
    assert server.calls == len(PROMPTS) + 3 * 8
    assert "reached 1 concurrent requests" in result.reason and "needs 6" in result.reason
    assert result.load.client == 8  # the client's own view could not tell


def test_without_batch_lines_the_client_s_overlap_counts() -> None:
    result = gate(Generate(), captured_bs=(1, 2, 4, 8), log_lines=tuple)
    assert result.passed and result.load.server is None and result.load.client == 8


def test_batch_lines_of_real_sglang_give_the_running_requests() -> None:
    lines = [
        "[2026-12-01 21:47:49] Prefill batch, #new-seq: 3, #new-token: 384, #cached-token: 0, "
        "token usage: 0.00, #running-req: 1, #queue-req: 0, #pending-token: 0, cuda graph: True, "
        "input throughput (token/s): 92511.97",
        "[2026-12-01 21:47:48] Decode batch, #running-req: 6, #token: 21, token usage: 0.00, "
        "cuda graph: True, "
        "gen throughput (token/s): 16.97, #queue-req: 0",
        '[2026-12-01 21:47:48] INFO:     127.0.0.1:51088 - "GET /health HTTP/1.1" 200 OK',
    ]
    assert (
        running_requests(lines[:1]) == 4
        and running_requests(lines) == 6
        and running_requests(lines[2:]) is None
    )


def test_client_overlap_and_the_target() -> None:
    assert client_overlap([(0, 1), (0.5, 2), (1, 3), (3, 4)]) == 2  # an end before a start at a tie
    assert client_overlap([]) == 0 and required(8) == 6 and required(1) == 1
    assert BurstLoad(target=8, client=8, server=None).reached_target
    assert not BurstLoad(target=8, client=8, server=3).reached_target


class Capped(Generate):
    """A server whose scheduler runs at most `cap` requests at once (--max-running-requests)."""

    def __init__(self, cap: int) -> None:
        super().__init__()
        self.slots = asyncio.Semaphore(cap)

    async def _answer(self, body: dict[str, Any]) -> httpx.Response:
        async with self.slots:
            return await super()._answer(body)


def test_a_burst_larger_than_the_server_s_running_cap_is_judged_against_the_cap() -> None:
    """A launch with --max-running-requests 4 and graphs to 16: no client can make it run 12 at once."""
    result = gate(Capped(4), captured_bs=(1, 2, 4, 8, 16), max_running=4)
    assert result.passed and result.burst_size == 16
    assert result.load is not None and result.load.target == 4 and result.load.server == 4
    assert result.load.tries == 1
    unknown = gate(Capped(4), captured_bs=(1, 2, 4, 8, 16))  # the cap not known: the burst's own target
    assert unknown.verdict is GateVerdict.INCONCLUSIVE and unknown.load.target == 16


def test_the_running_cap_is_read_from_server_info_of_real_sglang() -> None:
    """0.5.17: the argument is null when not set; the scheduler reports what it resolved."""
    from tuner.sglang.server import max_running

    real = {
        "max_running_requests": None,
        "internal_states": [{"effective_max_running_requests_per_dp": 4096}],
    }
    assert max_running(real) == 4096
    assert max_running({**real, "dp_size": 2}) == 8192
    assert max_running({"max_running_requests": 48}) == 48
    assert max_running({"max_running_requests": None}) is None
    assert max_running({"internal_states": [{"effective_max_running_requests_per_dp": 10**18}]}) is None


def test_batch_lines_of_real_sglang_give_the_load_a_benchmark_put_on_the_scheduler() -> None:
    lines = [
        "[2026-12-01 21:47:49] Prefill batch, #new-seq: 3, #new-token: 384, #cached-token: 0, "
        "token usage: 0.12, #running-req: 1, #queue-req: 0, #pending-token: 0, cuda graph: True, "
        "input throughput (token/s): 92511.97",
        "[2026-12-01 21:47:50] Decode batch, #running-req: 6, #full token: 900, full token usage: 0.31, "
        "#swa token: 4000, swa token usage: 0.97, cuda graph: True, gen throughput (token/s): 16.97, "
        "#queue-req: 0",
        "[2026-12-01 21:47:51] KV cache pool is full. Retract requests. #retracted_reqs: 2, "
        "#new_tokens_gained: 512",
    ]
    load = server_load(lines)
    assert load is not None
    assert (load.peak_running, load.peak_kv_usage, load.retractions) == (6, 0.31, 2)  # not the SWA pool
    assert server_load(lines[:1]) == ServerLoad(peak_running=4, peak_kv_usage=0.12, retractions=0)
    assert server_load(lines[2:]) is None  # no batch line: nothing known


def test_a_server_meters_the_load_of_every_line_however_few_its_tail_keeps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server_module, "TAIL_LINES", 3)
    spec = LaunchSpec(argv=("true",), port=1, log_path=tmp_path / "server.log", sglang_version="0.5.17")
    server = ServerProcess(spec)
    server._on_line("Decode batch, #running-req: 9, #token: 10, token usage: 0.50, #queue-req: 0")
    server.meter_load()  # the benchmark starts: what came before is not its load
    server._on_line("KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_tokens_gained: 9")
    for _ in range(10):  # more lines than the tail keeps
        server._on_line("Decode batch, #running-req: 4, #token: 10, token usage: 0.20, #queue-req: 0")
    assert len(server.lines()) == 3
    assert server.metered_load() == ServerLoad(peak_running=4, peak_kv_usage=0.2, retractions=3)
