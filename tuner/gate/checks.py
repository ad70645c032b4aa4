"""The gate's pure core: judging one answer, and the verdict of all of them.

Each answer is judged alone (`check_answer` over a `Reply` that `parse_reply` reads
from a chat completion), then the gate's verdict is the worst answer's by this
precedence, most telling first (`summarize`):

    NAN           NaN lines in the server log, or the output is NaN/inf words
    GARBAGE       empty, U+FFFD, control characters, a loop, a senseless finish
    WRONG_ANSWER  sane-looking text without the expected answer
    ERROR         HTTP error, timeout, refused connection, malformed reply

A broken kernel typically yields garbage on some requests and errors or
timeouts on the rest; the garbage is the cause, the errors its echo, so the
one-line reason names the first answer of the highest class. A gate cut short
by the server's death is ERROR unless the log already showed NaN: then NAN,
since a NaN assert is what kills SGLang 0.5.13+ with SGLANG_ENABLE_ASYNC_ASSERT=1
(`stopped_verdict`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from tuner.errors import ConfigError
from tuner.gate.garbage import GarbageFinding, GarbageReason, estimate_tokens, inspect_content, inspect_text
from tuner.gate.load import BurstLoad
from tuner.gate.reference import CANARY_MARK, ReferenceCheck
from tuner.gate.settings import MAX_BURST, GatePrompt, GateSettings

DEFAULT_BURST_SIZE = 8  # also the least burst: smaller batches are covered as a burst drains
REASON_MAX_CHARS = 300


class GateVerdict(str, Enum):
    """The gate's judgement of one answer or of a whole server."""

    PASSED = "passed"
    NAN = "nan"
    WRONG_ANSWER = "wrong_answer"
    GARBAGE = "garbage"
    ERROR = "error"
    INCONCLUSIVE = "inconclusive"  # every answer passed, but the burst never ran batched: nothing proved


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
    GateVerdict.INCONCLUSIVE: 4,
    GateVerdict.PASSED: 5,
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
    reference: ReferenceCheck | None = None  # the greedy-output agreement, when the space asks for it
    load: BurstLoad | None = None  # the concurrency the burst really reached (None: no burst ran)

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


def validate_settings(settings: GateSettings) -> None:
    """Raise ConfigError for settings the gate cannot run with."""
    if not settings.enabled:
        return
    where = "gate settings"
    if not settings.prompts and not settings.reference.enabled:
        raise ConfigError(f"{where}: the gate is enabled but has no prompts and no reference check")
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
        return min(settings.burst_size, MAX_BURST)
    if captured_bs:
        return min(MAX_BURST, max(DEFAULT_BURST_SIZE, max(captured_bs)))  # a server's figure, bounded
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
    canary = [line for line in nan_log_lines if CANARY_MARK in line]
    if canary:  # SGLang's own KV-cache canary saw corruption: the outputs cannot be trusted
        first = " ".join(canary[0].split())
        more = f" (+{len(canary) - 1} more)" if len(canary) > 1 else ""
        return GateVerdict.GARBAGE, one_line(
            f"KV-cache canary violation in server log: {first}{more}" + (f"; {tally}" if tally else "")
        )
    if nan_log_lines:
        first = " ".join(nan_log_lines[0].split())
        more = f" (+{len(nan_log_lines) - 1} more)" if len(nan_log_lines) > 1 else ""
        return GateVerdict.NAN, one_line(
            f"NaN in server log: {first}{more}" + (f"; {tally}" if tally else "")
        )
    if not failed:
        return GateVerdict.PASSED, None
    worst = min(failed, key=lambda a: (PRECEDENCE[a.verdict], a.round is GateRound.BURST, a.index))
    where = f"{worst.prompt_name!r} {worst.round.value} #{worst.index}"
    return worst.verdict, one_line(f"{worst.verdict.value} in {where}: {worst.reason}; {tally}")


def stopped_verdict(
    answers: Sequence[GateAnswer], nan_log_lines: Sequence[str], *, died: bool, timeout_s: float
) -> tuple[GateVerdict, str]:
    """The verdict of a gate cut short by the server's death or the time limit (pure)."""
    stop = "server died during the gate" if died else f"gate timed out after {timeout_s:g} s"
    verdict, reason = summarize(answers, nan_log_lines)
    if verdict is GateVerdict.NAN:
        return verdict, one_line(f"{reason}; {stop}")
    return GateVerdict.ERROR, stop


def parse_reply(body: Any) -> Reply:
    """A Reply from a /v1/chat/completions JSON body; ValueError if it has no choice."""
    try:
        choice = body["choices"][0]
        message = choice.get("message") or {}
        content = message.get("content") or ""
        reasoning = message.get("reasoning_content") or message.get("reasoning") or None
        usage = body.get("usage") or {}
        usage = usage if isinstance(usage, dict) else {}  # a server's answer: any shape
        details = usage.get("completion_tokens_details") or {}
        details = details if isinstance(details, dict) else {}
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


def one_line(text: str) -> str:
    """The text on one line, cut to REASON_MAX_CHARS."""
    flat = " ".join(text.split())
    return flat if len(flat) <= REASON_MAX_CHARS else flat[: REASON_MAX_CHARS - 1] + "…"
