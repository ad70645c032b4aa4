"""Run the benchmark stage against a live server: warmup, flush, load points, self-check.

I/O edge of the stage. Per load point: warmup through the same concurrency
limit (excluded), /flush_cache, a settle pause, then T0 and the measured
requests (fixed concurrency via a semaphore whose wait is not in TTFT, or a
precomputed Poisson/gamma arrival schedule), then T1 when all have ended.
A wave of simultaneous starts is dispatched one per event-loop pass, so the
responses of the first ones are read while the rest are being sent.

A watchdog task enforces per-request first-content and idle limits and the
stage deadline, and polls `server_died` (set by whoever watches the server
process) every 20 ms: when it fires, every request still queued or in flight
is cancelled and recorded as failed with class server_died, and the partial
result comes back with crashed=True.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from time import perf_counter, process_time
from typing import TypeVar

import httpx

from tuner.bench import load
from tuner.bench.client import HttpClients, RequestSender
from tuner.bench.metrics import compute_metrics
from tuner.bench.selfcheck import LoopLagProbe, SelfCheck
from tuner.bench.settings import BenchSettings, LoadPoint, WorkloadKind
from tuner.bench.stage import Aborted, Stage
from tuner.bench.types import BenchResult, ErrorClass, LoadPointResult
from tuner.bench.workload import DatasetRow, RequestSpec, build_requests, load_dataset, warmup_specs
from tuner.errors import BenchmarkError
from tuner.sglang.auth import ServerAuth

log = logging.getLogger(__name__)

T = TypeVar("T")

# A measured window shorter than this is noise, not a measurement: the host's scheduling jitter and
# the timer are a large share of it. Two identical configurations measured over 0.3-0.6 s on real
# SGLang differed by 35%. The ramp and the drain of a closed loop (about a request latency each) bias
# a short run the same way for every configuration; they do not make it unrepeatable, so the window is
# not judged in request latencies (on real SGLang, one launch measured over 8.5 s and 8.9 s windows
# of about 6 latencies, on two machines, gave 2,398 and 2,313 tok/s).
MIN_WINDOW_S = 2.0


def short_window(result: BenchResult) -> str | None:
    """`noisy: ...` when the objective load point's window was too short to measure; None when not."""
    metrics = result.objective_metrics
    if metrics is None or not metrics.completed:
        return None
    window = metrics.duration_s
    if window >= MIN_WINDOW_S:
        return None
    return (
        f"noisy: the benchmark window was {window:.2f} s, shorter than the {MIN_WINDOW_S:.0f} s it takes "
        "to measure against the host's jitter: raise num_prompts"
    )


async def fetch_model(client: httpx.AsyncClient) -> str:
    """The served model name: the first id of GET /v1/models."""
    try:
        resp = await client.get("/v1/models")
        resp.raise_for_status()
        return str(resp.json()["data"][0]["id"])
    except (httpx.HTTPError, KeyError, IndexError, TypeError, ValueError) as exc:
        where = str(client.base_url).rstrip("/")
        raise BenchmarkError(f"cannot read the model name from {where}/v1/models: {exc}") from exc


async def served_vocab_size(client: httpx.AsyncClient) -> int | None:
    """The served model's vocabulary size: `vocab_size` of the config.json in the model directory
    /model_info names (the tuner runs beside the server); None where that is not a readable folder."""
    try:
        resp = await client.get("/model_info")
        path = resp.json().get("model_path") if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return vocab_size_of(Path(path)) if isinstance(path, str) and path else None


def vocab_size_of(model_dir: Path) -> int | None:
    """`vocab_size` of a model folder's config.json (or of its text_config, for multimodal models)."""
    try:
        config = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError):
        return None
    for holder in (config, config.get("text_config") or {}, config.get("llm_config") or {}):
        value = holder.get("vocab_size") if isinstance(holder, dict) else None
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


async def flush_cache(client: httpx.AsyncClient) -> bool:
    """POST /flush_cache; True on 200. 400 (busy) and 404 (no such endpoint) are tolerated."""
    try:
        resp = await client.post("/flush_cache")
    except httpx.HTTPError as exc:
        log.warning("flush_cache failed: %s", exc)
        return False
    if resp.status_code != 200:
        log.info("flush_cache answered %s; continuing without a flush", resp.status_code)
    return resp.status_code == 200


def _connections_needed(settings: BenchSettings) -> int:
    return max((p.concurrency if p.concurrency is not None else p.prompts) for p in settings.load_points)


async def run_benchmark(
    base_url: str,
    settings: BenchSettings,
    *,
    model: str | None = None,
    server_died: threading.Event | None = None,
    progress: bool = False,
    settle_s: float | None = None,
    stop: Callable[[], bool] | None = None,
    auth: ServerAuth | None = None,
) -> BenchResult:
    """Run every load point of settings against base_url; partial results if the server dies.

    `settle_s` overrides `settings.settle_s` (the pause between warmup/flush and T0); `stop`
    returns True once the run should end (a stop request): every request is cancelled.
    """
    settle = settings.settle_s if settle_s is None else settle_s
    if not settings.load_points:
        raise BenchmarkError("benchmark settings have no load point")
    wl = settings.workload
    rows = load_dataset(wl) if wl.kind is not WorkloadKind.RANDOM else None
    t_stage = perf_counter()
    stage = Stage(settings.timeouts, server_died, stop)
    probe = LoopLagProbe(settings.self_check)
    probe.start()
    watchdog = asyncio.ensure_future(stage.watch())
    bar = _Progress(settings.load_points) if progress else None
    points: list[LoadPointResult] = []
    http = HttpClients(
        base_url,
        max_connections=_connections_needed(settings),
        timeouts=settings.timeouts,
        auth=auth,
    )
    name = model or ""
    try:
        async with http:
            try:
                if not name:
                    name = await stage.race(fetch_model(http.control))
                await _run_points(stage, http, settings, rows, name, settle, bar, points)
            except Aborted:
                pass
    finally:
        watchdog.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watchdog
        if bar is not None:
            bar.close()
    return _bench_result(points, settings, name, stage.reason, await probe.stop(), perf_counter() - t_stage)


def _bench_result(
    points: list[LoadPointResult], settings: BenchSettings, name: str, reason: ErrorClass | None,
    check: SelfCheck, duration_s: float,
) -> BenchResult:  # fmt: skip
    """What the run measured, with why it ended early (a death, the deadline, a hang) and how far the
    client can be trusted (its self-check)."""
    n = len(settings.load_points)
    return BenchResult(
        points=tuple(points),
        objective_point=settings.objective_point % n,
        model=name,
        crashed=reason is ErrorClass.SERVER_DIED,
        deadline_hit=reason is ErrorClass.DEADLINE,
        hung=reason is ErrorClass.HANG,
        client_bound=check.client_bound,
        client_cpu_share=check.cpu_share,
        loop_lag_p99_ms=check.loop_lag_p99_ms,
        starved=check.starved,
        run_queue_wait_share=check.run_queue_wait_share,
        duration_s=duration_s,
    )



async def _run_points(
    stage: Stage, http: HttpClients, settings: BenchSettings, rows: tuple[DatasetRow, ...] | None,
    name: str, settle: float, bar: _Progress | None, points: list[LoadPointResult],
) -> None:  # fmt: skip
    """Every load point in turn (its requests built up front), each result appended to `points` as it
    is measured (a death or stop keeps what was measured)."""
    wl = settings.workload
    vocab = await stage.race(served_vocab_size(http.control)) if rows is None else None
    plans = [
        build_requests(wl, p.prompts, seed=wl.seed + i, rows=rows, vocab_size=vocab)
        for i, p in enumerate(settings.load_points)
    ]
    sender = RequestSender(http, api=wl.api, model=name)
    for i, (point, specs) in enumerate(zip(settings.load_points, plans, strict=True)):
        result = await _run_point(stage, http.control, sender, settings, point, specs, i, settle, bar)
        if result is not None:
            points.append(result)
        stage.check()


async def _run_point(
    stage: Stage,
    client: httpx.AsyncClient,
    sender: RequestSender,
    settings: BenchSettings,
    point: LoadPoint,
    specs: tuple[RequestSpec, ...],
    index: int,
    settle_s: float,
    bar: _Progress | None,
) -> LoadPointResult | None:
    """Warmup, flush, settle, measure one load point; None if aborted before T0."""
    label = point.label
    n_warm = settings.warmup_requests if settings.warmup_requests is not None else (point.concurrency or 1)
    warm = warmup_specs(specs, n_warm)
    try:
        if warm:
            slots = point.concurrency or len(warm)
            await stage.run_requests(sender, warm, label=f"{label}/warmup", concurrency=slots)
            stage.check()
        flushed = await stage.race(flush_cache(client)) if settings.flush_cache else False
        if settle_s > 0:
            await stage.sleep(settle_s)
        stage.check()
    except Aborted:
        return None
    offsets = None
    if point.request_rate is not None:
        offsets = load.arrival_offsets_s(
            len(specs), point.request_rate, point.burstiness, seed=settings.workload.seed + index
        )
    on_done = bar.advancer(index) if bar is not None else None
    prepared = [sender.prepare(spec) for spec in specs]
    cpu0 = process_time()
    t0 = perf_counter()
    records = await stage.run_requests(
        sender,
        specs,
        label=label,
        concurrency=point.concurrency,
        offsets_s=offsets,
        prepared=prepared,
        on_done=on_done,
    )
    t1 = perf_counter()
    cpu_s = process_time() - cpu0
    metrics = compute_metrics(records, t0_s=t0, t1_s=max(t1, t0 + 1e-9), concurrency=point.concurrency)
    return LoadPointResult(
        point=point,
        metrics=metrics,
        records=tuple(records),
        warmup_requests=len(warm),
        flushed=flushed,
        client_cpu_s=cpu_s,
    )


class _Progress:
    """A rich progress bar: requests done / total, one line per load point."""

    def __init__(self, points: tuple[LoadPoint, ...]) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),  # stdout stays the result's
        )
        self._tasks = [self._progress.add_task(f"bench {p.label}", total=p.prompts) for p in points]
        self._progress.start()

    def advancer(self, index: int) -> Callable[[], None]:
        task_id = self._tasks[index]
        return lambda: self._progress.advance(task_id)

    def close(self) -> None:
        self._progress.stop()


def benchmark(
    base_url: str,
    settings: BenchSettings,
    *,
    model: str | None = None,
    server_died: threading.Event | None = None,
    progress: bool = False,
    settle_s: float | None = None,
    stop: Callable[[], bool] | None = None,
    auth: ServerAuth | None = None,
) -> BenchResult:
    """Synchronous run_benchmark on a fresh event loop (uvloop when installed)."""
    coro = run_benchmark(
        base_url,
        settings,
        model=model,
        server_died=server_died,
        progress=progress,
        settle_s=settle_s,
        stop=stop,
        auth=auth,
    )
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)
