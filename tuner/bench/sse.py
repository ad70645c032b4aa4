"""Incremental Server-Sent-Events parser over raw byte chunks (pure, no I/O).

Feed it the bytes as they come off the socket, split anywhere; it returns the
`data` payload of every event that is complete. An event ends at a blank
line; lines end in LF, CRLF or CR; several `data:` lines of one event are
joined with LF; comments (`:` lines) and other fields (`event:`, `id:`,
`retry:`) are dropped; an event without data yields nothing.

The hot path is one `bytes.split` per chunk and a slice per event: an
OpenAI stream is almost always `data: {...}\\n\\n`, one event per line.

An event that grows past `MAX_EVENT_BYTES` without its blank line raises
`StreamLimit`: a server that streams one endless event would otherwise fill
the memory while the stream looks busy.
"""

from __future__ import annotations

from typing import Any

import orjson

DONE = b"[DONE]"
MAX_EVENT_BYTES = 4 * 1024 * 1024  # one event: a chunk of a few tokens is ~300 bytes, a usage ~500


class StreamLimit(ValueError):
    """A server's stream went past a bound (an endless event, more events than asked)."""


class SseParser:
    """Turns byte chunks into complete SSE data payloads (bytes, without the `data:` prefix)."""

    __slots__ = ("_buf", "_max")

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self._buf = b""
        self._max = max_event_bytes

    def feed(self, chunk: bytes) -> list[bytes]:
        """Add bytes; return the data payloads of the events they complete, in order.

        Raises StreamLimit when the event still open holds more than the bound."""
        out = self._feed(chunk)
        if len(self._buf) > self._max:
            self._buf = b""
            raise StreamLimit(f"one SSE event longer than {self._max:,} bytes without its end")
        return out

    def _feed(self, chunk: bytes) -> list[bytes]:
        buf = self._buf + chunk if self._buf else chunk
        if b"\r" in buf:
            # A CR at the very end may be the first half of a CRLF: keep it for the next chunk.
            tail = b""
            if buf.endswith(b"\r"):
                buf, tail = buf[:-1], b"\r"
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            if tail:
                blocks = buf.split(b"\n\n")
                self._buf = blocks.pop() + tail
                return _payloads(blocks)
        blocks = buf.split(b"\n\n")
        self._buf = blocks.pop()
        return _payloads(blocks)

    def flush(self) -> list[bytes]:
        """End of stream: a final event that lacked its blank line still counts."""
        rest, self._buf = self._buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n"), b""
        return _payloads([rest]) if rest.strip() else []

    @property
    def pending(self) -> int:
        """Bytes held back waiting for the rest of an event."""
        return len(self._buf)


def _payloads(blocks: list[bytes]) -> list[bytes]:
    out: list[bytes] = []
    for block in blocks:
        if block.startswith(b"data: ") and b"\n" not in block:
            out.append(block[6:])  # the common case
            continue
        data = _parse_block(block)
        if data is not None:
            out.append(data)
    return out


def _parse_block(block: bytes) -> bytes | None:
    parts: list[bytes] = []
    for line in block.split(b"\n"):
        if not line or line.startswith(b":"):
            continue
        name, colon, value = line.partition(b":")
        if name != b"data":
            continue
        if not colon:
            parts.append(b"")  # a bare "data" line is an empty data line (SSE spec)
            continue
        parts.append(value[1:] if value.startswith(b" ") else value)
    if not parts:
        return None
    return b"\n".join(parts)


def decode(payload: bytes) -> Any:
    """Parse one data payload as JSON (orjson); raises orjson.JSONDecodeError."""
    return orjson.loads(payload)
