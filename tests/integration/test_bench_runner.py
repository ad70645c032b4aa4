"""The benchmark stage over real HTTP against a small aiohttp streaming server in a thread."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import orjson
import pytest
from aiohttp import web

from tuner.bench.runner import benchmark
from tuner.bench.settings import Api, BenchSettings, LoadPoint, RequestTimeouts, Workload
from tuner.bench.types import ErrorClass, OutputSource
from tuner.errors import BenchmarkError
from tuner.sglang.process import free_port

pytestmark = pytest.mark.integration


@dataclass
class Behaviour:
    """How the fake server answers; tests change it before running the stage."""

    ttft_s: float = 0.05
    itl_s: float = 0.01
    tokens_per_chunk: int = 1
    usage: bool = True
    status: int = 200
    stall_after: int | None = None  # content events before the stream goes silent
    drop_after: int | None = None  # content events before the connection is cut
    flush_status: int = 200
    requests: list[dict[str, object]] = field(default_factory=list)
    flushes: int = 0


class FakeServer:
    """An OpenAI-style streaming server on 127.0.0.1:<free port>, run on its own loop in a thread."""

    def __init__(self) -> None:
        self.b = Behaviour()
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._stop: asyncio.Event | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(10)

    def stop(self) -> None:
        if self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._main())

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        app = web.Application()
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/flush_cache", self.flush)
        app.router.add_post("/v1/chat/completions", self.stream)
        app.router.add_post("/v1/completions", self.stream)
        runner = web.AppRunner(app)
        await runner.setup()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        site = web.SockSite(runner, sock)
        await site.start()
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "served-model"}]})

    async def flush(self, request: web.Request) -> web.Response:
        self.b.flushes += 1
        return web.Response(status=self.b.flush_status, text="Cache flushed.")

    async def stream(self, request: web.Request) -> web.StreamResponse:
        b = self.b
        body = orjson.loads(await request.read())
        b.requests.append(body)
        if b.status != 200:
            return web.Response(status=b.status, text="boom")
        chat = "messages" in body
        n = int(body.get("max_completion_tokens") or body.get("max_tokens"))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        start = time.perf_counter()
        events = -(-n // b.tokens_per_chunk)
        for k in range(events):
            if b.drop_after is not None and k == b.drop_after:
                assert request.transport is not None
                request.transport.close()
                return resp
            if b.stall_after is not None and k == b.stall_after:
                assert self._stop is not None
                await self._stop.wait()  # silent until the server stops
                return resp
            due = start + b.ttft_s + k * b.itl_s
            assert self._stop is not None
            try:  # sleep until due, but end at once when the server stops
                await asyncio.wait_for(self._stop.wait(), max(0.0, due - time.perf_counter()))
                return resp
            except asyncio.TimeoutError:
                pass
            piece = "x" * b.tokens_per_chunk
            choice = {"index": 0, "delta": {"content": piece}} if chat else {"index": 0, "text": piece}
            await resp.write(b"data: " + orjson.dumps({"choices": [choice]}) + b"\n\n")
        if b.usage:
            usage = {"prompt_tokens": 11, "completion_tokens": n, "total_tokens": n + 11}
            await resp.write(b"data: " + orjson.dumps({"choices": [], "usage": usage}) + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


@pytest.fixture
def server() -> Iterator[FakeServer]:
    srv = FakeServer()
    srv.start()
    yield srv
    srv.stop()


def settings(*points: LoadPoint, output_len: int = 20, api: Api = Api.CHAT, **kw: object) -> BenchSettings:
    base: dict[str, object] = {
        "workload": Workload(input_len=16, output_len=output_len, api=api),
        "load_points": points or (LoadPoint(concurrency=4, num_prompts=8),),
        "warmup_requests": 0,
    }
    base.update(kw)
    return BenchSettings(**base)  # type: ignore[arg-type]


def test_latencies_and_throughput_come_out_near_truth(server: FakeServer) -> None:
    server.b.ttft_s, server.b.itl_s = 0.05, 0.01
    cfg = settings(LoadPoint(concurrency=4, num_prompts=8))
    res = benchmark(server.url, cfg, settle_s=0.0)
    m = res.objective_metrics
    assert m is not None and (m.completed, m.failed) == (8, 0)
    assert res.model == "served-model"
    assert all(r["model"] == "served-model" for r in server.b.requests)
    assert 45 <= m.ttft.median_ms <= 150
    assert 8 <= m.itl.median_ms <= 25
    assert 8 <= m.tpot.mean_ms <= 25
    assert m.total_output_tokens == 8 * 20 and m.output_tokens_source == "usage"
    assert m.total_input_tokens == 8 * 16 and m.total_input_tokens_server == 8 * 11
    # 2 waves of ≈ 0.05 + 19·0.01 s: the ideal rate is 80 tok / 0.24 s ≈ 333 tok/s
    assert 150 <= m.output_throughput <= 340
    assert 2.0 <= m.concurrency <= 4.01
    assert res.points[0].flushed and server.b.flushes == 1
    assert not res.crashed and not res.deadline_hit
    assert res.client_cpu_share >= 0 and res.duration_s > m.duration_s


def test_completions_api_with_token_ids_and_multi_token_chunks(server: FakeServer) -> None:
    server.b.tokens_per_chunk = 4
    res = benchmark(server.url, settings(api=Api.COMPLETIONS), settle_s=0.0)
    m = res.points[0].metrics
    assert m.completed == 8 and m.total_output_tokens == 160
    assert m.tokens_per_content_event == pytest.approx(4.0)
    body = server.b.requests[0]
    assert isinstance(body["prompt"], list) and len(body["prompt"]) == 16  # type: ignore[arg-type]
    assert body["max_tokens"] == 20 and body["stream_options"] == {"include_usage": True}


def test_without_usage_the_requested_count_is_used_and_flagged(server: FakeServer) -> None:
    server.b.usage = False
    m = benchmark(server.url, settings(), settle_s=0.0).points[0].metrics
    assert m.completed == 8 and m.output_tokens_source == "requested"
    assert m.total_input_tokens_server is None


def test_http_500_is_a_failed_request_with_its_class(server: FakeServer) -> None:
    server.b.status = 500
    res = benchmark(server.url, settings(), settle_s=0.0)
    m = res.points[0].metrics
    assert (m.completed, m.failed) == (0, 8) and m.errors == (("http_status", 8),)
    rec = res.points[0].records[0]
    assert rec.status_code == 500 and "boom" in rec.error_text
    assert m.ttft.count == 0 and m.ttft.mean_ms == 0.0


def test_idle_and_first_byte_timeouts_keep_partial_tokens(server: FakeServer) -> None:
    server.b.stall_after = 3
    # the stall never ends: a generous idle timeout still fires, and a busy machine's gaps between the
    # first 3 tokens never reach it
    timeouts = RequestTimeouts(idle_read_s=3.0, first_byte_s=30.0)
    res = benchmark(
        server.url, settings(LoadPoint(concurrency=2, num_prompts=2), timeouts=timeouts), settle_s=0.0
    )
    recs = res.points[0].records
    assert {r.error for r in recs} == {ErrorClass.IDLE_TIMEOUT}
    assert all(r.content_events == 3 and r.output_tokens == 3 for r in recs)
    assert all(r.output_source is OutputSource.EVENTS for r in recs)

    # no first byte for 60 s: the request's 2 s limit fires, long before the stage's own watchdog (twice
    # that with no progress anywhere), which a busy machine's late event loop could otherwise reach first
    server.b.stall_after, server.b.ttft_s = None, 60.0
    timeouts = RequestTimeouts(idle_read_s=10.0, first_byte_s=2.0)
    res = benchmark(
        server.url, settings(LoadPoint(concurrency=2, num_prompts=2), timeouts=timeouts), settle_s=0.0
    )
    assert {r.error for r in res.points[0].records} == {ErrorClass.FIRST_BYTE_TIMEOUT}


def test_server_died_ends_the_stage_at_once_with_partial_results(server: FakeServer) -> None:
    server.b.itl_s = 0.05  # 20 requests of 400 tokens would take ≥ 40 s
    died = threading.Event()
    set_at: list[float] = []

    def kill_later() -> None:  # once the first wave is streaming: however late a busy machine sends it
        while len(server.b.requests) < 4:
            time.sleep(0.01)
        time.sleep(0.2)
        set_at.append(time.perf_counter())
        died.set()

    threading.Thread(target=kill_later, daemon=True).start()
    res = benchmark(
        server.url,
        settings(LoadPoint(concurrency=4, num_prompts=20), LoadPoint(concurrency=2), output_len=400),
        server_died=died,
        settle_s=0.0,
    )
    ended = time.perf_counter()
    assert ended - set_at[0] < 1.0  # the stage noticed and returned (budget ~100 ms; margin for CI)
    assert res.crashed and not res.deadline_hit
    assert len(res.points) == 1  # the second load point never started
    recs = res.points[0].records
    assert len(recs) == 20
    assert {r.error for r in recs} == {ErrorClass.SERVER_DIED}
    sent = [r for r in recs if r.t_sent_s is not None]
    assert len(sent) == 4 and all(r.content_events > 0 for r in sent)  # in flight, with partial tokens
    assert res.points[0].metrics.errors == (("server_died", 20),)


def test_stage_deadline_cuts_the_run(server: FakeServer) -> None:
    server.b.itl_s = 0.05
    res = benchmark(
        server.url,
        settings(
            LoadPoint(concurrency=2, num_prompts=4),
            output_len=400,
            timeouts=RequestTimeouts(stage_deadline_s=0.5),
        ),
        settle_s=0.0,
    )
    assert res.deadline_hit and not res.crashed
    assert {r.error for r in res.points[0].records} == {ErrorClass.DEADLINE}


def test_load_points_warmup_and_flush_are_seen_by_the_server(server: FakeServer) -> None:
    server.b.ttft_s, server.b.itl_s = 0.01, 0.002
    points = (
        LoadPoint(concurrency=3, num_prompts=6),
        LoadPoint(concurrency=None, request_rate=200.0, num_prompts=5),
    )
    cfg = settings(*points, warmup_requests=None, objective_point=0, output_len=40)
    res = benchmark(server.url, cfg, settle_s=0.01)
    assert [p.point.label for p in res.points] == ["c3", "r200"]
    assert [p.warmup_requests for p in res.points] == [3, 1]
    assert server.b.flushes == 2 and all(p.flushed for p in res.points)
    assert len(server.b.requests) == 3 + 6 + 1 + 5
    lengths = [r["max_completion_tokens"] for r in server.b.requests]
    assert lengths.count(32) == 4 and lengths.count(40) == 11  # warmup output capped at 32 tokens
    assert res.objective_metrics is res.points[0].metrics
    assert [p.metrics.completed for p in res.points] == [6, 5]
    assert all(r.load_point == "r200" for r in res.points[1].records)


def test_connection_cut_mid_stream_is_a_stream_error(server: FakeServer) -> None:
    server.b.drop_after = 2
    cfg = settings(LoadPoint(concurrency=2, num_prompts=2))
    res = benchmark(server.url, cfg, settle_s=0.0)
    recs = res.points[0].records
    assert {r.error for r in recs} == {ErrorClass.STREAM_ERROR}
    assert all(r.content_events == 2 for r in recs)


def test_flush_cache_refusal_is_tolerated_with_progress_bar(server: FakeServer) -> None:
    server.b.flush_status = 400
    res = benchmark(server.url, settings(), settle_s=0.0, progress=True)
    assert not res.points[0].flushed and res.points[0].metrics.completed == 8


def test_unreachable_server() -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with pytest.raises(BenchmarkError, match="v1/models"):
        benchmark(url, settings(), settle_s=0.0)
    cfg = settings(LoadPoint(concurrency=2, num_prompts=2))
    res = benchmark(url, cfg, model="m", settle_s=0.0)
    assert {r.error for r in res.points[0].records} == {ErrorClass.CONNECT_ERROR}
