"""SGLang's HTTP endpoints over aiohttp.web (reference §3): health, server and model info, metrics, the app.

The generation endpoints live in tuner.sim.generation.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import web

from tuner.sim import memory, text
from tuner.sim.auth import api_key_middleware
from tuner.sim.engine import EngineError, Request
from tuner.sim.generation import chat_completions, completions, generate
from tuner.sim.replies import STATE, json_body, json_response
from tuner.sim.resolve import at_least
from tuner.sim.state import ServerState

log = logging.getLogger(__name__)

HEALTH_TIMEOUT_S = 20.0


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
    return json_response({"status": "ready" if ok else "not ready"}, 200 if ok else 503)


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
    return json_response(server_info_doc(request.app[STATE]))


async def get_server_info(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if at_least(state.launch.version, "0.5.6"):
        log.warning(
            "Endpoint '/get_server_info' is deprecated and will be removed in a future version. "
            "Please use '/server_info' instead."
        )
    return json_response(server_info_doc(state))


async def model_info(request: web.Request) -> web.Response:
    state = request.app[STATE]
    return json_response(
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
    return json_response(
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
    body = await json_body(request)
    if isinstance(body, web.Response):
        return body
    prompt = body.get("prompt", "")
    pieces = text.tokenize(prompt if isinstance(prompt, str) else " ".join(map(str, prompt)))
    return json_response(
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
    keys = state.launch.args.get("api_key") or state.launch.args.get("admin_api_key")
    middlewares = [api_key_middleware] if keys else []
    app = web.Application(client_max_size=64 * 2**20, middlewares=middlewares)
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
