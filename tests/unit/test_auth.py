"""The API keys a launch has, which request carries which, and SGLang's own rule in the simulator."""

from __future__ import annotations

import httpx

from tuner.sglang.auth import ServerAuth, auth_for_url, auth_from_argv, httpx_auth
from tuner.sim.auth import authorized, required_key

KEY, ADMIN = "sk-normal-1234", "sk-admin-5678"


def test_keys_are_read_from_the_argv_in_both_spellings() -> None:
    auth = auth_from_argv(["--model-path", "m", "--api-key", KEY, f"--admin-api-key={ADMIN}"])
    assert (auth.api_key, auth.admin_api_key) == (KEY, ADMIN)
    assert not auth_from_argv(["--model-path", "m"])


def test_each_path_carries_the_key_sglang_wants() -> None:
    both = ServerAuth(api_key=KEY, admin_api_key=ADMIN)
    assert both.headers("/v1/completions") == {"Authorization": f"Bearer {KEY}"}
    assert both.headers("/flush_cache") == {"Authorization": f"Bearer {ADMIN}"}
    assert both.headers("/health") == {} and both.headers("/ready") == {} and both.headers("/metrics") == {}
    assert ServerAuth(api_key=KEY).headers("/flush_cache") == {"Authorization": f"Bearer {KEY}"}


def test_the_keys_never_show_in_a_repr() -> None:
    auth = ServerAuth(api_key=KEY, admin_api_key=ADMIN)
    assert KEY not in repr(auth) and ADMIN not in repr(auth)
    assert auth.secrets() == {KEY, ADMIN}


def test_url_commands_take_the_flag_else_the_environment() -> None:
    assert auth_for_url("flag-key-1", {"SGLANG_API_KEY": "env-key-1"}).api_key == "flag-key-1"
    assert auth_for_url(None, {"SGLANG_API_KEY": "env-key-1"}).api_key == "env-key-1"
    assert not auth_for_url(None, {})


def test_httpx_requests_carry_the_header_per_path() -> None:
    seen: dict[str, str | None] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen[request.url.path] = request.headers.get("Authorization")
        return httpx.Response(200)

    auth = httpx_auth(ServerAuth(api_key=KEY, admin_api_key=ADMIN))
    with httpx.Client(base_url="http://x", transport=httpx.MockTransport(handler), auth=auth) as client:
        client.get("/server_info")
        client.post("/flush_cache")
        client.get("/health")
    assert seen == {"/server_info": f"Bearer {KEY}", "/flush_cache": f"Bearer {ADMIN}", "/health": None}


def test_the_simulator_asks_what_sglang_asks_per_release() -> None:
    assert required_key("0.5.23", "GET", "/health_generate", KEY, ADMIN) is None
    assert required_key("0.5.23", "POST", "/generate", KEY, ADMIN) == KEY
    assert required_key("0.5.23", "POST", "/flush_cache", KEY, ADMIN) == ADMIN
    assert required_key("0.5.23", "POST", "/flush_cache", KEY, None) == KEY
    assert required_key("0.5.7", "POST", "/flush_cache", KEY, ADMIN) == KEY  # no admin key before 0.5.8
    assert (
        required_key("0.5.23", "POST", "/generate", None, ADMIN) is None
    )  # admin key alone opens normal ones
    assert authorized(f"Bearer {KEY}", KEY) and authorized(f"bearer {KEY}", KEY)
    assert not authorized(None, KEY) and not authorized(f"Bearer {KEY}x", KEY) and not authorized(KEY, KEY)
