"""The HTTP side of the benchmark: the stage's clients, one streamed request → one RequestRecord.

Measured requests go straight through one shared `aiohttp.ClientSession`
(HttpBackend.AIOHTTP, the default). httpx's API over
`httpx_aiohttp.AiohttpTransport` cost about as much CPU per request again as
aiohttp itself (Request/Response objects, cookie extraction, header
conversion), and at C=256 those starts, run back to back, put TTFT p99 about
40 ms above a plain aiohttp client (benchmarks/bench_client.py measures
both). httpx stays the API for the control endpoints (/v1/models,
/flush_cache), over the same session. HttpBackend.NATIVE sends everything
through httpx's own pool, whose cost collapses at 256 streams (reference
bench-metrics §6, P12): for comparison only.

Timeouts: connect is enforced by the transport; the first-content and idle
limits are enforced by the runner's watchdog, which cancels a request with a
reason (`Flight.reason`), so the hot loop costs one attribute store per
chunk. The transport's read timeout is only a backstop above both.
"""

from __future__ import annotations

import asyncio
from enum import Enum
from time import perf_counter
from types import TracebackType
from typing import Any, TypeAlias

import aiohttp
import httpx
import orjson

from tuner.bench.accumulate import ERROR_TEXT_MAX, StreamAccumulator
from tuner.bench.settings import Api, RequestTimeouts
from tuner.bench.sse import SseParser
from tuner.bench.types import ErrorClass, RequestRecord
from tuner.bench.workload import RequestSpec

READ_BUFSIZE = 4 * 1024 * 1024  # aiohttp's small default buffer collapses huge streams (P13)
_HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream", "Accept-Encoding": "identity"}
Prepared: TypeAlias = bytes | httpx.Request  # what RequestSender.prepare built for its backend


class HttpBackend(str, Enum):
    """What carries the measured requests."""

    AIOHTTP = "aiohttp"  # aiohttp directly; httpx over httpx_aiohttp for the control endpoints
    NATIVE = "native"  # httpx over httpcore for everything: for comparison only (module docstring)


def endpoint(api: Api) -> str:
    """The OpenAI-compatible path of an Api."""
    return "/v1/chat/completions" if api is Api.CHAT else "/v1/completions"


def build_payload(spec: RequestSpec, api: Api, model: str) -> bytes:
    """The request body, as SGLang's benchmark sends it plus include_usage (§7)."""
    body: dict[str, Any] = {"model": model}
    if api is Api.CHAT:
        content = spec.prompt if isinstance(spec.prompt, str) else " ".join(map(str, spec.prompt))
        body["messages"] = [{"role": "user", "content": content}]
        body["max_completion_tokens"] = spec.output_tokens
    else:
        body["prompt"] = spec.prompt if isinstance(spec.prompt, str) else list(spec.prompt)
        body["max_tokens"] = spec.output_tokens
    body.update(stream=True, temperature=0.0, ignore_eos=True, stream_options={"include_usage": True})
    return orjson.dumps(body)


class HttpClients:
    """The clients of one stage: httpx for control endpoints, an aiohttp session for streams (or None).

    Create inside the running event loop (aiohttp binds its session to it);
    `async with` closes both. Explicit timeouts and a pool of ≥
    max_connections: httpx's defaults silently distort latency figures (P12).
    """

    def __init__(
        self,
        base_url: str,
        *,
        max_connections: int,
        timeouts: RequestTimeouts,
        backend: HttpBackend = HttpBackend.AIOHTTP,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        backstop_s = max(timeouts.first_byte_s, timeouts.idle_read_s) + 5.0
        timeout = httpx.Timeout(
            connect=timeouts.connect_s, read=backstop_s, write=timeouts.connect_s, pool=None
        )
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        self.session: aiohttp.ClientSession | None = None
        if backend is HttpBackend.NATIVE:
            self.control = httpx.AsyncClient(base_url=base_url, timeout=timeout, limits=limits)
            return
        from httpx_aiohttp import AiohttpTransport

        connector = aiohttp.TCPConnector(limit=max_connections, limit_per_host=0, keepalive_timeout=30.0)
        self.session = aiohttp.ClientSession(
            connector=connector,
            read_bufsize=READ_BUFSIZE,
            auto_decompress=False,
            # The same limits as the httpx Timeout above; the pool wait is unbounded (pool=None).
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=timeouts.connect_s, sock_read=backstop_s),
        )
        transport = AiohttpTransport(limits=limits, client=self.session)
        self.control = httpx.AsyncClient(
            base_url=base_url, timeout=timeout, limits=limits, transport=transport
        )

    async def __aenter__(self) -> HttpClients:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the httpx client and the aiohttp session (closing twice is harmless)."""
        try:
            await self.control.aclose()
        finally:
            if self.session is not None:
                await self.session.close()


class Flight:
    """The live state of one request, shared with the runner's watchdog."""

    __slots__ = ("t_sent", "t_activity", "status", "has_content", "reason", "task")

    def __init__(self) -> None:
        self.t_sent: float | None = None
        self.t_activity = 0.0
        self.status: int | None = None  # set once the response headers arrived
        self.has_content = False
        self.reason: ErrorClass | None = None  # set by whoever cancels the request
        self.task: asyncio.Task[Any] | None = None


class RequestSender:
    """Sends one streamed request and always returns a RequestRecord (a failure is data)."""

    def __init__(self, http: HttpClients, *, api: Api, model: str) -> None:
        self._client = http.control
        self._session = http.session
        self._api = api
        self._path = endpoint(api)
        self._url = http.base_url + self._path
        self._model = model

    def prepare(self, spec: RequestSpec) -> Prepared:
        """Build the HTTP request ahead of time, so its cost stays out of the measured window."""
        body = build_payload(spec, self._api, self._model)
        if self._session is not None:
            return body
        return self._client.build_request("POST", self._path, content=body, headers=_HEADERS)

    async def send(
        self,
        spec: RequestSpec,
        flight: Flight,
        *,
        label: str,
        t_queued: float,
        request: Prepared | None = None,
    ) -> RequestRecord:
        """Stream one request; cancellation with `flight.reason` set becomes a failed record."""
        acc = StreamAccumulator(self._api)
        if request is None:
            request = self.prepare(spec)
        error: ErrorClass | None = None
        error_text = ""
        flight.t_sent = flight.t_activity = t_sent = perf_counter()
        try:
            if self._session is not None:
                status_text = await self._stream_aiohttp(self._session, request, acc, flight)
            else:
                status_text = await self._stream_httpx(request, acc, flight)
            if status_text is not None:
                error, error_text = ErrorClass.HTTP_STATUS, status_text
        except asyncio.CancelledError:
            reason = flight.reason
            if reason is None:
                raise
            uncancel()
            error, error_text = reason, f"cancelled: {reason.value}"
        except Exception as exc:  # noqa: BLE001 - every failure becomes data
            error = classify(exc, started=flight.status is not None, has_content=acc.events > 0)
            error_text = f"{type(exc).__name__}: {exc}"[:ERROR_TEXT_MAX]
        return acc.record(
            spec,
            label=label,
            t_queued=t_queued,
            t_sent=t_sent,
            status=flight.status,
            error=error,
            error_text=error_text,
        )

    async def _stream_aiohttp(
        self, session: aiohttp.ClientSession, request: Prepared, acc: StreamAccumulator, flight: Flight
    ) -> str | None:
        """Feed the stream into acc; the error text of a non-200 answer, else None."""
        body = request if isinstance(request, bytes) else request.content
        async with session.post(self._url, data=body, headers=_HEADERS) as resp:
            flight.status = status = resp.status
            if status != 200:
                return _status_text(status, await resp.read())
            feed = SseParser().feed
            add = acc.add
            async for chunk in resp.content.iter_any():
                t = perf_counter()
                flight.t_activity = t
                for payload in feed(chunk):
                    if add(payload, t):
                        flight.has_content = True
        return None

    async def _stream_httpx(self, request: Prepared, acc: StreamAccumulator, flight: Flight) -> str | None:
        """As _stream_aiohttp, through httpx (HttpBackend.NATIVE)."""
        if isinstance(request, bytes):
            request = self._client.build_request("POST", self._path, content=request, headers=_HEADERS)
        resp = await self._client.send(request, stream=True)
        try:
            flight.status = status = resp.status_code
            if status != 200:
                return _status_text(status, await resp.aread())
            feed = SseParser().feed
            add = acc.add
            async for chunk in resp.aiter_raw():
                t = perf_counter()
                flight.t_activity = t
                for payload in feed(chunk):
                    if add(payload, t):
                        flight.has_content = True
        finally:
            await resp.aclose()
        return None


def _status_text(status: int, body: bytes) -> str:
    return f"HTTP {status}: {body[:ERROR_TEXT_MAX].decode('utf-8', 'replace')}"


def uncancel() -> None:
    """Undo a cancellation this task consumed on purpose (Task.uncancel exists from 3.11 on)."""
    task = asyncio.current_task()
    undo = getattr(task, "uncancel", None)
    if undo is not None:
        undo()


def classify(exc: BaseException, *, started: bool, has_content: bool) -> ErrorClass:
    """Map a transport exception to an ErrorClass by where it happened and what it really was.

    aiohttp's own exceptions come straight from the streaming path; through
    httpx_aiohttp (the control client) every aiohttp.ClientConnectionError
    becomes httpx.ConnectTimeout, so the root cause, not the class, decides
    whether it was a timeout.
    """
    timeout = _is_timeout(exc)
    if not started:
        if timeout:
            return ErrorClass.CONNECT_TIMEOUT
        if isinstance(exc, (httpx.TransportError, aiohttp.ClientError, OSError)):
            return ErrorClass.CONNECT_ERROR
        return ErrorClass.CLIENT_ERROR
    if timeout:
        return ErrorClass.IDLE_TIMEOUT if has_content else ErrorClass.FIRST_BYTE_TIMEOUT
    if isinstance(exc, (httpx.TransportError, httpx.StreamError, aiohttp.ClientError, OSError)):
        return ErrorClass.STREAM_ERROR
    return ErrorClass.CLIENT_ERROR


def _is_timeout(exc: BaseException) -> bool:
    seen: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in seen and len(seen) < 10:
        seen.append(cur)
        cur = cur.__cause__ or cur.__context__
    root = seen[-1]
    if isinstance(root, TimeoutError):  # aiohttp.ServerTimeoutError and asyncio's are TimeoutErrors
        return True
    name = type(root).__name__
    module = type(root).__module__
    # httpx (native) and httpcore raise their own timeout classes without a TimeoutError root.
    return module.split(".")[0] in ("httpx", "httpcore") and "Timeout" in name
