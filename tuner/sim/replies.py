"""What every simulated endpoint shares: the app's state key, JSON and SSE replies, the busy check."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from tuner.sim.state import ServerState

STATE: web.AppKey[ServerState] = web.AppKey("state", ServerState)
DONE_EVENT = b"data: [DONE]\n\n"


def json_response(obj: Any, status: int = 200) -> web.Response:
    """A JSON reply."""
    return web.Response(body=orjson.dumps(obj), status=status, content_type="application/json")


def error_response(message: str, status: int = 400) -> web.Response:
    """SGLang's OpenAI-style error body."""
    return json_response(
        {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": status},
        status,
    )


async def json_body(request: web.Request) -> Any:
    """The request's JSON body, or the 400 response SGLang gives a body that is not JSON."""
    try:
        return await request.json(loads=orjson.loads)
    except (ValueError, orjson.JSONDecodeError):
        return error_response("Invalid JSON body.")


def sse(obj: Any) -> bytes:
    """One server-sent event."""
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def busy(state: ServerState) -> web.Response | None:
    """The 503 a draining server or a dead scheduler answers, or None."""
    if state.status == "Draining":
        return error_response("The server is shutting down.", 503)
    if state.engine.dead:
        return error_response("The scheduler is dead.", 503)
    return None
