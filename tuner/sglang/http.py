"""The tuner's own HTTP clients of its servers: never through a proxy, every answer bounded.

A server under test can answer anything: a `/v1/models` trickled a byte a second, an endless error
body, a header that never ends. The socket's read timeout does not bound those (each byte arrives
in time), so every request made through these clients is bounded three ways:

- in time: the whole exchange (connect, headers, body) ends by `deadline_s` (httpx.ReadTimeout);
- in bytes: a body longer than `max_bytes` ends the read (`AnswerTooLarge`); headers are bounded by
  the HTTP parser (h11: 100 KiB); bodies are asked and read uncompressed (no gzip bomb expands);
- by a stop request: `stop()` (default: a signal asked the process to stop) is polled every
  `POLL_S` while anything is awaited, and ends the exchange with `Stopped` within that time.

The exceptions are httpx transport errors, so a caller that already handles `httpx.HTTPError` treats
them as the failed request they are. The clients never read the environment's proxy settings
(`trust_env=False`): a request to the tuner's own 127.0.0.1 server through `http_proxy` would hand
the proxy the server's API key.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from time import monotonic
from typing import Any, TypeVar

import httpx

from tuner.interrupts import INTERRUPTS

T = TypeVar("T")

POLL_S = 0.05
MAX_BODY_BYTES = 16 * 1024 * 1024  # a /server_info of the largest model is ~50 KiB; a gate answer less
CONTROL_DEADLINE_S = 30.0

_SSL: ssl.SSLContext | None = None


class AnswerTooLarge(httpx.ReadError):
    """A server's answer went past the byte bound."""


class Stopped(httpx.ReadError):
    """A stop was asked while the answer was awaited."""


def _stop_requested() -> bool:
    return INTERRUPTS.requested


def _ssl_context() -> ssl.SSLContext:
    """One TLS context for every client (the tuner's servers speak plain HTTP; httpx makes one anyway,
    and making it costs more than a readiness probe)."""
    global _SSL
    if _SSL is None:
        _SSL = ssl.create_default_context()
    return _SSL


async def _bounded(
    step: Awaitable[T], *, deadline: float, stop: Callable[[], bool], request: httpx.Request, what: str
) -> T:
    """`step`'s result, unless the deadline passes (ReadTimeout) or a stop is asked (Stopped) first."""
    task = asyncio.ensure_future(step)
    try:
        while True:
            left = deadline - monotonic()
            if left <= 0:
                raise httpx.ReadTimeout(f"no complete answer ({what}) within the deadline", request=request)
            done, _ = await asyncio.wait({task}, timeout=min(POLL_S, left))
            if done:
                return task.result()
            if stop():
                raise Stopped(f"stop requested while waiting for the answer ({what})", request=request)
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def _next_chunk(it: AsyncIterator[bytes]) -> bytes | None:
    try:
        return await it.__anext__()
    except StopAsyncIteration:
        return None


class _BoundedStream(httpx.AsyncByteStream):
    def __init__(
        self,
        inner: httpx.AsyncByteStream,
        *,
        request: httpx.Request,
        deadline: float,
        max_bytes: int,
        stop: Callable[[], bool],
    ) -> None:
        self._inner = inner
        self._request = request
        self._deadline = deadline
        self._max_bytes = max_bytes
        self._stop = stop

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        chunks = self._inner.__aiter__()
        while True:
            chunk = await _bounded(
                _next_chunk(chunks),
                deadline=self._deadline,
                stop=self._stop,
                request=self._request,
                what="body",
            )
            if chunk is None:
                return
            seen += len(chunk)
            if seen > self._max_bytes:
                raise AnswerTooLarge(
                    f"answer longer than {self._max_bytes:,} bytes: not read further", request=self._request
                )
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class BoundedTransport(httpx.AsyncBaseTransport):
    """An httpx transport whose every exchange is bounded in time and bytes and ends on a stop."""

    def __init__(
        self,
        inner: httpx.AsyncBaseTransport | None = None,
        *,
        deadline_s: float = CONTROL_DEADLINE_S,
        max_bytes: int = MAX_BODY_BYTES,
        stop: Callable[[], bool] | None = None,
        limits: httpx.Limits | None = None,
    ) -> None:
        self._inner = inner or httpx.AsyncHTTPTransport(
            verify=_ssl_context(), trust_env=False, limits=limits or httpx.Limits()
        )
        self.deadline_s = deadline_s
        self.max_bytes = max_bytes
        self._stop = stop or _stop_requested

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        deadline = monotonic() + self.deadline_s
        request.headers["Accept-Encoding"] = "identity"
        response = await _bounded(
            self._inner.handle_async_request(request),
            deadline=deadline,
            stop=self._stop,
            request=request,
            what="status and headers",
        )
        assert isinstance(response.stream, httpx.AsyncByteStream)
        stream = _BoundedStream(
            response.stream, request=request, deadline=deadline, max_bytes=self.max_bytes, stop=self._stop
        )
        # the bytes bound is on what is read: a compressed body is not expanded (a gzip bomb would be
        # a thousand times the bound); a server that compresses anyway gives an unreadable answer
        headers = [(k, v) for k, v in response.headers.raw if k.lower() != b"content-encoding"]
        return httpx.Response(
            response.status_code, headers=headers, stream=stream, extensions=response.extensions
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


def async_client(
    base_url: str,
    *,
    timeout: httpx.Timeout,
    deadline_s: float = CONTROL_DEADLINE_S,
    max_bytes: int = MAX_BODY_BYTES,
    auth: httpx.Auth | None = None,
    limits: httpx.Limits | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    stop: Callable[[], bool] | None = None,
) -> httpx.AsyncClient:
    """An httpx client of one of the tuner's servers: no proxy, bounded answers (`transport`: a
    test's fake server, bounded the same way)."""
    bounded = BoundedTransport(
        transport, deadline_s=deadline_s, max_bytes=max_bytes, stop=stop, limits=limits
    )
    return httpx.AsyncClient(
        base_url=base_url,
        timeout=timeout,
        transport=bounded,
        trust_env=False,
        auth=auth,
        verify=_ssl_context(),
    )


def get(
    base_url: str,
    path: str,
    *,
    timeout_s: float = 10.0,
    connect_s: float = 2.0,
    max_bytes: int = MAX_BODY_BYTES,
    auth: httpx.Auth | None = None,
    headers: Mapping[str, str] | None = None,
    stop: Callable[[], bool] | None = None,
) -> httpx.Response:
    """One bounded GET from synchronous code (its own event loop): the whole answer within
    `timeout_s`, read; raises httpx.HTTPError (ReadTimeout, AnswerTooLarge, Stopped among them)."""

    async def fetch() -> httpx.Response:
        timeout = httpx.Timeout(timeout_s, connect=min(connect_s, timeout_s))
        async with async_client(
            base_url, timeout=timeout, deadline_s=timeout_s, max_bytes=max_bytes, auth=auth, stop=stop
        ) as client:
            return await client.get(path, headers=dict(headers or {}))

    return asyncio.run(fetch())


def json_object(response: httpx.Response) -> dict[str, Any] | None:
    """The answer's JSON object, None when it is not one (a list, a string, not JSON)."""
    try:
        data = response.json()
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


class SyncClient:
    """`get(path)` of one server from synchronous code, each call bounded as `get` is (a readiness
    probe, /server_info): the drop-in for the few blocking calls of a launch."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 10.0,
        connect_s: float = 2.0,
        max_bytes: int = MAX_BODY_BYTES,
        auth: httpx.Auth | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> None:
        self.base_url = base_url
        self._opts: dict[str, Any] = {
            "timeout_s": timeout_s,
            "connect_s": connect_s,
            "max_bytes": max_bytes,
            "auth": auth,
            "stop": stop,
        }

    def get(self, path: str) -> httpx.Response:
        return get(self.base_url, path, **self._opts)

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        return None
