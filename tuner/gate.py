"""The correctness / NaN gate run on a freshly ready server, before the benchmark.

Every prompt is asked once sequentially, then (if all of those passed and no
NaN was logged) once more in a concurrent burst as large as the largest
captured CUDA-graph batch (at least 8; see choose_burst_size): NaN from a
bad attention backend often shows only in batched decode or graph replay. Each answer is judged alone (pure
`check_answer`), then the gate's verdict is the worst answer's by this
precedence, most telling first:

    NAN           NaN lines in the server log, or the output is NaN/inf words
    GARBAGE       empty, U+FFFD, control characters, a loop, a senseless finish
    WRONG_ANSWER  sane-looking text without the expected answer
    ERROR         HTTP error, timeout, refused connection, malformed reply

A broken kernel typically yields garbage on some requests and errors or
timeouts on the rest; the garbage is the cause, the errors its echo, so the
one-line reason names the first answer of the highest class. A server death
stops the gate at once (ERROR, "server died during the gate"), unless the
log already showed NaN: then NAN, since a NaN assert is what kills SGLang
0.5.13+ with SGLANG_ENABLE_ASYNC_ASSERT=1.

HTTP is plain httpx over asyncio; `transport` lets tests put a fake server
behind the client.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

import httpx

from tuner.errors import ConfigError
from tuner.garbage import GarbageFinding, GarbageReason, estimate_tokens, inspect_content, inspect_text
from tuner.gate_settings import GatePrompt, GateSettings

log = logging.getLogger(__name__)

DEFAULT_BURST_SIZE = 8  # also the least burst: smaller batches are covered as a burst drains
CONNECT_TIMEOUT_S = 10.0
DEATH_POLL_S = 0.05  # how often the gate looks at the server_died event
REASON_MAX_CHARS = 300


class GateVerdict(str, Enum):
    """The gate's judgement of one answer or of a whole server."""

    PASSED = "passed"
    NAN = "nan"
    WRONG_ANSWER = "wrong_answer"
    GARBAGE = "garbage"
    ERROR = "error"


class GateRound(str, Enum):
    """Which round an answer came from."""

    SEQUENTIAL = "sequential"
    BURST = "burst"


# Lower is more telling (see the module docstring).
PRECEDENCE: dict[GateVerdict, int] = {
    GateVerdict.NAN: 0,
    GateVerdict.GARBAGE: 1,
    GateVerdict.WRONG_ANSWER: 2,
    GateVerdict.ERROR: 3,
    GateVerdict.PASSED: 4,
}


@dataclass(frozen=True, kw_only=True, slots=True)
class GateAnswer:
    """One prompt's reply in one round, with its verdict; text kept whatever it was."""

    prompt_name: str
    round: GateRound
    index: int  # position within its round
    text: str  # the final answer (`content`)
    reasoning_text: str | None = None  # `reasoning_content`, or a <think> block, when present
    finish_reason: str | None = None
    completion_tokens: int | None = None
    latency_s: float | None = None
    verdict: GateVerdict
    reason: str | None = None
    http_status: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class GateResult:
    """What the gate found on one server."""

    verdict: GateVerdict
    reason: str | None  # one line; None when passed with nothing to say
    answers: tuple[GateAnswer, ...] = ()
    nan_log_lines: tuple[str, ...] = ()
    burst_size: int | None = None  # None when no burst ran
    duration_s: float
    model: str | None = None

    @property
    def passed(self) -> bool:
        return self.verdict is GateVerdict.PASSED


@dataclass(frozen=True, kw_only=True, slots=True)
class Reply:
    """The parts of a chat completion the gate judges."""

    text: str
    reasoning_text: str | None
    finish_reason: str | None
    completion_tokens: int | None
    reasoning_tokens: int | None


# ---- pure core -------------------------------------------------------------


def validate_settings(settings: GateSettings) -> None:
    """Raise ConfigError for settings the gate cannot run with."""
    if not settings.enabled:
        return
    where = "gate settings"
    if not settings.prompts:
        raise ConfigError(f"{where}: the gate is enabled but has no prompts")
    if settings.burst_size is not None and settings.burst_size < 1:
        raise ConfigError(f"{where}: burst_size must be ≥ 1 (got {settings.burst_size})")
    if not settings.timeout_s > 0:
        raise ConfigError(f"{where}: timeout_s must be > 0 (got {settings.timeout_s})")
    for p in settings.prompts:
        if p.max_tokens < 1 or p.min_tokens < 0:
            raise ConfigError(
                f"{where}: prompt {p.name!r} needs max_tokens ≥ 1 and min_tokens ≥ 0 "
                f"(got {p.max_tokens}, {p.min_tokens})"
            )
        if p.expect_regex is not None:
            try:
                re.compile(p.expect_regex)
            except re.error as exc:
                raise ConfigError(
                    f"{where}: prompt {p.name!r}: bad expect_regex {p.expect_regex!r}: {exc}"
                ) from exc


def choose_burst_size(settings: GateSettings, captured_bs: Sequence[int] | None) -> int:
    """settings.burst_size if set, else the largest captured CUDA-graph batch size, at least 8.

    "At least 8" (as GateSettings documents): a burst larger than the
    largest graph still replays every smaller graph while it drains, and a
    server without graphs still gets a batched decode to fail in.
    """
    if settings.burst_size is not None:
        return settings.burst_size
    if captured_bs:
        return max(DEFAULT_BURST_SIZE, max(captured_bs))
    return DEFAULT_BURST_SIZE


def burst_prompts(prompts: Sequence[GatePrompt], size: int) -> tuple[GatePrompt, ...]:
    """The prompts cycled to fill a burst of `size` requests."""
    return tuple(prompts[i % len(prompts)] for i in range(size))


def split_think(content: str) -> tuple[str, str | None]:
    """(answer, reasoning) of a content that carries its reasoning inline in <think> tags."""
    head, sep, tail = content.rpartition("</think>")
    if sep:
        return tail, head.replace("<think>", "", 1).strip() or None
    if content.lstrip().startswith("<think>"):
        return "", content.lstrip()[len("<think>") :].strip() or None  # ran out of tokens while thinking
    return content, None


def check_answer(prompt: GatePrompt, reply: Reply) -> tuple[GateVerdict, str | None]:
    """The verdict and reason for one reply to one prompt (pure)."""
    if not reply.text.strip() and reply.reasoning_text and reply.reasoning_text.strip():
        # A reasoning model that never reached its final answer: garbage if the
        # reasoning itself is, otherwise no answer (WRONG_ANSWER).
        finding = inspect_text(
            reply.reasoning_text,
            completion_tokens=reply.completion_tokens,
            finish_reason=reply.finish_reason,
            max_tokens=prompt.max_tokens,
            min_tokens=0,
        )
        if finding is not None:
            return _garbage_verdict(finding, "in reasoning: ")
        return GateVerdict.WRONG_ANSWER, (
            f"no final answer: content empty after {len(reply.reasoning_text)} chars of reasoning "
            f"(finish_reason {reply.finish_reason!r})"
        )
    answer_tokens = None
    if reply.reasoning_text:
        answer_tokens = (
            max(0, reply.completion_tokens - reply.reasoning_tokens)
            if reply.completion_tokens is not None and reply.reasoning_tokens is not None
            else estimate_tokens(reply.text)
        )
    finding = inspect_text(
        reply.text,
        completion_tokens=reply.completion_tokens,
        finish_reason=reply.finish_reason,
        max_tokens=prompt.max_tokens,
        min_tokens=prompt.min_tokens,
        answer_tokens=answer_tokens,
    )
    if finding is not None:
        return _garbage_verdict(finding, "")
    if reply.reasoning_text:
        # Only character-level signs: a reasoning loop beside a right answer is a quirk, not NaN.
        finding = inspect_content(reply.reasoning_text)
        if finding is not None and finding.reason is not GarbageReason.REPEATED:
            return _garbage_verdict(finding, "in reasoning: ")
    if prompt.expect is not None and prompt.expect.casefold() not in reply.text.casefold():
        return GateVerdict.WRONG_ANSWER, f"expected {prompt.expect!r}, got {_excerpt(reply.text)}"
    if prompt.expect_regex is not None and re.search(prompt.expect_regex, reply.text) is None:
        return GateVerdict.WRONG_ANSWER, f"expected /{prompt.expect_regex}/, got {_excerpt(reply.text)}"
    return GateVerdict.PASSED, None


def summarize(answers: Sequence[GateAnswer], nan_log_lines: Sequence[str]) -> tuple[GateVerdict, str | None]:
    """The gate's verdict and one-line reason from all answers and the NaN log lines (pure)."""
    failed = [a for a in answers if a.verdict is not GateVerdict.PASSED]
    tally = f"{len(failed)} of {len(answers)} answers failed" if failed else ""
    if (
        failed
        and all(a.round is GateRound.BURST for a in failed)
        and any(a.round is GateRound.SEQUENTIAL for a in answers)
    ):
        tally += " (all in the burst; sequential answers passed)"
    if nan_log_lines:
        first = " ".join(nan_log_lines[0].split())
        more = f" (+{len(nan_log_lines) - 1} more)" if len(nan_log_lines) > 1 else ""
        return GateVerdict.NAN, _one_line(
            f"NaN in server log: {first}{more}" + (f"; {tally}" if tally else "")
        )
    if not failed:
        return GateVerdict.PASSED, None
    worst = min(failed, key=lambda a: (PRECEDENCE[a.verdict], a.round is GateRound.BURST, a.index))
    where = f"{worst.prompt_name!r} {worst.round.value} #{worst.index}"
    return worst.verdict, _one_line(f"{worst.verdict.value} in {where}: {worst.reason}; {tally}")


def stopped_verdict(
    answers: Sequence[GateAnswer], nan_log_lines: Sequence[str], *, died: bool, timeout_s: float
) -> tuple[GateVerdict, str]:
    """The verdict of a gate cut short by the server's death or the time limit (pure)."""
    stop = "server died during the gate" if died else f"gate timed out after {timeout_s:g} s"
    verdict, reason = summarize(answers, nan_log_lines)
    if verdict is GateVerdict.NAN:
        return verdict, _one_line(f"{reason}; {stop}")
    return GateVerdict.ERROR, stop


def parse_reply(body: Any) -> Reply:
    """A Reply from a /v1/chat/completions JSON body; ValueError if it has no choice."""
    try:
        choice = body["choices"][0]
        message = choice.get("message") or {}
        content = message.get("content") or ""
        reasoning = message.get("reasoning_content") or message.get("reasoning") or None
        usage = body.get("usage") or {}
        details = usage.get("completion_tokens_details") or {}
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise ValueError(f"no choices[0].message in the response ({exc!r})") from exc
    if not isinstance(content, str):
        raise ValueError(f"message.content is {type(content).__name__}, not a string")
    if reasoning is None:
        content, reasoning = split_think(content)
    reasoning_tokens = usage.get("reasoning_tokens") or details.get("reasoning_tokens")
    return Reply(
        text=content,
        reasoning_text=reasoning if isinstance(reasoning, str) else None,
        finish_reason=choice.get("finish_reason"),
        completion_tokens=_int_or_none(usage.get("completion_tokens")),
        reasoning_tokens=_int_or_none(reasoning_tokens),
    )


def _garbage_verdict(finding: GarbageFinding, prefix: str) -> tuple[GateVerdict, str]:
    verdict = GateVerdict.NAN if finding.is_nan else GateVerdict.GARBAGE
    return verdict, f"{prefix}{finding.message}"


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _excerpt(text: str, chars: int = 60) -> str:
    return repr(text[:chars] + ("…" if len(text) > chars else ""))


def _one_line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= REASON_MAX_CHARS else flat[: REASON_MAX_CHARS - 1] + "…"


# ---- I/O edge --------------------------------------------------------------


def gate(
    base_url: str,
    settings: GateSettings,
    *,
    captured_bs: Sequence[int] | None,
    model: str | None = None,
    nan_log_lines: Callable[[], Sequence[str]] | None = None,
    server_died: threading.Event | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> GateResult:
    """Run the gate from synchronous code (a fresh event loop; not from inside a running one)."""
    return asyncio.run(
        run_gate(
            base_url,
            settings,
            captured_bs=captured_bs,
            model=model,
            nan_log_lines=nan_log_lines,
            server_died=server_died,
            transport=transport,
        )
    )


async def run_gate(
    base_url: str,
    settings: GateSettings,
    *,
    captured_bs: Sequence[int] | None,
    model: str | None = None,
    nan_log_lines: Callable[[], Sequence[str]] | None = None,
    server_died: threading.Event | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> GateResult:
    """Ask every prompt sequentially, then as a burst, and judge the answers.

    `nan_log_lines` returns every NaN line the server's log has shown so far;
    `server_died` is set by whoever watches the server process.
    """
    validate_settings(settings)
    if not settings.enabled:
        return GateResult(
            verdict=GateVerdict.PASSED,
            reason="gate skipped (disabled in the settings)",
            duration_s=0.0,
            model=model,
        )
    started = time.perf_counter()
    run = _Run(settings=settings, burst_size=choose_burst_size(settings, captured_bs), model=model)
    nan_lines: Callable[[], Sequence[str]] = nan_log_lines or tuple
    timeout = httpx.Timeout(settings.timeout_s, connect=min(CONNECT_TIMEOUT_S, settings.timeout_s))
    limits = httpx.Limits(max_connections=run.burst_size, max_keepalive_connections=run.burst_size)
    async with httpx.AsyncClient(
        base_url=base_url, timeout=timeout, limits=limits, transport=transport, trust_env=False
    ) as client:
        work = asyncio.create_task(run.rounds(client, nan_lines))
        watchers = {work}
        if server_died is not None:
            watchers.add(asyncio.create_task(_wait_set(server_died)))
        done, pending = await asyncio.wait(
            watchers, timeout=settings.timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        fatal = work.result() if work in done else None

    lines = tuple(nan_lines())
    reason: str | None
    answers = tuple(sorted(run.answers, key=lambda a: (a.round is GateRound.BURST, a.index)))
    if work not in done:
        died = server_died is not None and server_died.is_set()
        verdict, reason = stopped_verdict(answers, lines, died=died, timeout_s=settings.timeout_s)
    elif fatal is not None:
        verdict, reason = GateVerdict.ERROR, fatal
    else:
        verdict, reason = summarize(answers, lines)
    result = GateResult(
        verdict=verdict,
        reason=reason,
        answers=answers,
        nan_log_lines=lines,
        burst_size=run.burst_size if run.burst_started else None,
        duration_s=time.perf_counter() - started,
        model=run.model,
    )
    log.info(
        "gate %s in %.1f s: %s",
        result.verdict.value,
        result.duration_s,
        result.reason or "all answers passed",
    )
    return result


async def _wait_set(event: threading.Event) -> None:
    # threading.Event has no awaitable wait; a blocking wait in a thread could
    # outlive the loop, so poll.
    while not event.is_set():
        await asyncio.sleep(DEATH_POLL_S)


class _Run:
    """The mutable state of one gate run: answers arrive as requests finish."""

    def __init__(self, *, settings: GateSettings, burst_size: int, model: str | None) -> None:
        self.settings = settings
        self.burst_size = burst_size
        self.model = model
        self.answers: list[GateAnswer] = []
        self.burst_started = False

    async def rounds(self, client: httpx.AsyncClient, nan_lines: Callable[[], Sequence[str]]) -> str | None:
        """Both rounds; returns a reason when the gate could not start at all."""
        if self.model is None:
            try:
                self.model = await _model_id(client)
            except (httpx.HTTPError, ValueError) as exc:
                return _one_line(f"could not read the model id from /v1/models: {_describe(exc)}")
        for i, prompt in enumerate(self.settings.prompts):
            await self._ask(client, prompt, GateRound.SEQUENTIAL, i)
        if any(a.verdict is not GateVerdict.PASSED for a in self.answers) or nan_lines():
            return None  # the gate has failed already; on a real model the burst would cost minutes more
        self.burst_started = True
        prompts = burst_prompts(self.settings.prompts, self.burst_size)
        await asyncio.gather(*(self._ask(client, p, GateRound.BURST, i) for i, p in enumerate(prompts)))
        return None

    async def _ask(
        self, client: httpx.AsyncClient, prompt: GatePrompt, round_: GateRound, index: int
    ) -> None:
        payload = {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt.prompt}],
            "max_tokens": prompt.max_tokens,
            "temperature": 0,
            "stream": False,
        }
        where: dict[str, Any] = {"prompt_name": prompt.name, "round": round_, "index": index}
        t0 = time.perf_counter()
        try:
            fields = await _post(client, prompt, payload)
        except asyncio.CancelledError:
            stopped: dict[str, Any] = {
                "text": "",
                "verdict": GateVerdict.ERROR,
                "reason": "no answer before the gate stopped",
            }
            self.answers.append(GateAnswer(**where, **stopped))
            raise
        self.answers.append(GateAnswer(**where, **fields, latency_s=time.perf_counter() - t0))


async def _post(client: httpx.AsyncClient, prompt: GatePrompt, payload: dict[str, Any]) -> dict[str, Any]:
    """One chat completion, judged: the GateAnswer fields it fills."""
    try:
        response = await client.post("/v1/chat/completions", json=payload)
    except httpx.HTTPError as exc:
        return {"text": "", "verdict": GateVerdict.ERROR, "reason": _describe(exc)}
    status = response.status_code
    if not response.is_success:
        reason = f"HTTP {status}: {_error_text(response)}"
        return {"text": "", "verdict": GateVerdict.ERROR, "reason": reason, "http_status": status}
    try:
        reply = parse_reply(response.json())
    except ValueError as exc:
        reason = _one_line(f"malformed response: {exc}")
        return {
            "verdict": GateVerdict.ERROR,
            "reason": reason,
            "http_status": status,
            "text": response.text[:2000],
        }
    verdict, why = check_answer(prompt, reply)
    return {
        "text": reply.text,
        "reasoning_text": reply.reasoning_text,
        "finish_reason": reply.finish_reason,
        "completion_tokens": reply.completion_tokens,
        "verdict": verdict,
        "reason": why,
        "http_status": status,
    }


async def _model_id(client: httpx.AsyncClient) -> str:
    response = await client.get("/v1/models")
    response.raise_for_status()
    try:
        model = response.json()["data"][0]["id"]
    except (KeyError, IndexError, TypeError) as exc:
        raise ValueError(f"no data[0].id in {response.text[:200]!r}") from exc
    if not isinstance(model, str) or not model:
        raise ValueError(f"data[0].id is {model!r}")
    return model


def _describe(exc: Exception) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return f"timeout ({type(exc).__name__})"
    if isinstance(exc, httpx.ConnectError):
        return f"connection failed: {exc or 'refused'}"
    if isinstance(exc, httpx.HTTPStatusError):
        return f"HTTP {exc.response.status_code}: {_error_text(exc.response)}"
    return _one_line(f"{type(exc).__name__}: {exc}")


def _error_text(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return _one_line(response.text[:200]) or "(empty body)"
    if isinstance(body, dict):
        error = body.get("error")
        message = (
            body.get("message")
            or body.get("detail")
            or (error.get("message") if isinstance(error, dict) else error)
        )
        if message:
            return _one_line(str(message)[:200])
    return _one_line(str(body)[:200])
