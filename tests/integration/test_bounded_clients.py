"""Every read of a server's answer is bounded in bytes and time and ends on a stop request, and the
tuner's own clients never go through the environment's proxy (tests/support/faultserver.py).

Each call runs in a helper thread joined with a generous limit: before the bounds, these calls
never returned (a trickle, an endless body or SSE stream), so the limit is what fails them.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from support.faultserver import FaultServer, ProxyTrap

from tuner.bench.runner import benchmark
from tuner.bench.settings import BenchSettings
from tuner.bench.types import BenchResult, ErrorClass
from tuner.errors import BenchmarkError
from tuner.gate.run import run_gate
from tuner.gate.settings import GateSettings
from tuner.sglang.auth import ServerAuth
from tuner.sglang.server import server_info

pytestmark = pytest.mark.integration

NEVER_S = 60.0  # a bounded call ends far sooner; an unbounded one never does


def _settings(**timeouts: str) -> BenchSettings:
    limits = {"connect": "1s", "first_byte": "2s", "idle_read": "1s", "stage_deadline": "60s", **timeouts}
    return BenchSettings.model_validate(
        {
            "workload": {"input_len": 8, "output_len": 4},
            "load_points": [{"concurrency": 2, "num_prompts": 2}],
            "warmup_requests": 0,
            "flush_cache": False,
            "settle": 0,
            "timeouts": limits,
        }
    )


def _within(fn: Callable[[], Any], limit_s: float = NEVER_S) -> Any:
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back below
            box["error"] = exc

    helper = threading.Thread(target=target, daemon=True)
    helper.start()
    helper.join(limit_s)
    assert not helper.is_alive(), f"still waiting on the server after {limit_s:.0f} s"
    if "error" in box:
        raise box["error"]
    return box["value"]


@pytest.fixture
def fault(request: pytest.FixtureRequest) -> Iterator[FaultServer]:
    with FaultServer(request.param) as server:
        yield server


def _errors(result: BenchResult) -> set[ErrorClass | None]:
    return {r.error for p in result.points for r in p.records}


def _texts(result: BenchResult) -> str:
    return " | ".join(r.error_text for p in result.points for r in p.records)


@pytest.mark.parametrize(
    ("fault", "wanted", "words"),
    [
        ("sse_comments", {ErrorClass.IDLE_TIMEOUT, ErrorClass.HANG}, ""),
        ("sse_blank", {ErrorClass.IDLE_TIMEOUT, ErrorClass.HANG}, ""),
        ("sse_endless_event", {ErrorClass.STREAM_ERROR}, "one SSE event longer than"),
        ("sse_flood", {ErrorClass.STREAM_ERROR}, "content events for max_tokens"),
        ("endless_error", {ErrorClass.HTTP_STATUS}, "HTTP 500"),
        ("usage_lie", {ErrorClass.BAD_USAGE}, "more than the request's max_tokens"),
        ("usage_zero", {ErrorClass.BAD_USAGE}, "is 0 although 4 content events came"),
        ("trickle_headers", {ErrorClass.FIRST_BYTE_TIMEOUT, ErrorClass.HANG}, ""),
    ],
    indirect=["fault"],
)
def test_a_bad_stream_fails_its_requests_with_a_reason_and_ends(
    fault: FaultServer, wanted: set[ErrorClass], words: str
) -> None:
    result = _within(lambda: benchmark(fault.url, _settings(), model="fault-model"))
    errors = _errors(result)
    assert errors and errors <= wanted, (errors, _texts(result))
    assert words in _texts(result)
    assert all(len(r.error_text) <= 600 for p in result.points for r in p.records)


@pytest.mark.parametrize("fault", ["trickle_models", "trickle_headers", "endless_json"], indirect=True)
def test_a_control_answer_that_never_ends_is_a_clear_error(fault: FaultServer) -> None:
    with pytest.raises(BenchmarkError, match="cannot read the model name"):
        _within(lambda: benchmark(fault.url, _settings()))


@pytest.mark.parametrize("fault", ["trickle_headers", "endless_json"], indirect=True)
def test_server_info_of_a_server_that_never_finishes_is_unknown(fault: FaultServer) -> None:
    assert _within(lambda: server_info(fault.url, timeout_s=1.0)) is None


@pytest.mark.parametrize("fault", ["trickle_models", "trickle_headers", "sse_comments"], indirect=True)
def test_a_stop_ends_the_benchmark_whatever_the_server_does(fault: FaultServer) -> None:
    """Limits far away (10 minutes): only the stop request can end these calls."""
    asked = threading.Event()
    threading.Timer(0.5, asked.set).start()
    started = time.monotonic()
    slow = _settings(first_byte="600s", idle_read="600s", stage_deadline="3600s")
    with contextlib.suppress(BenchmarkError):  # the model name could not be read: the stop ended it
        _within(lambda: benchmark(fault.url, slow, stop=asked.is_set), limit_s=30)
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("fault", ["trickle_models", "trickle_headers"], indirect=True)
def test_a_stop_ends_the_gate_whatever_the_server_does(fault: FaultServer) -> None:
    asked = threading.Event()
    threading.Timer(0.5, asked.set).start()
    settings = GateSettings.model_validate({"timeout": "600s"})
    result = _within(
        lambda: asyncio.run(run_gate(fault.url, settings, captured_bs=None, stop=asked.is_set)), limit_s=30
    )
    assert not result.passed


PROXY_VARS = ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")


def test_the_tuners_clients_never_use_the_environments_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """A proxy in the environment would see every request to the tuner's own server, its key too."""
    with ProxyTrap() as trap, FaultServer("ok") as server:
        for name in PROXY_VARS:
            monkeypatch.setenv(name, trap.url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        auth = ServerAuth(api_key="sk-test-0123456789abcdefghij")
        result = _within(lambda: benchmark(server.url, _settings(), auth=auth))
        assert result.model == "fault-model" and _errors(result) == {None}
        assert server_info(server.url, auth=auth) is not None
        gate = _within(lambda: asyncio.run(run_gate(server.url, GateSettings(), captured_bs=None, auth=auth)))
        assert gate.model == "fault-model"
        assert trap.connections == 0 and b"sk-test" not in trap.seen
        assert server.hits > 0


def test_a_redirect_is_never_followed_with_the_key() -> None:
    with ProxyTrap() as elsewhere, FaultServer("redirect") as server:
        server.redirect_to = elsewhere.url
        auth = ServerAuth(api_key="sk-test-0123456789abcdefghij")
        result = _within(lambda: benchmark(server.url, _settings(), model="fault-model", auth=auth))
        assert _errors(result) == {ErrorClass.HTTP_STATUS}, _texts(result)
        assert elsewhere.connections == 0 and b"sk-test" not in elsewhere.seen
