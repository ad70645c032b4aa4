"""SGLang's `--api-key` / `--admin-api-key`, as the clients of a server must present them.

SGLang (reference: its `add_api_key_middleware`) lets the health, readiness and metrics
endpoints through unauthenticated, asks every other endpoint for `Authorization: Bearer
<api-key>`, and from 0.5.8 on asks its admin endpoints (`/flush_cache` among those the tuner
calls) for the admin key when one is set, the API key otherwise. The keys stay in memory:
`ServerAuth` never shows them in its repr, and nothing here writes them anywhere.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field

import httpx

API_KEY_ENV = "SGLANG_API_KEY"
# Always open, whatever keys the server has (matched by prefix, as SGLang does).
OPEN_PREFIXES = ("/health", "/ready", "/metrics")
# Admin endpoints among those the tuner calls: the admin key when the server has one.
ADMIN_PATHS = frozenset({"/flush_cache"})


@dataclass(frozen=True, kw_only=True, slots=True)
class ServerAuth:
    """The keys a server was launched with (None: that key is not set)."""

    api_key: str | None = field(default=None, repr=False)
    admin_api_key: str | None = field(default=None, repr=False)

    def __bool__(self) -> bool:
        return bool(self.api_key or self.admin_api_key)

    def key_for(self, path: str) -> str | None:
        """The key a request to `path` must carry, None when it needs none."""
        if path.startswith(OPEN_PREFIXES):
            return None
        if path in ADMIN_PATHS and self.admin_api_key:
            return self.admin_api_key
        return self.api_key

    def headers(self, path: str) -> dict[str, str]:
        """The Authorization header for a request to `path` (empty when it needs none)."""
        key = self.key_for(path)
        return {"Authorization": f"Bearer {key}"} if key else {}

    def secrets(self) -> frozenset[str]:
        """The keys themselves, to scrub from any text before it is shown or stored."""
        return frozenset(k for k in (self.api_key, self.admin_api_key) if k)


NO_AUTH = ServerAuth()


class BearerAuth(httpx.Auth):
    """httpx authentication that adds the key each request's path needs."""

    def __init__(self, auth: ServerAuth) -> None:
        self._auth = auth

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers.update(self._auth.headers(request.url.path))
        yield request


def httpx_auth(auth: ServerAuth | None) -> httpx.Auth | None:
    """What to hand httpx's `auth=` for a server with these keys (None: no keys)."""
    return BearerAuth(auth) if auth else None


def auth_from_argv(argv: Sequence[str]) -> ServerAuth:
    """The keys of a launch's argv (`--api-key K`, `--api-key=K`, `--admin-api-key ...`)."""
    found: dict[str, str] = {}
    for i, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        if flag not in ("--api-key", "--admin-api-key"):
            continue
        if not eq:
            value = argv[i + 1] if i + 1 < len(argv) else ""
        if value:
            found[flag] = value
    return ServerAuth(api_key=found.get("--api-key"), admin_api_key=found.get("--admin-api-key"))


def auth_for_url(api_key: str | None, environ: Mapping[str, str] | None = None) -> ServerAuth:
    """The keys for `bench --url` / `gate --url`: `--api-key`, else the SGLANG_API_KEY variable."""
    env = os.environ if environ is None else environ
    key = api_key or env.get(API_KEY_ENV) or None
    return ServerAuth(api_key=key)
