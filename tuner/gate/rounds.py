"""One gate run's rounds against the server: the sequential prompts, the reference check, the burst
(again while it did not reach its target concurrency), and the HTTP of each ask (tuner/gate/run.py
drives it under the server-death and stop watchers, and judges what it gathered)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import httpx

from tuner.gate.checks import (
    GateAnswer,
    GateRound,
    GateVerdict,
    burst_prompts,
    check_answer,
    one_line,
    parse_reply,
)
from tuner.gate.greedy import greedy
from tuner.gate.load import BURST_TRIES, BurstLoad, client_overlap
from tuner.gate.reference import GreedyOutput, ReferenceBook, ReferenceCheck, agreements
from tuner.gate.settings import GatePrompt, GateSettings
from tuner.sglang.batch_lines import running_requests

log = logging.getLogger("tuner.gate.run")  # the gate's one logger, whichever module writes


class GateRun:
    """The mutable state of one gate run: answers arrive as requests finish."""

    def __init__(self, *, settings: GateSettings, burst_size: int, model: str | None) -> None:
        self.settings = settings
        self.burst_size = burst_size
        self.model = model
        self.answers: list[GateAnswer] = []
        self.burst_started = False
        self.book: ReferenceBook | None = None
        self.reference: ReferenceCheck | None = None
        self.log_lines: Callable[[], Sequence[str]] | None = None
        self.spans: list[tuple[float, float]] = []  # (sent, answered) of the current burst's requests
        self.load: BurstLoad | None = None
        self.max_running: int | None = None

    async def rounds(self, client: httpx.AsyncClient, nan_lines: Callable[[], Sequence[str]]) -> str | None:
        """Sequential prompts, the reference, then the burst; a reason when the gate could not start."""
        if self.model is None:
            try:
                self.model = await _model_id(client)
            except (httpx.HTTPError, ValueError) as exc:
                return one_line(f"could not read the model id from /v1/models: {_describe(exc)}")
        for i, prompt in enumerate(self.settings.prompts):
            await self._ask(client, prompt, GateRound.SEQUENTIAL, i)
        if not self._passing(nan_lines):
            return None  # the gate has failed already; on a real model the burst would cost minutes more
        if self.settings.reference.enabled:
            try:
                self.reference = await self._agreement(client)
            except (httpx.HTTPError, ValueError) as exc:
                return one_line(f"reference check: greedy outputs from /generate failed: {_describe(exc)}")
            if not self.reference.passed:
                return None
        try:
            await self._bursts(client, nan_lines)
        except (httpx.HTTPError, ValueError) as exc:
            return one_line(f"reference burst: greedy outputs from /generate failed: {_describe(exc)}")
        return None

    def _passing(self, nan_lines: Callable[[], Sequence[str]]) -> bool:
        return all(a.verdict is GateVerdict.PASSED for a in self.answers) and not nan_lines()

    async def _bursts(self, client: httpx.AsyncClient, nan_lines: Callable[[], Sequence[str]]) -> None:
        """The burst, again while it did not reach the target concurrency (a starved client sends
        one by one), at most BURST_TRIES times; what it reached is kept either way."""
        if not self.settings.prompts and self.reference is None:
            return
        self.burst_started = True
        for attempt in range(1, BURST_TRIES + 1):
            before = len(self.log_lines()) if self.log_lines is not None else 0
            self.spans = []
            self.answers = [a for a in self.answers if a.round is not GateRound.BURST]
            if self.settings.prompts:
                prompts = burst_prompts(self.settings.prompts, self.burst_size)
                asks = (self._ask(client, p, GateRound.BURST, i) for i, p in enumerate(prompts))
                await asyncio.gather(*asks)
            else:
                await self._reference_burst(client)
            server = running_requests(self.log_lines()[before:]) if self.log_lines is not None else None
            target = min(self.burst_size, self.max_running or self.burst_size)
            overlap = client_overlap(self.spans)
            self.load = BurstLoad(target=target, client=overlap, server=server, tries=attempt)
            failed = self.reference is not None and not self.reference.passed
            if self.load.reached_target or failed or not self._passing(nan_lines):
                return
            log.warning("gate burst: %s; trying again", self.load.reason())

    async def _reference_burst(self, client: httpx.AsyncClient) -> None:
        """The reference prompts cycled to a burst of `burst_size` greedy requests, each judged."""
        assert self.reference is not None
        wanted = self.settings.reference
        prompts = [wanted.prompts[i % len(wanted.prompts)] for i in range(self.burst_size)]
        outputs = await asyncio.gather(*(self._timed_greedy(client, p) for p in prompts))
        known = self.book.answers() if self.book is not None else None
        trusted = known[0] if known is not None else self.reference.outputs  # recording: this server's own
        burst = agreements(trusted, outputs, wanted.tokens, near_tie=wanted.near_tie)
        self.reference = replace(self.reference, burst=burst)

    async def _timed_greedy(self, client: httpx.AsyncClient, prompt: str) -> GreedyOutput:
        t0 = time.perf_counter()
        try:
            return await greedy(client, prompt, self.settings.reference.tokens)
        finally:
            self.spans.append((t0, time.perf_counter()))

    async def _agreement(self, client: httpx.AsyncClient) -> ReferenceCheck:
        """This server's greedy outputs against the reference (or recorded as the reference)."""
        wanted = self.settings.reference
        outputs = tuple([await greedy(client, p, wanted.tokens) for p in wanted.prompts])
        known = self.book.answers() if self.book is not None else None
        if known is None:
            recorded = self.book is not None and self.book.record(outputs, self.model)
            return ReferenceCheck(
                source="this server", outputs=outputs, recorded=recorded, near_tie=wanted.near_tie
            )
        answers, source = known
        return ReferenceCheck(
            source=source,
            outputs=outputs,
            agreements=agreements(answers, outputs, wanted.tokens, near_tie=wanted.near_tie),
            near_tie=wanted.near_tie,
        )

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
        t1 = time.perf_counter()
        if round_ is GateRound.BURST:
            self.spans.append((t0, t1))
        self.answers.append(GateAnswer(**where, **fields, latency_s=t1 - t0))


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
        reason = one_line(f"malformed response: {exc}")
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
    return one_line(f"{type(exc).__name__}: {exc}")


def _error_text(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return one_line(response.text[:200]) or "(empty body)"
    if isinstance(body, dict):
        error = body.get("error")
        message = (
            body.get("message")
            or body.get("detail")
            or (error.get("message") if isinstance(error, dict) else error)
        )
        if message:
            return one_line(str(message)[:200])
    return one_line(str(body)[:200])
