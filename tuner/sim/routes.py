"""SGLang's HTTP endpoints over aiohttp.web (reference §3)."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import orjson
from aiohttp import web

from tuner.sim import memory, text
from tuner.sim.engine import DONE, EngineError, Request
from tuner.sim.resolve import at_least
from tuner.sim.state import ServerState

log = logging.getLogger(__name__)

STATE: web.AppKey[ServerState] = web.AppKey("state", ServerState)
HEALTH_TIMEOUT_S = 20.0
_DONE_EVENT = b"data: [DONE]\n\n"


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(obj), status=status, content_type="application/json")


def _error(message: str, status: int = 400) -> web.Response:
    return _json(
        {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": status},
        status,
    )


async def _json_body(request: web.Request) -> Any:
    """The request's JSON body, or the 400 response SGLang gives a body that is not JSON."""
    try:
        return await request.json(loads=orjson.loads)
    except (ValueError, orjson.JSONDecodeError):
        return _error("Invalid JSON body.")


def _sse(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


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


def _gate(state: ServerState) -> web.Response | None:
    if state.status == "Draining":
        return _error("The server is shutting down.", 503)
    if state.engine.dead:
        return _error("The scheduler is dead.", 503)
    return None


def _too_long(state: ServerState, prompt_tokens: int) -> web.Response | None:
    ctx = state.scenario.model.context_len
    if prompt_tokens >= ctx:
        return _error(
            f"The input ({prompt_tokens} tokens) is longer than the model's context length ({ctx} tokens)."
        )
    if prompt_tokens >= state.plan.kv_tokens:
        return _error(
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


async def _openai(request: web.Request, chat: bool) -> web.StreamResponse:
    state = request.app[STATE]
    if (busy := _gate(state)) is not None:
        return busy
    body = await _json_body(request)
    if isinstance(body, web.Response):
        return body
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return _error("messages must be a non-empty list.")
        prompt = str(messages[-1].get("content") or "")
        prompt_tokens = text.chat_prompt_tokens(messages)
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        default_max = 4096
    else:
        raw = body.get("prompt")
        if isinstance(raw, list) and raw and isinstance(raw[0], int):
            prompt, prompt_tokens = "ids:" + ",".join(map(str, raw[:64])), len(raw)
        elif isinstance(raw, str):
            prompt, prompt_tokens = raw, text.count_tokens(raw)
        else:
            return _error("prompt must be a string or a list of token ids.")
        max_tokens, default_max = body.get("max_tokens"), 16
    if (err := _too_long(state, prompt_tokens)) is not None:
        return err
    req = _make_request(state, prompt, prompt_tokens, max_tokens, body, default_max)
    rid = ("chatcmpl-" if chat else "cmpl-") + req.rid
    model = state.launch.served_model_name
    created = int(time.time())
    kind = "chat.completion" if chat else "text_completion"
    state.active_http += 1
    try:
        if not body.get("stream"):
            try:
                out = "".join([p async for p in _tokens(state, req)])
            except EngineError as exc:
                return _error(str(exc), 500)
            choice: dict[str, Any] = {
                "index": 0,
                "logprobs": None,
                "finish_reason": req.answer.finish_reason,
                "matched_stop": None,
            }
            if chat:
                choice["message"] = {
                    "role": "assistant",
                    "content": out,
                    "reasoning_content": None,
                    "tool_calls": None,
                }
            else:
                choice["text"] = out
            return _json(
                {
                    "id": rid,
                    "object": kind,
                    "created": created,
                    "model": model,
                    "choices": [choice],
                    "usage": _usage(req),
                }
            )
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        chunk_kind = "chat.completion.chunk" if chat else "text_completion"

        def chunk(payload: dict[str, Any], finish: str | None) -> bytes:
            c: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": finish}
            if chat:
                c["delta"] = payload
            else:
                c["text"] = payload.get("content", "")
            return _sse({"id": rid, "object": chunk_kind, "created": created, "model": model, "choices": [c]})

        if chat:
            await resp.write(chunk({"role": "assistant", "content": ""}, None))
        try:
            async for piece in _tokens(state, req):
                await resp.write(chunk({"content": piece}, None))
        except EngineError:
            return resp  # connection ends without [DONE], as when the server dies
        await resp.write(chunk({}, req.answer.finish_reason))
        options = body.get("stream_options") or {}
        if options.get("include_usage") or state.launch.args.get("stream_response_default_include_usage"):
            await resp.write(
                _sse(
                    {
                        "id": rid,
                        "object": chunk_kind,
                        "created": created,
                        "model": model,
                        "choices": [],
                        "usage": _usage(req),
                    }
                )
            )
        await resp.write(_DONE_EVENT)
        return resp
    finally:
        state.active_http -= 1


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
    if (busy := _gate(state)) is not None:
        return busy
    body = await _json_body(request)
    if isinstance(body, web.Response):
        return body
    params = dict(body.get("sampling_params") or {})
    if "input_ids" in body and body["input_ids"] is not None:
        input_ids = body["input_ids"]
        prompt, prompt_tokens = "ids:" + ",".join(map(str, input_ids[:64])), len(input_ids)
    elif isinstance(body.get("text"), str):
        prompt, prompt_tokens = body["text"], text.count_tokens(body["text"])
    else:
        return _error("Either text or input_ids should be provided.")
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
                return _error(str(exc), 500)
            output_ids = [text.token_id(p) for p in text.tokenize(out)]
            return _json(
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
                    _sse(
                        {
                            "text": out,
                            "output_ids": out_ids,
                            "meta_info": _meta(state, req, done, len(so_far)),
                        }
                    )
                )
        except EngineError:
            return resp
        await resp.write(_DONE_EVENT)
        return resp
    finally:
        state.active_http -= 1


async def health(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if state.status != "Up" or state.engine.dead:
        return web.Response(status=503)
    req = Request(prompt_tokens=1, answer=text.Answer(pieces=(" ",), finish_reason="length"))
    try:
        state.engine.submit(req)
        item = await asyncio.wait_for(req.queue.get(), HEALTH_TIMEOUT_S)
    except (asyncio.TimeoutError, EngineError):
        item = None
    if item is None or isinstance(item, EngineError):
        log.error(
            "Health check failed. Server couldn't get a response from detokenizer for last "
            f"{HEALTH_TIMEOUT_S:.0f} seconds."
        )
        state.status = "UnHealthy" if state.status == "Up" else state.status
        return web.Response(status=503)
    return web.Response(status=200)


async def ready(request: web.Request) -> web.Response:
    state = request.app[STATE]
    ok = state.status == "Up" and not state.engine.dead
    return _json({"status": "ready" if ok else "not ready"}, 200 if ok else 503)


def server_info_doc(state: ServerState) -> dict[str, Any]:
    """The /server_info body: resolved args, KV size, memory usage, version."""
    plan, launch = state.plan, state.launch
    new = at_least(launch.version, "0.5.22")
    graph_gb = round(memory.mib_to_gb(plan.graph_mib), 2)
    usage: dict[str, Any] = {
        "weight": round(memory.mib_to_gb(plan.weights_mib), 2),
        "kvcache": round(memory.mib_to_gb(max(0.0, plan.kv_mib)), 2),
        "token_capacity": plan.kv_tokens,
        "graph": {"decode": graph_gb} if new else graph_gb,
    }
    if new:
        usage["startup_available"] = round(memory.mib_to_gb(plan.free_mib), 2)
        usage["token_capacity_swa"] = 0
    args = {k: v for k, v in launch.args.items()}
    internal = dict(args)
    internal.update(
        memory_usage=usage,
        last_gen_throughput=state.engine.last_gen_tok_s,
        effective_max_running_requests_per_dp=state.engine.max_running,
        num_running_reqs=len(state.engine.running) + len(state.engine.prefilling),
        num_waiting_reqs=len(state.engine.waiting),
        num_used_tokens=state.engine.used_tokens,
        num_retracted_reqs=state.engine.retracted_total,
    )
    doc = dict(args)
    doc.update(
        status="ready" if state.status == "Up" else state.status.lower(),
        max_total_num_tokens=plan.kv_tokens,
        max_req_input_len=min(state.scenario.model.context_len - 1, plan.kv_tokens - 1),
        internal_states=[internal],
        version=launch.version,
    )
    if at_least(launch.version, "0.5.20"):
        doc.update(launch_command=" ".join(state.argv), startup_time=state.started_s, frontend="python")
    return doc


async def server_info(request: web.Request) -> web.Response:
    return _json(server_info_doc(request.app[STATE]))


async def get_server_info(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if at_least(state.launch.version, "0.5.6"):
        log.warning(
            "Endpoint '/get_server_info' is deprecated and will be removed in a future version. "
            "Please use '/server_info' instead."
        )
    return _json(server_info_doc(state))


async def model_info(request: web.Request) -> web.Response:
    state = request.app[STATE]
    return _json(
        {
            "model_path": state.launch.model_path,
            "tokenizer_path": state.launch.model_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": state.scenario.model.name.lower(),
            "architectures": [state.scenario.model.architecture],
        }
    )


async def models(request: web.Request) -> web.Response:
    state = request.app[STATE]
    name = state.launch.served_model_name
    return _json(
        {
            "object": "list",
            "data": [
                {
                    "id": name,
                    "object": "model",
                    "created": int(state.started_s),
                    "owned_by": "sglang",
                    "root": name,
                    "max_model_len": state.scenario.model.context_len,
                }
            ],
        }
    )


async def flush_cache(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if state.engine.in_flight:
        return web.Response(
            status=400, text="Cache not flushed. Please check if there are running or waiting requests."
        )
    return web.Response(
        status=200,
        text="Cache flushed.\nPlease check backend logs for more details. "
        "(When there are running or waiting requests, the operation will not be performed.)\n",
    )


async def tokenize(request: web.Request) -> web.Response:
    state = request.app[STATE]
    body = await _json_body(request)
    if isinstance(body, web.Response):
        return body
    prompt = body.get("prompt", "")
    pieces = text.tokenize(prompt if isinstance(prompt, str) else " ".join(map(str, prompt)))
    return _json(
        {
            "tokens": [text.token_id(p) for p in pieces],
            "count": len(pieces),
            "max_model_len": state.scenario.model.context_len,
        }
    )


async def metrics(request: web.Request) -> web.Response:
    state = request.app[STATE]
    e = state.engine
    labels = (
        f'{{model_name="{state.launch.served_model_name}",engine_type="unified",'
        'tp_rank="0",pp_rank="0",moe_ep_rank="0"}'
    )
    graph = bool(
        state.launch.graphs and e.running and len(e.running) <= max(state.launch.captured_bs or (0,))
    )
    rows = [
        (
            "sglang:num_running_reqs",
            "gauge",
            "The number of running requests.",
            len(e.running) + len(e.prefilling),
        ),
        ("sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue.", len(e.waiting)),
        ("sglang:num_retracted_reqs", "gauge", "The number of retracted requests.", e.retracted_total),
        ("sglang:num_used_tokens", "gauge", "The number of used tokens.", e.used_tokens),
        ("sglang:token_usage", "gauge", "The token usage.", e.used_tokens / max(1, e.capacity_tokens)),
        ("sglang:gen_throughput", "gauge", "The generation throughput (token/s).", e.last_gen_tok_s),
        (
            "sglang:max_total_num_tokens",
            "gauge",
            "Maximum total number of tokens in the KV cache pool.",
            state.plan.kv_tokens,
        ),
        ("sglang:is_cuda_graph", "gauge", "Whether the batch is using CUDA graph.", 1.0 if graph else 0.0),
        ("sglang:prompt_tokens_total", "counter", "Number of prefill tokens processed.", e.prompt_total),
        (
            "sglang:generation_tokens_total",
            "counter",
            "Number of generation tokens processed.",
            e.generated_total,
        ),
        ("sglang:num_requests_total", "counter", "Number of requests processed.", state.requests_total),
    ]
    out = []
    for name, kind, help_text, value in rows:
        out += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", f"{name}{labels} {float(value)}"]
    return web.Response(text="\n".join(out) + "\n", content_type="text/plain")


def make_app(state: ServerState) -> web.Application:
    """The aiohttp application of one simulated server."""
    app = web.Application(client_max_size=64 * 2**20)
    app[STATE] = state
    version = state.launch.version
    r = app.router
    r.add_get("/health", health)
    r.add_get("/health_generate", health)
    if at_least(version, "0.5.20"):
        r.add_get("/ready", ready)
    r.add_get("/get_server_info", get_server_info)
    if at_least(version, "0.5.6"):
        r.add_get("/server_info", server_info)
    r.add_get("/get_model_info", model_info)
    r.add_get("/model_info", model_info)
    r.add_get("/v1/models", models)
    r.add_post("/v1/chat/completions", chat_completions)
    r.add_post("/v1/completions", completions)
    r.add_post("/generate", generate)
    r.add_route("GET", "/flush_cache", flush_cache)
    r.add_route("POST", "/flush_cache", flush_cache)
    r.add_post("/v1/tokenize", tokenize)
    r.add_post("/tokenize", tokenize)
    if state.launch.enable_metrics:
        r.add_get("/metrics", metrics)
    return app
