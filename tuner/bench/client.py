"""The HTTP side of the benchmark: one httpx.AsyncClient, one streamed request → one RequestRecord.

httpx's API over `httpx_aiohttp.AiohttpTransport`: the native httpcore pool
costs 75–270 µs of CPU per streamed event and collapses at 256 streams on
a 2-core box (reference bench-metrics §6, P12); aiohttp does the socket work
for a fraction of that (benchmarks/bench_client.py measures it). The native
transport stays selectable for comparison.

Timeouts: connect is enforced by the transport; the first-content and idle
limits are enforced by the runner's watchdog, which cancels a request with a
reason (`Flight.reason`), so the hot loop costs one attribute store per
chunk. The transport's read timeout is only a backstop above both.
"""

from __future__ import annotations

import asyncio
from enum import Enum
from time import perf_counter
from typing import Any

import aiohttp
import httpx
import orjson

from tuner.bench.settings import Api, RequestTimeouts
from tuner.bench.sse import DONE, SseParser
from tuner.bench.types import ErrorClass, OutputSource, RequestRecord
from tuner.bench.workload import RequestSpec

READ_BUFSIZE = 4 * 1024 * 1024  # aiohttp's small default buffer collapses huge streams (P13)
ERROR_TEXT_MAX = 500
_HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream", "Accept-Encoding": "identity"}


class HttpBackend(str, Enum):
    """Which transport sits under the httpx API."""

    AIOHTTP = "aiohttp"  # httpx_aiohttp.AiohttpTransport: the default
    NATIVE = "native"  # httpcore: for comparison only (see module docstring)


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


def make_http_client(
    base_url: str,
    *,
    max_connections: int,
    timeouts: RequestTimeouts,
    backend: HttpBackend = HttpBackend.AIOHTTP,
) -> httpx.AsyncClient:
    """An AsyncClient with explicit timeouts and a pool of ≥ max_connections (httpx defaults distort, P12)."""
    backstop_s = max(timeouts.first_byte_s, timeouts.idle_read_s) + 5.0
    timeout = httpx.Timeout(connect=timeouts.connect_s, read=backstop_s, write=timeouts.connect_s, pool=None)
    limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
    if backend is HttpBackend.NATIVE:
        return httpx.AsyncClient(base_url=base_url, timeout=timeout, limits=limits)
    from httpx_aiohttp import AiohttpTransport

    def session() -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(limit=max_connections, limit_per_host=0, keepalive_timeout=30.0)
        return aiohttp.ClientSession(connector=connector, read_bufsize=READ_BUFSIZE, auto_decompress=False)

    transport = AiohttpTransport(limits=limits, client=session)
    return httpx.AsyncClient(base_url=base_url, timeout=timeout, limits=limits, transport=transport)


class Flight:
    """The live state of one request, shared with the runner's watchdog."""

    __slots__ = ("t_sent", "t_activity", "has_content", "reason", "task")

    def __init__(self) -> None:
        self.t_sent: float | None = None
        self.t_activity = 0.0
        self.has_content = False
        self.reason: ErrorClass | None = None  # set by whoever cancels the request
        self.task: asyncio.Task[Any] | None = None


class StreamAccumulator:
    """Folds SSE data payloads and their arrival times into a request's counters (pure)."""

    __slots__ = (
        "chat",
        "t_first",
        "t_prev",
        "t_end",
        "gaps",
        "events",
        "tool_events",
        "completion_tokens",
        "prompt_tokens",
        "error_text",
        "bad_payload",
    )

    def __init__(self, api: Api) -> None:
        self.chat = api is Api.CHAT
        self.t_first: float | None = None
        self.t_prev = 0.0
        self.t_end: float | None = None
        self.gaps: list[float] = []
        self.events = 0
        self.tool_events = 0
        self.completion_tokens: int | None = None
        self.prompt_tokens: int | None = None
        self.error_text = ""
        self.bad_payload = ""

    def add(self, payload: bytes, t: float) -> bool:
        """Take one payload that arrived at t; True if it was a content event."""
        self.t_end = t
        if payload == DONE:
            return False
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            self.bad_payload = self.bad_payload or payload[:ERROR_TEXT_MAX].decode("utf-8", "replace")
            return False
        if type(obj) is not dict:
            self.bad_payload = self.bad_payload or payload[:ERROR_TEXT_MAX].decode("utf-8", "replace")
            return False
        content = False
        choices = obj.get("choices")
        if choices:
            c0 = choices[0]
            if self.chat:
                delta = c0.get("delta")
                if delta:
                    if delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning"):
                        content = True
                    elif delta.get("tool_calls"):
                        self.tool_events += 1
            elif c0.get("text"):
                content = True
        usage = obj.get("usage")
        if usage:
            self.completion_tokens = usage.get("completion_tokens", self.completion_tokens)
            self.prompt_tokens = usage.get("prompt_tokens", self.prompt_tokens)
        if "error" in obj or obj.get("object") == "error":
            err = obj.get("error", obj)
            msg = err.get("message", err) if isinstance(err, dict) else err
            self.error_text = self.error_text or str(msg)[:ERROR_TEXT_MAX]
        if content:
            if self.t_first is None:
                self.t_first = t
            else:
                self.gaps.append(t - self.t_prev)
            self.t_prev = t
            self.events += 1
        return content

    def record(
        self,
        spec: RequestSpec,
        *,
        label: str,
        t_queued: float,
        t_sent: float | None,
        status: int | None,
        error: ErrorClass | None,
        error_text: str = "",
    ) -> RequestRecord:
        """The finished record; the error, if None, is derived from what the stream held."""
        if error is None:
            if self.error_text:
                error, error_text = ErrorClass.STREAM_ERROR, self.error_text
            elif self.bad_payload:
                error, error_text = ErrorClass.BAD_EVENT, self.bad_payload
            elif self.events == 0:
                error, error_text = ErrorClass.NO_CONTENT, "stream ended without a content event"
        success = error is None
        if self.completion_tokens is not None:
            out, source = self.completion_tokens, OutputSource.USAGE
        elif success:
            out, source = spec.output_tokens, OutputSource.REQUESTED
        else:
            out, source = self.events, OutputSource.EVENTS
        return RequestRecord(
            load_point=label,
            index=spec.index,
            input_tokens_declared=spec.input_tokens,
            input_tokens_server=self.prompt_tokens,
            output_tokens_requested=spec.output_tokens,
            output_tokens=out,
            output_source=source,
            success=success,
            error=error,
            error_text=error_text,
            status_code=status,
            t_queued_s=t_queued,
            t_sent_s=t_sent,
            t_first_s=self.t_first,
            t_last_token_s=self.t_prev if self.t_first is not None else None,
            t_end_s=self.t_end,
            itl_gaps_s=tuple(self.gaps),
            content_events=self.events,
            tool_call_events=self.tool_events,
        )


class RequestSender:
    """Sends one streamed request and always returns a RequestRecord (a failure is data)."""

    def __init__(self, client: httpx.AsyncClient, *, api: Api, model: str) -> None:
        self._client = client
        self._api = api
        self._path = endpoint(api)
        self._model = model

    def prepare(self, spec: RequestSpec) -> httpx.Request:
        """Build the HTTP request ahead of time, so its cost stays out of the measured window."""
        body = build_payload(spec, self._api, self._model)
        return self._client.build_request("POST", self._path, content=body, headers=_HEADERS)

    async def send(
        self,
        spec: RequestSpec,
        flight: Flight,
        *,
        label: str,
        t_queued: float,
        request: httpx.Request | None = None,
    ) -> RequestRecord:
        """Stream one request; cancellation with `flight.reason` set becomes a failed record."""
        acc = StreamAccumulator(self._api)
        if request is None:
            request = self.prepare(spec)
        status: int | None = None
        started = False  # response headers received
        flight.t_sent = flight.t_activity = t_sent = perf_counter()
        try:
            resp = await self._client.send(request, stream=True)
            try:
                status = resp.status_code
                started = True
                if status != 200:
                    text = (await resp.aread())[:ERROR_TEXT_MAX].decode("utf-8", "replace")
                    return acc.record(
                        spec,
                        label=label,
                        t_queued=t_queued,
                        t_sent=t_sent,
                        status=status,
                        error=ErrorClass.HTTP_STATUS,
                        error_text=f"HTTP {status}: {text}",
                    )
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
        except asyncio.CancelledError:
            reason = flight.reason
            if reason is None:
                raise
            uncancel()
            return acc.record(
                spec,
                label=label,
                t_queued=t_queued,
                t_sent=t_sent,
                status=status,
                error=reason,
                error_text=f"cancelled: {reason.value}",
            )
        except Exception as exc:  # noqa: BLE001 - every failure becomes data
            error = classify(exc, started=started, has_content=acc.events > 0)
            return acc.record(
                spec,
                label=label,
                t_queued=t_queued,
                t_sent=t_sent,
                status=status,
                error=error,
                error_text=f"{type(exc).__name__}: {exc}"[:ERROR_TEXT_MAX],
            )
        return acc.record(spec, label=label, t_queued=t_queued, t_sent=t_sent, status=status, error=None)


def uncancel() -> None:
    """Undo a cancellation this task consumed on purpose (Task.uncancel exists from 3.11 on)."""
    task = asyncio.current_task()
    undo = getattr(task, "uncancel", None)
    if undo is not None:
        undo()


def classify(exc: BaseException, *, started: bool, has_content: bool) -> ErrorClass:
    """Map a transport exception to an ErrorClass by where it happened and what it really was.

    httpx_aiohttp maps every aiohttp.ClientConnectionError to httpx.ConnectTimeout,
    so the root cause, not the httpx class, decides whether it was a timeout.
    """
    timeout = _is_timeout(exc)
    if not started:
        if timeout:
            return ErrorClass.CONNECT_TIMEOUT
        if isinstance(exc, httpx.TransportError):
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
