"""`--api-key` and `--admin-api-key` as SGLang enforces them (its add_api_key_middleware), per release.

Health, readiness and metrics stay open; every other endpoint wants `Authorization: Bearer
<api-key>` when the server has one. From 0.5.8 on (when `--admin-api-key` came) the admin
endpoints the simulator serves (`/flush_cache`) want the admin key when one is set, else the
API key; an endpoint asked without the right key answers 401 `{"error": "Unauthorized"}`.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable

from aiohttp import web

from tuner.sim.replies import STATE, json_response
from tuner.sim.resolve import at_least

OPEN_PREFIXES = ("/health", "/ready", "/metrics")
ADMIN_PATHS = frozenset({"/flush_cache"})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def required_key(
    version: str, method: str, path: str, api_key: str | None, admin_api_key: str | None
) -> str | None:
    """The key a request must present, None when it may pass without one."""
    if method == "OPTIONS" or path.startswith(OPEN_PREFIXES):
        return None
    if at_least(version, "0.5.8") and path in ADMIN_PATHS and admin_api_key:
        return admin_api_key
    return api_key or None


def authorized(header: str | None, key: str) -> bool:
    """True when an Authorization header carries `Bearer <key>` (compared in constant time)."""
    scheme, _, token = (header or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.encode(), key.encode())


@web.middleware
async def api_key_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """401 for a protected endpoint asked without the launch's key."""
    state = request.app[STATE]
    args = state.launch.args
    key = required_key(
        state.launch.version, request.method, request.path, args.get("api_key"), args.get("admin_api_key")
    )
    if key is not None and not authorized(request.headers.get("Authorization"), key):
        return json_response({"error": "Unauthorized"}, 401)
    return await handler(request)
