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
SAMPLE_EVERY = 8  # every 8th request of a load point keeps its output text for the NaN check
SAMPLE_CHARS = 512  # of it, at most this much (the start: NaN shows from the first tokens; kept in the row)
MAX_USAGE_TOKENS = 10_000_000  # more tokens in one request than any context holds: not a real count


def usage_problem(name: str, value: object) -> str | None:
    """Why a usage count cannot be true (negative, absurdly large, not an integer), or None."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_USAGE_TOKENS:
        expected = f"expected an integer 0..{MAX_USAGE_TOKENS:,}"
        return f"usage.{name} {repr(value)[:40]} is not a plausible token count ({expected})"
    return None


class StreamAccumulator:
    """Folds SSE data payloads and their arrival times into a request's counters (pure)."""

    __slots__ = (
        "chat",
        "native",
        "_native_tokens",
        "_native_text",
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
        "bad_usage",
        "text",
        "_chars",
        "max_events",
    )

    def __init__(self, api: Api) -> None:
        self.chat = api is Api.CHAT
        self.native = api is Api.GENERATE
        self._native_tokens = 0  # completion_tokens of the last /generate chunk
        self._native_text = ""  # /generate's text so far (its chunks repeat it, or add to it)
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
        self.bad_usage = ""
        self.text: list[str] = []  # the output's start (SAMPLE_CHARS), kept for sampled requests
        self._chars = 0
        self.max_events = 1 << 62  # the client sets max_tokens + a margin: a stream that never ends is cut

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
        if self.native:
            content = self._native_chunk(obj)
        elif choices:
            c0 = choices[0]
            if self.chat:
                delta = c0.get("delta")
                if delta:
                    if delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning"):
                        content = True
                        self._keep(delta.get("content"))
                    elif delta.get("tool_calls"):
                        self.tool_events += 1
            elif c0.get("text"):
                content = True
                self._keep(c0.get("text"))
        usage = obj.get("usage")
        if usage:
            self._take_usage(usage)
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

    def _native_chunk(self, obj: dict[str, object]) -> bool:
        """A /generate chunk: content when it brings visible text and new tokens (bench_serving's rule).

        SGLang repeats the whole text so far in every chunk, or sends only the new piece with
        --incremental-streaming-output; either way the chunk is content when its text is not empty
        and meta_info.completion_tokens grew (a chunk that only repeats counts no token)."""
        piece = obj.get("text")
        meta = obj.get("meta_info")
        if isinstance(meta, dict):
            self._take_usage({k: meta[k] for k in ("completion_tokens", "prompt_tokens") if k in meta})
            told = meta.get("completion_tokens")
            if isinstance(told, int) and not isinstance(told, bool):
                if told <= self._native_tokens:
                    return False
                self._native_tokens = told
        if not isinstance(piece, str) or not piece:
            return False
        if self._chars < SAMPLE_CHARS:
            whole = piece if piece.startswith(self._native_text) else self._native_text + piece
            self._native_text = whole[:SAMPLE_CHARS]
            self.text, self._chars = [self._native_text], len(self._native_text)
        return True

    def _keep(self, piece: object) -> None:
        if self._chars < SAMPLE_CHARS and isinstance(piece, str):
            self.text.append(piece)
            self._chars += len(piece)

    def _take_usage(self, usage: object) -> None:
        if not isinstance(usage, dict):
            self.bad_usage = self.bad_usage or f"usage {repr(usage)[:40]} is not an object"
            return
        for name in ("completion_tokens", "prompt_tokens"):
            if name not in usage:
                continue
            problem = usage_problem(name, usage[name])
            if problem:
                self.bad_usage = self.bad_usage or problem
            elif name == "completion_tokens":
                self.completion_tokens = usage[name]
            else:
                self.prompt_tokens = usage[name]

    def _usage_disagrees(self, spec: RequestSpec) -> str:
        """Why the usage cannot describe what was streamed and asked ("" when it can): more completion
        tokens than max_tokens allows, or none although content came."""
        told = self.completion_tokens
        if told is None:
            return ""
        if told > spec.output_tokens:
            return (
                f"usage.completion_tokens {told:,} is more than the request's max_tokens "
                f"{spec.output_tokens:,}"
            )
        if told == 0 and self.events > 0:
            return f"usage.completion_tokens is 0 although {self.events:,} content events came"
        return ""

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
            elif self.bad_usage or self._usage_disagrees(spec):
                error, error_text = ErrorClass.BAD_USAGE, self.bad_usage or self._usage_disagrees(spec)
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
            text_sample="".join(self.text)[:SAMPLE_CHARS] if sampled(spec.index) and success else None,
        )


def sampled(index: int) -> bool:
    """Whether request `index` of a load point keeps its output for the NaN check (every SAMPLE_EVERY-th)."""
    return index % SAMPLE_EVERY == 0
