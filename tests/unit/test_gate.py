"""The gate: answer checks, verdict precedence, burst size, and whole runs against fake servers."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from tuner.errors import ConfigError
from tuner.gate.run import (
    GateAnswer,
    GateRound,
    GateVerdict,
    Reply,
    burst_prompts,
    check_answer,
    choose_burst_size,
    parse_reply,
    run_gate,
    split_think,
    stopped_verdict,
    summarize,
    validate_settings,
)
from tuner.gate.settings import DEFAULT_PROMPTS, GatePrompt, GateSettings

CAPITAL = GatePrompt(name="capital", prompt="Capital of France?", expect="Paris", max_tokens=256)
ARITH = GatePrompt(name="arith", prompt="17 + 25?", expect_regex=r"\b42\b", max_tokens=256)
PROMPTS = (CAPITAL, ARITH)
RIGHT = {CAPITAL.prompt: "Paris", ARITH.prompt: "42"}


def make_reply(text: str = "Paris", **kw: Any) -> Reply:
    fields: dict[str, Any] = dict(
        text=text, reasoning_text=None, finish_reason="stop", completion_tokens=2, reasoning_tokens=None
    )
    fields.update(kw)
    return Reply(**fields)


def make_answer(
    verdict: GateVerdict, *, round_: GateRound = GateRound.SEQUENTIAL, index: int = 0
) -> GateAnswer:
    reason = None if verdict is GateVerdict.PASSED else f"{verdict.value} here"
    return GateAnswer(prompt_name="p", round=round_, index=index, text="t", verdict=verdict, reason=reason)


# ---- answer checks ---------------------------------------------------------


def test_right_answers_pass() -> None:
    assert check_answer(CAPITAL, make_reply("The capital of France is **paris**.")) == (
        GateVerdict.PASSED,
        None,
    )
    assert check_answer(ARITH, make_reply("42")) == (GateVerdict.PASSED, None)


def test_wrong_answers() -> None:
    verdict, reason = check_answer(CAPITAL, make_reply("Lyon"))
    assert verdict is GateVerdict.WRONG_ANSWER and "'Paris'" in (reason or "") and "Lyon" in (reason or "")
    verdict, reason = check_answer(ARITH, make_reply("420"))
    assert verdict is GateVerdict.WRONG_ANSWER and "42" in (reason or "")


def test_garbage_and_nan_text() -> None:
    assert check_answer(CAPITAL, make_reply("????????????"))[0] is GateVerdict.GARBAGE
    assert check_answer(CAPITAL, make_reply("!!!!!!!!!!!!"))[0] is GateVerdict.NAN
    assert check_answer(CAPITAL, make_reply(""))[0] is GateVerdict.GARBAGE
    assert check_answer(CAPITAL, make_reply("nan nan nan"))[0] is GateVerdict.NAN
    # garbage outranks a missing answer in the same reply
    assert check_answer(CAPITAL, make_reply("Paris", finish_reason="abort"))[0] is GateVerdict.GARBAGE


def test_reasoning_without_final_answer_is_wrong_answer() -> None:
    reply = make_reply(
        "",
        reasoning_text="The user asks for the capital of France. " + "Let me think about French geography. ",
        finish_reason="length",
        completion_tokens=256,
    )
    verdict, reason = check_answer(CAPITAL, reply)
    assert verdict is GateVerdict.WRONG_ANSWER
    assert reason is not None and reason.startswith("no final answer")


def test_garbage_reasoning_without_final_answer_is_garbage() -> None:
    reply = make_reply("", reasoning_text="\ufffd" * 40, finish_reason="length", completion_tokens=256)
    verdict, reason = check_answer(CAPITAL, reply)
    assert verdict is GateVerdict.GARBAGE and (reason or "").startswith("in reasoning")


def test_answer_beside_reasoning_is_checked_on_content_only() -> None:
    reply = make_reply("Lyon", reasoning_text="It is Paris, obviously.", completion_tokens=20)
    assert check_answer(CAPITAL, reply)[0] is GateVerdict.WRONG_ANSWER
    reply = make_reply("Paris", reasoning_text="The capital of France is Paris.", completion_tokens=20)
    assert check_answer(CAPITAL, reply)[0] is GateVerdict.PASSED
    reply = make_reply("Paris", reasoning_text="nan nan nan nan", completion_tokens=20)
    assert check_answer(CAPITAL, reply)[0] is GateVerdict.NAN


def test_min_tokens_counts_the_answer_not_the_reasoning() -> None:
    long = GatePrompt(name="long", prompt="essay", expect="hash", max_tokens=400, min_tokens=100)
    reply = make_reply(
        "A hash maps keys.",
        reasoning_text="Plan: explain buckets, collisions and resizing.",
        completion_tokens=300,
        reasoning_tokens=295,
    )
    assert check_answer(long, reply)[0] is GateVerdict.GARBAGE


def test_parse_reply_reads_sglang_fields() -> None:
    body = {
        "choices": [
            {"message": {"content": "Paris", "reasoning_content": "thinking"}, "finish_reason": "stop"}
        ],
        "usage": {"completion_tokens": 9, "reasoning_tokens": 7},
    }
    assert parse_reply(body) == Reply(
        text="Paris", reasoning_text="thinking", finish_reason="stop", completion_tokens=9, reasoning_tokens=7
    )
    body = {
        "choices": [{"message": {"content": None}, "finish_reason": "length"}],
        "usage": {"completion_tokens": 5, "completion_tokens_details": {"reasoning_tokens": 5}},
    }
    assert parse_reply(body) == Reply(
        text="", reasoning_text=None, finish_reason="length", completion_tokens=5, reasoning_tokens=5
    )
    with pytest.raises(ValueError):
        parse_reply({"choices": []})
    with pytest.raises(ValueError):
        parse_reply({"object": "error"})


def test_split_think() -> None:
    assert split_think("<think>hmm</think>Paris") == ("Paris", "hmm")
    assert split_think("<think>still thinking") == ("", "still thinking")
    assert split_think("Paris") == ("Paris", None)


# ---- precedence and reasons ------------------------------------------------


@pytest.mark.parametrize(
    ("verdicts", "expected"),
    [
        ([GateVerdict.PASSED, GateVerdict.PASSED], GateVerdict.PASSED),
        ([GateVerdict.ERROR, GateVerdict.WRONG_ANSWER], GateVerdict.WRONG_ANSWER),
        ([GateVerdict.WRONG_ANSWER, GateVerdict.GARBAGE, GateVerdict.ERROR], GateVerdict.GARBAGE),
        ([GateVerdict.ERROR, GateVerdict.GARBAGE, GateVerdict.NAN], GateVerdict.NAN),
        ([GateVerdict.ERROR, GateVerdict.PASSED], GateVerdict.ERROR),
    ],
)
def test_precedence(verdicts: list[GateVerdict], expected: GateVerdict) -> None:
    answers = [make_answer(v, index=i) for i, v in enumerate(verdicts)]
    verdict, reason = summarize(answers, ())
    assert verdict is expected
    if expected is not GateVerdict.PASSED:
        failed = sum(v is not GateVerdict.PASSED for v in verdicts)
        assert reason is not None and f"{expected.value} here" in reason
        assert f"{failed} of {len(verdicts)} answers failed" in reason


def test_nan_log_lines_outrank_everything_and_lead_the_reason() -> None:
    answers = [make_answer(GateVerdict.PASSED), make_answer(GateVerdict.GARBAGE, index=1)]
    lines = ["[2026] Detected errors during sampling! NaN in the logits.", "again"]
    verdict, reason = summarize(answers, lines)
    assert verdict is GateVerdict.NAN
    assert reason is not None and reason.startswith("NaN in server log: [2026] Detected errors")
    assert "(+1 more)" in reason and "1 of 2 answers failed" in reason
    assert summarize([make_answer(GateVerdict.PASSED)], lines)[0] is GateVerdict.NAN


def test_reason_names_the_first_worst_answer_and_says_burst_only() -> None:
    answers = [
        make_answer(GateVerdict.PASSED),
        make_answer(GateVerdict.GARBAGE, round_=GateRound.BURST, index=5),
        make_answer(GateVerdict.GARBAGE, round_=GateRound.BURST, index=2),
    ]
    verdict, reason = summarize(answers, ())
    assert verdict is GateVerdict.GARBAGE
    assert reason is not None and "burst #2" in reason and "sequential answers passed" in reason
    assert "\n" not in reason


def test_stopped_gate() -> None:
    passed = [make_answer(GateVerdict.PASSED)]
    assert stopped_verdict(passed, (), died=True, timeout_s=5) == (
        GateVerdict.ERROR,
        "server died during the gate",
    )
    assert stopped_verdict(passed, (), died=False, timeout_s=5) == (
        GateVerdict.ERROR,
        "gate timed out after 5 s",
    )
    verdict, reason = stopped_verdict(passed, ["NaN detected! sampler"], died=True, timeout_s=5)
    assert verdict is GateVerdict.NAN and reason.endswith("server died during the gate")


# ---- burst size and settings -----------------------------------------------


@pytest.mark.parametrize(
    ("burst_size", "captured", "expected"),
    [
        (None, None, 8),
        (None, (), 8),
        (None, (1, 2, 4), 8),
        (None, (1, 2, 4, 8, 16, 32), 32),
        (None, (160, 1, 8), 160),
        (3, (1, 2, 4, 8, 16, 32), 3),
    ],
)
def test_burst_size(burst_size: int | None, captured: tuple[int, ...] | None, expected: int) -> None:
    assert choose_burst_size(GateSettings(burst_size=burst_size), captured) == expected


def test_burst_prompts_cycle() -> None:
    assert [p.name for p in burst_prompts(PROMPTS, 5)] == ["capital", "arith", "capital", "arith", "capital"]


UNCLOSED = GatePrompt.model_construct(name="x", prompt="x", expect_regex="(unclosed")
NO_TOKENS = GatePrompt.model_construct(name="x", prompt="x", max_tokens=0)


@pytest.mark.parametrize(
    "settings",
    [
        # settings models refuse these values; built without validation, the gate must still refuse them
        GateSettings.model_construct(prompts=()),
        GateSettings.model_construct(burst_size=0),
        GateSettings.model_construct(timeout_s=0),
        GateSettings.model_construct(prompts=(UNCLOSED,)),
        GateSettings.model_construct(prompts=(NO_TOKENS,)),
    ],
)
def test_bad_settings_raise_config_error(settings: GateSettings) -> None:
    with pytest.raises(ConfigError):
        validate_settings(settings)


def test_default_prompts_are_valid() -> None:
    validate_settings(GateSettings(prompts=DEFAULT_PROMPTS))


# ---- whole gate against fake servers ---------------------------------------

Handler = Callable[[str, int], Awaitable[httpx.Response]]


class FakeServer:
    """/v1/models and /v1/chat/completions; `answer(prompt, in_flight)` makes each reply."""

    def __init__(self, answer: Handler, model: str = "glm-5") -> None:
        self.answer = answer
        self.model = model
        self.in_flight = 0
        self.peak = 0
        self.requests: list[dict[str, Any]] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"object": "list", "data": [{"id": self.model}]})
        body = json.loads(request.content)
        self.requests.append(body)
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(0)  # let every request of a burst arrive before any is answered
            return await self.answer(body["messages"][0]["content"], self.in_flight)
        finally:
            self.in_flight -= 1

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self)


def completion(text: str, *, finish: str = "stop", tokens: int | None = None) -> httpx.Response:
    usage = {"prompt_tokens": 10, "completion_tokens": tokens if tokens is not None else len(text.split())}
    return httpx.Response(
        200,
        json={
            "object": "chat.completion",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
            ],
            "usage": usage,
        },
    )


async def always_right(prompt: str, in_flight: int) -> httpx.Response:
    return completion(RIGHT[prompt])


def run(server: FakeServer, settings: GateSettings | None = None, **kw: Any) -> Any:
    settings = settings or GateSettings(prompts=PROMPTS, timeout_s=30)
    kw.setdefault("captured_bs", None)
    return asyncio.run(run_gate("http://gate.test", settings, transport=server.transport(), **kw))


def test_healthy_server_passes_both_rounds() -> None:
    server = FakeServer(always_right)
    result = run(server, captured_bs=(1, 2, 4, 8, 12))
    assert result.passed and result.verdict is GateVerdict.PASSED and result.reason is None
    assert result.burst_size == 12 and result.model == "glm-5"
    rounds = [a.round for a in result.answers]
    assert rounds.count(GateRound.SEQUENTIAL) == 2 and rounds.count(GateRound.BURST) == 12
    assert [a.index for a in result.answers if a.round is GateRound.BURST] == list(range(12))
    assert server.peak == 12  # the whole burst was in flight at once
    first = server.requests[0]
    assert first["model"] == "glm-5" and first["temperature"] == 0 and first["stream"] is False
    assert first["max_tokens"] == 256
    assert all(a.latency_s is not None and a.http_status == 200 for a in result.answers)


def test_given_model_skips_the_models_endpoint() -> None:
    server = FakeServer(always_right)
    result = run(server, model="served-name")
    assert result.passed and {r["model"] for r in server.requests} == {"served-name"}


def test_garbage_only_under_batching_is_caught_by_the_burst() -> None:
    async def breaks_when_batched(prompt: str, in_flight: int) -> httpx.Response:
        return (
            completion("?" * 256, finish="length", tokens=256)
            if in_flight >= 4
            else completion(RIGHT[prompt])
        )

    result = run(FakeServer(breaks_when_batched))
    assert result.verdict is GateVerdict.GARBAGE
    assert all(a.verdict is GateVerdict.PASSED for a in result.answers if a.round is GateRound.SEQUENTIAL)
    assert "burst #0" in result.reason and "sequential answers passed" in result.reason
    garbage = [a for a in result.answers if a.verdict is GateVerdict.GARBAGE]
    assert garbage and all(
        a.round is GateRound.BURST and a.text == "?" * 256 for a in garbage
    )  # outputs kept


def test_a_failed_sequential_round_skips_the_burst() -> None:
    async def wrong(prompt: str, in_flight: int) -> httpx.Response:
        return completion("Lyon")

    server = FakeServer(wrong)
    result = run(server)
    assert result.verdict is GateVerdict.WRONG_ANSWER
    assert result.burst_size is None and len(result.answers) == 2 and len(server.requests) == 2


def test_nan_log_lines_fail_a_gate_whose_answers_look_right() -> None:
    lines: list[str] = []

    async def logs_nan(prompt: str, in_flight: int) -> httpx.Response:
        lines.append("NaN detected in sampler: next_token_logits; values were sanitized before sampling.")
        return completion(RIGHT[prompt])

    result = run(FakeServer(logs_nan), nan_log_lines=lambda: tuple(lines))
    assert result.verdict is GateVerdict.NAN
    assert result.reason.startswith("NaN in server log: NaN detected in sampler")
    assert result.nan_log_lines == tuple(lines) and result.burst_size is None


def test_http_500_is_an_error_with_status_and_message() -> None:
    async def broken(prompt: str, in_flight: int) -> httpx.Response:
        return httpx.Response(500, json={"object": "error", "message": "Internal server error", "code": 500})

    result = run(FakeServer(broken))
    assert result.verdict is GateVerdict.ERROR
    assert all(a.http_status == 500 for a in result.answers)
    assert "HTTP 500: Internal server error" in result.reason


def test_connection_refused_is_an_error() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("All connection attempts failed", request=request)

    settings = GateSettings(prompts=PROMPTS, timeout_s=30)
    result = asyncio.run(
        run_gate(
            "http://gate.test", settings, captured_bs=None, model="m", transport=httpx.MockTransport(refuse)
        )
    )
    assert result.verdict is GateVerdict.ERROR and "connection failed" in (result.reason or "")
    assert len(result.answers) == 2


def test_unreadable_models_endpoint_is_an_error_without_answers() -> None:
    def no_models(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, json={"detail": "Not Found"})

    settings = GateSettings(prompts=PROMPTS, timeout_s=30)
    result = asyncio.run(
        run_gate("http://gate.test", settings, captured_bs=None, transport=httpx.MockTransport(no_models))
    )
    assert result.verdict is GateVerdict.ERROR and result.answers == ()
    assert result.reason is not None and "/v1/models" in result.reason and "404" in result.reason


def test_malformed_body_is_an_error() -> None:
    async def odd(prompt: str, in_flight: int) -> httpx.Response:
        return httpx.Response(200, json={"unexpected": True})

    result = run(FakeServer(odd))
    assert result.verdict is GateVerdict.ERROR and "malformed response" in result.reason


def test_server_death_stops_the_gate_at_once() -> None:
    died = threading.Event()

    async def dies_in_the_burst(prompt: str, in_flight: int) -> httpx.Response:
        if in_flight > 1:
            died.set()
            await asyncio.Event().wait()  # never answers: only the death can end the gate
        return completion(RIGHT[prompt])

    result = run(FakeServer(dies_in_the_burst), GateSettings(prompts=PROMPTS, timeout_s=60), server_died=died)
    assert result.verdict is GateVerdict.ERROR and result.reason == "server died during the gate"
    assert result.duration_s < 30
    burst = [a for a in result.answers if a.round is GateRound.BURST]
    assert len(burst) == 8 and all(a.reason == "no answer before the gate stopped" for a in burst)


def test_server_already_dead() -> None:
    died = threading.Event()
    died.set()
    result = run(FakeServer(always_right), server_died=died)
    assert result.verdict is GateVerdict.ERROR and result.reason == "server died during the gate"


def test_overall_timeout() -> None:
    async def hangs(prompt: str, in_flight: int) -> httpx.Response:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    result = run(FakeServer(hangs), GateSettings(prompts=PROMPTS, timeout_s=0.2))
    assert result.verdict is GateVerdict.ERROR and result.reason == "gate timed out after 0.2 s"
    assert [a.reason for a in result.answers] == ["no answer before the gate stopped"]


def test_disabled_gate_passes_without_asking() -> None:
    server = FakeServer(always_right)
    result = run(server, GateSettings(enabled=False))
    assert result.passed and result.answers == () and "skipped" in (result.reason or "")
    assert server.requests == []


def test_reasoning_model_answers_are_kept_whole() -> None:
    async def thinks(prompt: str, in_flight: int) -> httpx.Response:
        message = {"role": "assistant", "content": RIGHT[prompt], "reasoning_content": "Let me recall."}
        body = {
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"completion_tokens": 6, "reasoning_tokens": 4},
        }
        return httpx.Response(200, json=body)

    result = run(FakeServer(thinks))
    assert result.passed
    assert all(a.reasoning_text == "Let me recall." for a in result.answers)
