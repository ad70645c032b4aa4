"""The HTTP side of the benchmark: the stage's clients, one streamed request → one RequestRecord.

Measured requests go straight through one shared `aiohttp.ClientSession`.
httpx's own pool costs 60–230 µs of CPU per streamed event and falls behind
at 64+ streams (reference bench-metrics §6, P12); httpx's API over an
aiohttp transport still cost about as much CPU per request again as aiohttp
itself, which put TTFT p99 about 40 ms above a plain aiohttp client at C=256
(benchmarks/bench_client.py measures the tuner's client against plain httpx
and a bare aiohttp reference). httpx, with its own transport, serves the few
control calls (/v1/models, /flush_cache), which are never timed.

Timeouts: connect is enforced by the transport; the first-content and idle
limits are enforced by the runner's watchdog, which cancels a request with a
reason (`Flight.reason`), so the hot loop costs one attribute store per
event. Activity is an SSE event, not a byte: a server that sends only comments,
empty chunks or one event that never ends is idle, and is timed out as such.
The transport's read timeout is only a backstop above both.

Bounds: one SSE event holds at most `MAX_EVENT_BYTES` (sse.py), a stream at most
`max_tokens + EXTRA_EVENTS` content events (each carries at least one token), an
error body is read to `ERROR_BODY_MAX` bytes; past one, the request fails as a
stream error naming the bound. The control calls go through tuner.sglang.http
(bounded in bytes and time, stop-aware); no client reads the environment's proxies.
"""

from __future__ import annotations

import asyncio
from time import perf_counter
from types import TracebackType
from typing import Any

import aiohttp
import httpx
import orjson

from tuner.bench.accumulate import ERROR_TEXT_MAX, StreamAccumulator
from tuner.bench.settings import Api, RequestTimeouts
from tuner.bench.sse import SseParser, StreamLimit
from tuner.bench.types import ErrorClass, RequestRecord
from tuner.bench.workload import RequestSpec
from tuner.names import one_line
from tuner.sglang.auth import NO_AUTH, ServerAuth, httpx_auth
from tuner.sglang.http import CONTROL_DEADLINE_S, async_client

READ_BUFSIZE = 4 * 1024 * 1024  # aiohttp's small default buffer collapses huge streams (P13)
ERROR_BODY_MAX = 64 * 1024  # of a non-200 answer's body: the start says what went wrong
EXTRA_EVENTS = 64  # content events past max_tokens before a stream is cut (a server that never stops)
_HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream", "Accept-Encoding": "identity"}


ENDPOINTS = {Api.COMPLETIONS: "/v1/completions", Api.CHAT: "/v1/chat/completions", Api.GENERATE: "/generate"}


def endpoint(api: Api) -> str:
    """The server path of an Api."""
    return ENDPOINTS[api]


def build_payload(spec: RequestSpec, api: Api, model: str) -> bytes:
    """The request body, as SGLang's benchmark sends it plus include_usage (§7)."""
    if api is Api.GENERATE:  # bench_serving's sglang backend: usage comes in every chunk's meta_info
        prompt_key = "text" if isinstance(spec.prompt, str) else "input_ids"
        params = {"max_new_tokens": spec.output_tokens, "temperature": 0.0, "ignore_eos": True}
        prompt: object = spec.prompt if isinstance(spec.prompt, str) else list(spec.prompt)
        return orjson.dumps({prompt_key: prompt, "sampling_params": params, "stream": True})
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
    """The clients of one stage: an aiohttp session for the measured streams, httpx for control calls.

    Create inside the running event loop (aiohttp binds its session to it);
    `async with` closes both. Explicit timeouts and a pool of ≥
    max_connections: the libraries' defaults silently distort latency figures (P12).
    """

    def __init__(
        self,
        base_url: str,
        *,
        max_connections: int,
        timeouts: RequestTimeouts,
        auth: ServerAuth | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.auth = auth or NO_AUTH  # in memory only; the streams and control calls carry the key
        backstop_s = max(timeouts.first_byte_s, timeouts.idle_read_s) + 5.0
        connector = aiohttp.TCPConnector(limit=max_connections, limit_per_host=0, keepalive_timeout=30.0)
        self.session = aiohttp.ClientSession(
            connector=connector,
            read_bufsize=READ_BUFSIZE,
            auto_decompress=False,
            trust_env=False,  # never the environment's proxy: it would see the key and the load
            # connect and read bounded; the pool wait is not (the concurrency semaphore bounds it).
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=timeouts.connect_s, sock_read=backstop_s),
        )
        self.control = async_client(
            base_url,
            timeout=httpx.Timeout(
                connect=timeouts.connect_s, read=backstop_s, write=timeouts.connect_s, pool=None
            ),
            # a control answer is instant on a healthy server: the first-content limit bounds it too
            deadline_s=max(timeouts.connect_s + 1.0, min(CONTROL_DEADLINE_S, timeouts.first_byte_s)),
            limits=httpx.Limits(max_connections=4, max_keepalive_connections=4),
            auth=httpx_auth(auth),
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
        self._session = http.session
        self._api = api
        self._url = http.base_url + endpoint(api)
        self._headers = {**_HEADERS, **http.auth.headers(endpoint(api))}
        self._model = model

    def prepare(self, spec: RequestSpec) -> bytes:
        """Build the request body ahead of time, so its cost stays out of the measured window."""
        return build_payload(spec, self._api, self._model)

    async def send(
        self,
        spec: RequestSpec,
        flight: Flight,
        *,
        label: str,
        t_queued: float,
        request: bytes | None = None,
    ) -> RequestRecord:
        """Stream one request; cancellation with `flight.reason` set becomes a failed record."""
        acc = StreamAccumulator(self._api)
        acc.max_events = spec.output_tokens + EXTRA_EVENTS
        if request is None:
            request = self.prepare(spec)
        error: ErrorClass | None = None
        error_text = ""
        flight.t_sent = flight.t_activity = t_sent = perf_counter()
        try:
            status_text = await self._stream(request, acc, flight)
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
            error_text = one_line(f"{type(exc).__name__}: {exc}"[:ERROR_TEXT_MAX])
        return acc.record(
            spec,
            label=label,
            t_queued=t_queued,
            t_sent=t_sent,
            status=flight.status,
            error=error,
            error_text=error_text,
        )

    async def _stream(self, body: bytes, acc: StreamAccumulator, flight: Flight) -> str | None:
        """Feed the stream into acc; the error text of a non-200 answer, else None."""
        # never a redirect: the tuner's own server has no reason to send one, and it would take the
        # request (and its key) elsewhere
        post = self._session.post(self._url, data=body, headers=self._headers, allow_redirects=False)
        async with post as resp:
            flight.status = status = resp.status
            if status != 200:
                return _status_text(status, await _read_head(resp.content, ERROR_BODY_MAX))
            feed = SseParser().feed
            add = acc.add
            most = acc.max_events
            async for chunk in resp.content.iter_any():
                t = perf_counter()
                for payload in feed(chunk):
                    flight.t_activity = t  # an event, not a byte: comments and empty chunks are idle
                    if add(payload, t):
                        flight.has_content = True
                        if acc.events > most:
                            raise StreamLimit(
                                f"more than {most:,} content events for max_tokens "
                                f"{most - EXTRA_EVENTS:,}: the stream never ends"
                            )
        return None


async def _read_head(content: aiohttp.StreamReader, limit: int) -> bytes:
    """Up to `limit` bytes of a body (an endless error body is cut; the watchdog bounds the time)."""
    parts: list[bytes] = []
    size = 0
    while size < limit:
        part = await content.read(limit - size)
        if not part:
            break
        parts.append(part)
        size += len(part)
    return b"".join(parts)


def _status_text(status: int, body: bytes) -> str:
    return one_line(f"HTTP {status}: {body[:ERROR_TEXT_MAX].decode('utf-8', 'replace')}")


def uncancel() -> None:
    """Undo a cancellation this task consumed on purpose (Task.uncancel exists from 3.11 on)."""
    task = asyncio.current_task()
    undo = getattr(task, "uncancel", None)
    if undo is not None:
        undo()


def classify(exc: BaseException, *, started: bool, has_content: bool) -> ErrorClass:
    """Map a transport exception to an ErrorClass by where it happened and what it really was.

    aiohttp's exceptions come from the streaming path, httpx's from the control
    calls; the root cause, not the class, decides whether it was a timeout.
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
    if isinstance(exc, StreamLimit):
        return ErrorClass.STREAM_ERROR
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
    # httpx and httpcore raise their own timeout classes without a TimeoutError root.
    return module.split(".")[0] in ("httpx", "httpcore") and "Timeout" in name
