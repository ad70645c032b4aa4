"""The correctness / NaN gate run on a freshly ready server, before the benchmark.

Every prompt is asked once sequentially, then (if all of those passed and no
NaN was logged) once more in a concurrent burst as large as the largest
captured CUDA-graph batch (at least 8; see choose_burst_size): NaN from a
bad attention backend often shows only in batched decode or graph replay.
Answers are judged by the pure core in gate_checks.py (re-exported here, so
callers read all of it from `tuner.gate.run`). A server death stops the gate at once.

HTTP is plain httpx over asyncio; `transport` lets tests put a fake server
behind the client.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Sequence

import httpx

from tuner.gate.checks import (
    DEFAULT_BURST_SIZE,
    PRECEDENCE,
    REASON_MAX_CHARS,
    GateAnswer,
    GateResult,
    GateRound,
    GateVerdict,
    Reply,
    burst_prompts,
    check_answer,
    choose_burst_size,
    parse_reply,
    split_think,
    stopped_verdict,
    summarize,
    validate_settings,
)
from tuner.gate.reference import ReferenceBook
from tuner.gate.rounds import GateRun
from tuner.gate.settings import GateSettings
from tuner.sglang.auth import ServerAuth, httpx_auth
from tuner.sglang.http import async_client

__all__ = [
    "DEFAULT_BURST_SIZE",
    "PRECEDENCE",
    "REASON_MAX_CHARS",
    "GateAnswer",
    "GateResult",
    "GateRound",
    "GateVerdict",
    "Reply",
    "burst_prompts",
    "check_answer",
    "choose_burst_size",
    "gate",
    "parse_reply",
    "run_gate",
    "split_think",
    "stopped_verdict",
    "summarize",
    "validate_settings",
]

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 10.0
DEATH_POLL_S = 0.05  # how often the gate looks at the server_died event


def gate(
    base_url: str,
    settings: GateSettings,
    *,
    captured_bs: Sequence[int] | None,
    model: str | None = None,
    nan_log_lines: Callable[[], Sequence[str]] | None = None,
    server_died: threading.Event | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    reference: ReferenceBook | None = None,
    stop: Callable[[], bool] | None = None,
    auth: ServerAuth | None = None,
    log_lines: Callable[[], Sequence[str]] | None = None,
    max_running: int | None = None,
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
            reference=reference,
            stop=stop,
            auth=auth,
            log_lines=log_lines,
            max_running=max_running,
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
    reference: ReferenceBook | None = None,
    stop: Callable[[], bool] | None = None,
    auth: ServerAuth | None = None,
    log_lines: Callable[[], Sequence[str]] | None = None,
    max_running: int | None = None,
) -> GateResult:
    """Ask every prompt sequentially, then as a burst, and judge the answers; then the reference check.

    `nan_log_lines` returns every NaN (and KV-canary violation) line the server's log has shown
    so far; `server_died` is set by whoever watches the server process; `reference` holds the
    reference answers of `settings.reference` (None: the check only records this server's outputs);
    `stop` returns True once the run should end (a stop request): the requests in flight are
    cancelled and the caller acts on it. `log_lines` returns the server's log lines since the gate
    began: the scheduler's batch lines say how many requests it really ran at once during the burst.
    `max_running` is the most requests the server runs at once (its max_running_requests): a burst
    larger than that is judged against it, since no client can make the server batch more.
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
    run = GateRun(settings=settings, burst_size=choose_burst_size(settings, captured_bs), model=model)
    run.book = reference
    run.log_lines = log_lines
    run.max_running = max_running
    nan_lines: Callable[[], Sequence[str]] = nan_log_lines or tuple
    timeout = httpx.Timeout(settings.timeout_s, connect=min(CONNECT_TIMEOUT_S, settings.timeout_s))
    limits = httpx.Limits(max_connections=run.burst_size, max_keepalive_connections=run.burst_size)
    async with async_client(  # no proxy; every answer bounded in bytes and time, stop-aware
        base_url,
        timeout=timeout,
        deadline_s=settings.timeout_s,
        limits=limits,
        transport=transport,
        auth=httpx_auth(auth),
        stop=stop,
    ) as client:
        finished, fatal = await _drive(run, client, nan_lines, settings, server_died, stop)
    result = _judged(run, tuple(nan_lines()), finished, fatal, server_died, settings, started)
    log.info(
        "gate %s in %.1f s: %s",
        result.verdict.value,
        result.duration_s,
        result.reason or "all answers passed",
    )
    return result


async def _drive(
    run: GateRun, client: httpx.AsyncClient, nan_lines: Callable[[], Sequence[str]], settings: GateSettings,
    server_died: threading.Event | None, stop: Callable[[], bool] | None,
) -> tuple[bool, str | None]:  # fmt: skip
    """The run's rounds until they finish, the server dies, a stop is asked or the gate's time is
    up; (finished, the reason the rounds could not start)."""
    work = asyncio.create_task(run.rounds(client, nan_lines))
    watchers = {work}
    if server_died is not None:
        watchers.add(asyncio.create_task(_wait_set(server_died.is_set)))
    if stop is not None:
        watchers.add(asyncio.create_task(_wait_set(stop)))
    done, pending = await asyncio.wait(
        watchers, timeout=settings.timeout_s, return_when=asyncio.FIRST_COMPLETED
    )
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    return work in done, (work.result() if work in done else None)


def _judged(
    run: GateRun, lines: tuple[str, ...], finished: bool, fatal: str | None,
    server_died: threading.Event | None, settings: GateSettings, started: float,
) -> GateResult:  # fmt: skip
    """The gate's result: the answers' verdict, then the reference check's and the burst load's."""
    answers = tuple(sorted(run.answers, key=lambda a: (a.round is GateRound.BURST, a.index)))
    died = server_died is not None and server_died.is_set()
    verdict, reason = _verdict(answers, lines, finished=finished, fatal=fatal, died=died, settings=settings)
    check = run.reference
    if verdict is GateVerdict.PASSED and check is not None and not check.passed:
        verdict, reason = GateVerdict.WRONG_ANSWER, check.reason()
    load = run.load
    if verdict is GateVerdict.PASSED and load is not None and not load.reached_target:
        verdict, reason = GateVerdict.INCONCLUSIVE, load.reason()
    result = GateResult(
        verdict=verdict,
        reason=reason,
        answers=answers,
        nan_log_lines=lines,
        burst_size=run.burst_size if run.burst_started else None,
        duration_s=time.perf_counter() - started,
        model=run.model,
        reference=check,
        load=load,
    )
    return result


def _verdict(
    answers: Sequence[GateAnswer],
    lines: Sequence[str],
    *,
    finished: bool,
    fatal: str | None,
    died: bool,
    settings: GateSettings,
) -> tuple[GateVerdict, str | None]:
    """The verdict of the answers: a stopped gate's, an HTTP failure's, or the answers' own."""
    if not finished:
        return stopped_verdict(answers, lines, died=died, timeout_s=settings.timeout_s)
    if fatal is not None:
        return GateVerdict.ERROR, fatal
    return summarize(answers, lines)


async def _wait_set(is_set: Callable[[], bool]) -> None:
    # threading.Event has no awaitable wait; a blocking wait in a thread could
    # outlive the loop, so poll.
    while not is_set():
        await asyncio.sleep(DEATH_POLL_S)
