"""SSE parser: framing, split positions, and the contract against httpx.MockTransport."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tuner.bench.accumulate import StreamAccumulator
from tuner.bench.settings import Api
from tuner.bench.sse import SseParser

STREAM = (
    b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n'
    b": keep-alive comment\n\n"
    b'data: {"choices":[{"delta":{"content":"Hel"}}]}\r\n\r\n'
    b"event: message\nid: 7\n"
    b'data: {"choices":[{"delta":\ndata: {"content":"lo"}}]}\n\n'
    b'data:{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2}}\n\n'
    b"data: [DONE]\n\n"
)
EXPECTED = [
    b'{"choices":[{"delta":{"role":"assistant","content":""}}]}',
    b'{"choices":[{"delta":{"content":"Hel"}}]}',
    b'{"choices":[{"delta":\n{"content":"lo"}}]}',
    b'{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2}}',
    b"[DONE]",
]


def feed_all(chunks: list[bytes]) -> list[bytes]:
    parser = SseParser()
    out: list[bytes] = []
    for c in chunks:
        out.extend(parser.feed(c))
    return out + parser.flush()


def test_whole_stream_in_one_chunk() -> None:
    assert feed_all([STREAM]) == EXPECTED


@pytest.mark.parametrize("cut", range(1, len(STREAM)))
def test_split_at_every_position(cut: int) -> None:
    assert feed_all([STREAM[:cut], STREAM[cut:]]) == EXPECTED


def test_byte_by_byte() -> None:
    assert feed_all([bytes([b]) for b in STREAM]) == EXPECTED


def test_cr_only_line_endings_and_crlf_split_between_chunks() -> None:
    assert feed_all([b"data: a\r", b"\r", b"data: b\r\n", b"\r\n"]) == [b"a", b"b"]


def test_incomplete_event_is_held_until_blank_line() -> None:
    parser = SseParser()
    assert parser.feed(b"data: x\n") == []
    assert parser.pending > 0
    assert parser.feed(b"\n") == [b"x"]
    assert parser.pending == 0


def test_event_without_data_and_extra_blank_lines_yield_nothing() -> None:
    assert feed_all([b"\n\n\nid: 3\n\n:comment\n\n\n\ndata: z\n\n\n\n"]) == [b"z"]


def test_flush_returns_final_event_missing_blank_line() -> None:
    parser = SseParser()
    assert parser.feed(b"data: tail") == []
    assert parser.flush() == [b"tail"]


def test_mock_transport_stream_contract() -> None:
    """The same bytes streamed through httpx in odd chunk sizes parse to the same events and counters."""

    class Chunked(httpx.AsyncByteStream):
        async def __aiter__(self):  # type: ignore[override]
            for i in range(0, len(STREAM), 7):
                yield STREAM[i : i + 7]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Chunked())

    async def run() -> tuple[list[bytes], StreamAccumulator]:
        acc = StreamAccumulator(Api.CHAT)
        out: list[bytes] = []
        parser = SseParser()
        client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
        async with client, client.stream("POST", "http://x/v1/chat/completions") as resp:
            t = 0.0
            async for chunk in resp.aiter_raw():
                t += 1.0
                for p in parser.feed(chunk):
                    out.append(p)
                    acc.add(p, t)
        return out, acc

    out, acc = asyncio.run(run())
    assert out == EXPECTED
    assert acc.events == 2  # the empty role delta is not content
    assert acc.completion_tokens == 2 and acc.prompt_tokens == 5
