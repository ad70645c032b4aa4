"""SGLang's generation endpoints: /v1/completions, /v1/chat/completions and /generate (reference §3)."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any

from aiohttp import web

from tuner.sim import text
from tuner.sim.engine import DONE, EngineError, Request
from tuner.sim.replies import DONE_EVENT, STATE, busy, error_response, json_body, json_response, sse
from tuner.sim.state import ServerState

log = logging.getLogger(__name__)


async def _tokens(state: ServerState, req: Request) -> AsyncIterator[str]:
    """Pieces of `req` as the scheduler produces them; raises EngineError if it dies."""
    state.engine.submit(req)
    state.requests_total += 1
    try:
        while True:
            item = await req.queue.get()
            if item is DONE:
                return
            if isinstance(item, EngineError):
                raise item
            yield item[0]
    finally:
        if not req.finished:
            state.engine.cancel(req)


def _make_request(
    state: ServerState,
    prompt: str,
    prompt_tokens: int,
    max_tokens: int | None,
    body: dict[str, Any],
    default_max: int,
) -> Request:
    # a request must fit the KV pool on its own (it could never finish otherwise)
    limit = min(state.scenario.model.context_len, state.plan.kv_tokens) - prompt_tokens
    max_new = max(1, min(limit, int(max_tokens if max_tokens is not None else default_max)))
    temperature = float(body.get("temperature", 1.0) if body.get("temperature") is not None else 1.0)
    answer = text.answer(
        prompt,
        max_tokens=max_new,
        ignore_eos=bool(body.get("ignore_eos", False)),
        temperature=temperature,
        request_seed=int(body.get("seed") or uuid.uuid4().int & 0xFFFFFFFF),
    )
    if state.drift_at is not None and temperature == 0 and len(answer.pieces) > state.drift_at:
        pieces = list(answer.pieces)
        pieces[state.drift_at :] = [" drift"] * (len(pieces) - state.drift_at)
        answer = replace(answer, pieces=tuple(pieces))
    if state.kv_canary_violation:
        state.kv_canary_violation = False
        log.warning(
            "kv_canary violation: launch_tag=HEAD fail_reason=verify_real_kv_hash slot_idx=17 position=5 "
            "stored_token=100 expected_token=100 stored_chain_hash=0x00000000000000aa "
            "expected_aux=0x00000000000000ab"
        )
    return Request(prompt_tokens=max(1, prompt_tokens), answer=answer)


def _too_long(state: ServerState, prompt_tokens: int) -> web.Response | None:
    ctx = state.scenario.model.context_len
    if prompt_tokens >= ctx:
        return error_response(
            f"The input ({prompt_tokens} tokens) is longer than the model's context length ({ctx} tokens)."
        )
    if prompt_tokens >= state.plan.kv_tokens:
        return error_response(
            f"Input length ({prompt_tokens} tokens) exceeds the maximum allowed length "
            f"({state.plan.kv_tokens - 1} tokens). Use a shorter input or enable --allow-auto-truncate."
        )
    return None


def _usage(req: Request) -> dict[str, Any]:
    return {
        "prompt_tokens": req.prompt_tokens,
        "total_tokens": req.prompt_tokens + req.generated,
        "completion_tokens": req.generated,
        "prompt_tokens_details": None,
        "reasoning_tokens": 0,
    }


@dataclass(frozen=True, kw_only=True, slots=True)
class _OpenAiCall:
    """One parsed /v1/completions or /v1/chat/completions request."""

    chat: bool
    body: dict[str, Any]
    prompt: str
    prompt_tokens: int
    max_tokens: int | None
    default_max: int

    @property
    def kind(self) -> str:
        return "chat.completion" if self.chat else "text_completion"

    @property
    def chunk_kind(self) -> str:
        return "chat.completion.chunk" if self.chat else "text_completion"


def _openai_call(body: dict[str, Any], chat: bool) -> _OpenAiCall | web.Response:
    """The prompt and token limits of an OpenAI-style body, or the 400 a malformed one gets."""
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return error_response("messages must be a non-empty list.")
        return _OpenAiCall(
            chat=True,
            body=body,
            prompt=str(messages[-1].get("content") or ""),
            prompt_tokens=text.chat_prompt_tokens(messages),
            max_tokens=body.get("max_completion_tokens", body.get("max_tokens")),
            default_max=4096,
        )
    raw = body.get("prompt")
    if isinstance(raw, list) and raw and isinstance(raw[0], int):
        prompt, prompt_tokens = "ids:" + ",".join(map(str, raw[:64])), len(raw)
    elif isinstance(raw, str):
        prompt, prompt_tokens = raw, text.count_tokens(raw)
    else:
        return error_response("prompt must be a string or a list of token ids.")
    return _OpenAiCall(
        chat=False,
        body=body,
        prompt=prompt,
        prompt_tokens=prompt_tokens,
        max_tokens=body.get("max_tokens"),
        default_max=16,
    )


async def _openai(request: web.Request, chat: bool) -> web.StreamResponse:
    state = request.app[STATE]
    if (refused := busy(state)) is not None:
        return refused
    body = await json_body(request)
    if isinstance(body, web.Response):
        return body
    call = _openai_call(body, chat)
    if isinstance(call, web.Response):
        return call
    if (err := _too_long(state, call.prompt_tokens)) is not None:
        return err
    if state.faults.fails(body):
        return error_response("Internal server error (injected)", 500)
    req = _make_request(state, call.prompt, call.prompt_tokens, call.max_tokens, body, call.default_max)
    rid = ("chatcmpl-" if chat else "cmpl-") + req.rid
    state.active_http += 1
    try:
        if not body.get("stream"):
            return await _openai_whole(state, call, req, rid)
        return await _openai_stream(request, state, call, req, rid)
    finally:
        state.active_http -= 1


async def _openai_whole(state: ServerState, call: _OpenAiCall, req: Request, rid: str) -> web.Response:
    try:
        out = "".join([p async for p in _tokens(state, req)])
    except EngineError as exc:
        return error_response(str(exc), 500)
    choice: dict[str, Any] = {
        "index": 0,
        "logprobs": None,
        "finish_reason": req.answer.finish_reason,
        "matched_stop": None,
    }
    if call.chat:
        choice["message"] = {
            "role": "assistant",
            "content": out,
            "reasoning_content": None,
            "tool_calls": None,
        }
    else:
        choice["text"] = out
    return json_response(
        {
            "id": rid,
            "object": call.kind,
            "created": int(time.time()),
            "model": state.launch.served_model_name,
            "choices": [choice],
            "usage": state.faults.usage(call.body, _usage(req)),
        }
    )


async def _openai_stream(
    request: web.Request, state: ServerState, call: _OpenAiCall, req: Request, rid: str
) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    head = {
        "id": rid,
        "object": call.chunk_kind,
        "created": int(time.time()),
        "model": state.launch.served_model_name,
    }

    def chunk(payload: dict[str, Any], finish: str | None) -> bytes:
        c: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": finish}
        if call.chat:
            c["delta"] = payload
        else:
            c["text"] = payload.get("content", "")
        return sse({**head, "choices": [c]})

    if call.chat:
        await resp.write(chunk({"role": "assistant", "content": ""}, None))
    try:
        async for piece in _tokens(state, req):
            await resp.write(chunk({"content": piece}, None))
    except EngineError:
        return resp  # connection ends without [DONE], as when the server dies
    await resp.write(chunk({}, req.answer.finish_reason))
    options = call.body.get("stream_options") or {}
    if options.get("include_usage") or state.launch.args.get("stream_response_default_include_usage"):
        await resp.write(sse({**head, "choices": [], "usage": state.faults.usage(call.body, _usage(req))}))
    await resp.write(DONE_EVENT)
    return resp


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _openai(request, chat=True)


async def completions(request: web.Request) -> web.StreamResponse:
    return await _openai(request, chat=False)


def _meta(state: ServerState, req: Request, finished: bool, completion_tokens: int) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "id": req.rid,
        "finish_reason": None,
        "prompt_tokens": req.prompt_tokens,
        "weight_version": "default",
        "completion_tokens": completion_tokens,
        "cached_tokens": 0,
    }
    if finished:
        reason = req.answer.finish_reason
        meta["finish_reason"] = (
            {"type": "length", "length": completion_tokens}
            if reason == "length"
            else {"type": "stop", "matched": 151329}
        )
        meta["e2e_latency"] = time.monotonic() - req.arrival_s
    return meta


async def generate(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    if (refused := busy(state)) is not None:
        return refused
    body = await json_body(request)
    if isinstance(body, web.Response):
        return body
    params = dict(body.get("sampling_params") or {})
    if "input_ids" in body and body["input_ids"] is not None:
        input_ids = body["input_ids"]
        prompt, prompt_tokens = "ids:" + ",".join(map(str, input_ids[:64])), len(input_ids)
    elif isinstance(body.get("text"), str):
        prompt, prompt_tokens = body["text"], text.count_tokens(body["text"])
    else:
        return error_response("Either text or input_ids should be provided.")
    if (err := _too_long(state, prompt_tokens)) is not None:
        return err
    req = _make_request(state, prompt, prompt_tokens, params.get("max_new_tokens"), params, 128)
    incremental = bool(
        state.launch.args.get("incremental_streaming_output") or state.launch.args.get("stream_output")
    )
    state.active_http += 1
    try:
        if not body.get("stream"):
            try:
                out = "".join([p async for p in _tokens(state, req)])
            except EngineError as exc:
                return error_response(str(exc), 500)
            output_ids = [text.token_id(p) for p in text.tokenize(out)]
            return json_response(
                {"text": out, "output_ids": output_ids, "meta_info": _meta(state, req, True, req.generated)}
            )
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        so_far: list[str] = []
        ids: list[int] = []
        try:
            async for piece in _tokens(state, req):
                so_far.append(piece)
                ids.append(text.token_id(piece))
                done = len(so_far) >= len(req.answer.pieces)
                out = piece if incremental else "".join(so_far)
                out_ids = ids[-1:] if incremental else ids
                await resp.write(
                    sse(
                        {
                            "text": out,
                            "output_ids": out_ids,
                            "meta_info": _meta(state, req, done, len(so_far)),
                        }
                    )
                )
        except EngineError:
            return resp
        await resp.write(DONE_EVENT)
        return resp
    finally:
        state.active_http -= 1
