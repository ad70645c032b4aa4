"""The gate over real HTTP against a small aiohttp server that mimics SGLang's OpenAI endpoints.

The server runs in its own thread and event loop; the gate runs through its
synchronous wrapper, as the trial runner calls it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import pytest
from aiohttp import web

from tuner.gate.run import GateRound, GateVerdict, gate
from tuner.gate.settings import DEFAULT_PROMPTS, GateSettings
from tuner.sglang.process import free_port

pytestmark = pytest.mark.integration

ESSAY = (
    "A hash table stores key-value pairs in an array of buckets. To insert an item it computes a hash of "
    "the key and reduces it modulo the number of buckets to pick a slot. Two keys can land in the same "
    "slot, which is a collision: separate chaining keeps a short list per bucket, while open addressing "
    "probes neighbouring slots until it finds a free one. Lookups repeat the same computation, so on "
    "average they touch one or two slots however many items are stored, which makes insert, delete and "
    "search constant time on average. The load factor, items divided by buckets, governs performance; "
    "once it passes a threshold such as 0.75 the table allocates a larger array and re-inserts every "
    "entry. A good hash function spreads keys uniformly and is cheap to compute."
)
RIGHT = dict(zip((p.prompt for p in DEFAULT_PROMPTS), ("Paris", "42", "2, 3, 5, 7, 11", ESSAY), strict=True))
BURST = 8
SETTINGS = GateSettings(timeout_s=20)


class FakeSglang:
    """A batching server: requests arriving together form one batch (decode step).

    A request waits until BURST requests are in flight or a short batching
    window closes. `broken_at` = a batch of that many or more decodes to
    garbage, as a bad sparse-attention kernel does in batched decode.
    """

    def __init__(
        self,
        *,
        mode: str = "right",
        broken_at: int | None = None,
        window_s: float = 0.0,
        died: threading.Event | None = None,
    ) -> None:
        self.mode = mode
        self.broken_at = broken_at
        self.window_s = window_s
        self.died = died
        self.in_flight = 0
        self.peak = 0
        self.batch_peak = 0  # the largest in-flight count since the server was last idle
        self.requests = 0
        self.full = asyncio.Event()
        self.shutdown = asyncio.Event()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/chat/completions", self.chat)
        return app

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "zai-org/GLM-5-NVFP4", "root": "x"}]})

    async def chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests += 1
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        self.batch_peak = max(self.batch_peak, self.in_flight)
        try:
            if self.in_flight >= BURST:
                self.full.set()
            if self.window_s:
                with suppress(asyncio.TimeoutError):  # the batching window closed first
                    await asyncio.wait_for(self.full.wait(), self.window_s)
            if self.died is not None and self.in_flight > 1:
                self.died.set()
                await self.shutdown.wait()
            return self.reply(body)
        finally:
            self.in_flight -= 1
            if self.in_flight == 0:
                self.batch_peak = 0
                self.full.clear()

    def reply(self, body: dict[str, Any]) -> web.Response:
        if self.mode == "error":
            return web.json_response(
                {
                    "object": "error",
                    "message": "Internal server error",
                    "type": "InternalServerError",
                    "code": 500,
                },
                status=500,
            )
        max_tokens = body["max_tokens"]
        if self.mode == "empty":
            text, finish, tokens = "", "stop", 0
        elif self.broken_at is not None and self.batch_peak >= self.broken_at:
            text, finish, tokens = "?" * max_tokens, "length", max_tokens
        else:
            text = RIGHT[body["messages"][0]["content"]]
            finish, tokens = "stop", max(1, len(text.split()) * 4 // 3)
        return web.json_response(
            {
                "id": "x",
                "object": "chat.completion",
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text, "reasoning_content": None},
                        "finish_reason": finish,
                    }
                ],
                "usage": {"prompt_tokens": 20, "completion_tokens": tokens, "total_tokens": 20 + tokens},
            }
        )


@contextmanager
def serving(server: FakeSglang) -> Iterator[str]:
    """Run the server on 127.0.0.1 in a thread; yield its base URL."""
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(server.app(), shutdown_timeout=1.0)
    ready = threading.Event()
    port: list[int] = []

    def main() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        loop.run_until_complete(site.start())
        port.append(runner.addresses[0][1])
        ready.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())
        loop.close()

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    assert ready.wait(10), "test server did not start"
    try:
        yield f"http://127.0.0.1:{port[0]}"
    finally:
        loop.call_soon_threadsafe(server.shutdown.set)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def test_garbage_only_in_batched_decode_is_caught_by_the_burst() -> None:
    server = FakeSglang(broken_at=4, window_s=0.25)
    with serving(server) as url:
        result = gate(url, SETTINGS, captured_bs=(1, 2, 4, 8))
    assert result.verdict is GateVerdict.GARBAGE, result.reason
    assert result.burst_size == BURST and server.peak == BURST  # the whole burst was in flight at once
    sequential = [a for a in result.answers if a.round is GateRound.SEQUENTIAL]
    burst = [a for a in result.answers if a.round is GateRound.BURST]
    assert len(sequential) == 4 and all(a.verdict is GateVerdict.PASSED for a in sequential)
    assert len(burst) == BURST and all(a.verdict is GateVerdict.GARBAGE for a in burst)
    assert result.reason is not None and "sequential answers passed" in result.reason
    assert result.model == "zai-org/GLM-5-NVFP4"


def test_healthy_batching_server_passes() -> None:
    server = FakeSglang(window_s=2.0)  # the window ends once the burst is in: long only on a busy machine
    with serving(server) as url:
        result = gate(url, SETTINGS, captured_bs=(1, 2, 4, 8))
    assert result.passed, result.reason
    # the burst overlapped (a starved client may not get all 8 in before the window closes)
    assert len(result.answers) == 4 + BURST and 2 <= server.peak <= BURST


def test_empty_output_for_every_prompt_is_garbage() -> None:
    server = FakeSglang(mode="empty")
    with serving(server) as url:
        result = gate(url, SETTINGS, captured_bs=None)
    assert result.verdict is GateVerdict.GARBAGE
    assert result.reason is not None and "empty output" in result.reason
    assert [a.verdict for a in result.answers] == [GateVerdict.GARBAGE] * 4
    assert result.burst_size is None and server.requests == 4  # no burst after a failed round


def test_http_500_is_an_error() -> None:
    server = FakeSglang(mode="error")
    with serving(server) as url:
        result = gate(url, SETTINGS, captured_bs=None)
    assert result.verdict is GateVerdict.ERROR
    assert result.reason is not None and "HTTP 500: Internal server error" in result.reason
    assert all(a.http_status == 500 for a in result.answers)


def test_server_death_during_the_burst_stops_the_gate() -> None:
    died = threading.Event()
    server = FakeSglang(window_s=0.25, died=died)
    with serving(server) as url:
        result = gate(url, SETTINGS, captured_bs=None, server_died=died)
    assert result.verdict is GateVerdict.ERROR and result.reason == "server died during the gate"
    assert result.duration_s < SETTINGS.timeout_s


def test_connection_refused_is_an_error() -> None:
    port = free_port()
    result = gate(f"http://127.0.0.1:{port}", SETTINGS, captured_bs=None, model="m")
    assert result.verdict is GateVerdict.ERROR
    assert result.reason is not None and "connection failed" in result.reason
