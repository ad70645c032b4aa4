"""Folds one request's SSE payloads and their arrival times into a RequestRecord (pure, no I/O).

The per-request fold of the metric spec (reference bench-metrics §7): content
events, their gaps, the last usage seen, in-stream errors. The HTTP side
(client.py) calls `add` once per payload with the chunk's arrival time.
"""

from __future__ import annotations

import orjson

from tuner.bench.settings import Api
from tuner.bench.sse import DONE
from tuner.bench.types import ErrorClass, OutputSource, RequestRecord
from tuner.bench.workload import RequestSpec

ERROR_TEXT_MAX = 500


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
