"""The SLO capacity as a study's objective: a load search inside each trial's launch.

    launch ─ gate ─ load search (this module's benchmark stage) ─ stop
                    start: the space's `start`, else the median capacity of the study's launches so
                           far, else the study's benchmark concurrency / 1 req/s; never above what
                           the KV pool holds (KV tokens / tokens per request bound the concurrency)
                    bracket (x2 cold, x(1 + precision)^4 from the study's capacities), bisect,
                    repeat only near the boundary, stop within `precision` or after `max_runs` runs

The server is the trial's own (no extra restart; one relaunch after a death under load, to search
below it). Each measured load point is stored as it is measured (tuner_capacity_points), and a
launch of the same configuration first reads them back: a run killed inside a search resumes it
without losing or repeating a point. The capacity is the trial's metric `capacity_<load>`; the
curve and what bound it (an SLO, the served rate, failed requests, the server dying, the KV pool)
go to tuner_capacity beside the trial, where status, the report and the export read them.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from tuner.bench.settings import MAX_PROMPTS as MAX_POINT_REQUESTS
from tuner.bench.settings import BenchSettings
from tuner.bench.types import BenchResult
from tuner.capacity.run import MAX_LAUNCHES, _CapacityStage
from tuner.capacity.search import Knob, Measurement, PointVerdict, Search, SearchPlan
from tuner.config import Failure, Outcome, TrialConfig
from tuner.result import TrialResult
from tuner.session import TrialContext, key_of, prepare_launch
from tuner.sglang.server_info import _kv_tokens, server_info
from tuner.space.goals import CapacitySpec
from tuner.space.loader import SearchSpace
from tuner.store import capacity_points as stored
from tuner.store.capacity import CapacityRecord
from tuner.store.factory import open_store
from tuner.store.protocol import StoreOpener
from tuner.trial import run_trial

log = logging.getLogger(__name__)

NEAR = 2.0  # repeats start once the bracket is within two precisions (the last bisection or two)


def warm_step(precision: float) -> float:
    """The bracketing factor from a close first guess: two geometric bisections of it land just
    within `precision` ((1 + p)^4, a hair under), so no bisection is spent on a last few percent."""
    return (1 + precision) ** 4 * 0.999


KV_HEADROOM = 2.0  # a concurrency above this many times what the KV pool holds is never tried


def capacity_spec(space: SearchSpace) -> CapacitySpec | None:
    """The space's capacity objective, if it has one."""
    return next((o.capacity for o in space.objectives if o.capacity is not None), None)


def search_key(spec: CapacitySpec) -> str:
    return f"{spec.load}|{spec.line()}"


def run_key(label: str) -> str:
    """One search per kind of launch of a configuration: its first measurement, each finalist repeat."""
    parts = label.split("-")
    return f"repeat-{parts[-1]}" if parts[0] == "finalist" and len(parts) >= 3 else "first"


def tokens_per_request(bench: BenchSettings) -> float:
    """KV tokens one request holds at its end, on average (prompt + answer)."""
    w = bench.workload
    mean = (1 + w.range_ratio) / 2  # lengths are uniform on [L x ratio, L]
    return max(1.0, (w.input_len + w.output_len) * mean)


def kv_bound(kv_tokens: int | None, bench: BenchSettings) -> int | None:
    """The requests the KV pool holds at once at their full length (None: pool unknown)."""
    return None if not kv_tokens else max(1, int(kv_tokens // tokens_per_request(bench)))


def plan_for(
    spec: CapacitySpec, *, prior: Sequence[float], bench_concurrency: int, kv_requests: int | None
) -> SearchPlan:
    """Where the search starts and how far it may go (pure)."""
    knob = Knob(spec.load)
    guesses = [c for c in prior if c > 0]
    if spec.start is not None:
        start, step = spec.start, warm_step(spec.precision)
    elif guesses:
        start, step = statistics.median(guesses), warm_step(spec.precision)
    else:
        start, step = (float(bench_concurrency) if knob is Knob.CONCURRENCY else 1.0), 2.0
    high = 4096.0
    if knob is Knob.CONCURRENCY and kv_requests is not None:
        high = min(float(MAX_POINT_REQUESTS), max(2.0, KV_HEADROOM * kv_requests))
        start = min(start, float(kv_requests))
    return SearchPlan(
        knob=knob, start=start, slos=spec.slo, repeats=spec.repeats, tolerance=spec.precision,
        max_points=spec.max_runs, step=step, high=high, relative=True, near_factor=NEAR,
    )  # fmt: skip


LITTLE_SHARE = 0.5  # a cold rate search's second load: this share of the rate that fills the server


def little_jump(search: Search, *, in_flight: int | None, kv_requests: int | None) -> float | None:
    """A cold request-rate search's second load, from its first: by Little's law the server holds
    rate x E2E requests, so no rate above min(in-flight cap, what the KV pool holds) / E2E is
    served; half of that, when it is more than the next doubling (None: no jump)."""
    plan = search.plan
    if plan.knob is not Knob.REQUEST_RATE or search.measured() != 1:
        return None
    ((load, runs),) = search.runs.items()
    verdict = search.verdicts()[load]
    e2e = [r.values.get("e2e_p50_ms") for r in runs]
    held = [c for c in (in_flight, kv_requests) if c]
    if not verdict.passed or not held or not e2e[0]:
        return None
    target = plan.clamp(LITTLE_SHARE * min(held) / (float(e2e[0]) / 1000))
    return target if target > plan.clamp(load * plan.step) else None


def _measurement(p: stored.StoredPoint) -> Measurement:
    return Measurement(load=p.load, values=p.values, completed=p.completed, failed=p.failed, died=p.died)


def _stored(m: Measurement) -> stored.StoredPoint:
    values: dict[str, float | None] = {k: v for k, v in m.values.items() if v is not None}
    return stored.StoredPoint(load=m.load, values=values, completed=m.completed, failed=m.failed, died=m.died)


class _Stage(_CapacityStage):
    """The capacity stage, storing each point as it is measured and bounded by the launch's KV pool."""

    def __init__(self, ctx: TrialContext, search: Search, spec: CapacitySpec, sink: _Sink) -> None:
        super().__init__(ctx, search, spec.prompts, sink.point, close_at_capacity=True)
        self.sink = sink
        self.cold = not sink.prior and spec.start is None  # nothing to start from but the launch
        self.limits: tuple[int | None, int | None] = (None, None)  # in-flight cap, KV-pool requests

    def _next(self) -> float | None:
        if self.cold:
            jump = little_jump(self.search, in_flight=self.limits[0], kv_requests=self.limits[1])
            if jump is not None and jump not in self.search.runs:
                return jump
        return super()._next()

    def __call__(self, base_url: str, settings: BenchSettings, **kw: Any) -> BenchResult:
        cap = self.sink.spec.max_concurrency
        if cap is not None:  # the rate search's in-flight cap, apart from the benchmark's load point
            point = settings.load_points[settings.objective_point].model_copy(update={"concurrency": cap})
            settings = settings.model_copy(update={"load_points": (point,), "objective_point": 0})
        info = server_info(base_url, auth=kw.get("auth")) or {}
        kv = _kv_tokens(info)
        self.sink.kv_tokens = kv
        fresh = self.search.measured() == 0
        conc = settings.load_points[settings.objective_point].concurrency or 64
        self.limits = (conc, kv_bound(kv, settings))
        if fresh or kv is not None:
            plan = plan_for(self.sink.spec, prior=self.sink.prior, bench_concurrency=conc,
                            kv_requests=kv_bound(kv, settings))  # fmt: skip
            self.search.plan = plan if fresh else replace(self.search.plan, high=plan.high)
        return super().__call__(base_url, settings, **kw)


class _Sink:
    """Where the points go: the store, as each is measured."""

    def __init__(
        self, url: str, key: stored.SearchKey, spec: CapacitySpec, prior: Sequence[float],
        stores: StoreOpener = open_store,
    ) -> None:  # fmt: skip
        self.url, self.key, self.spec, self.prior, self.stores = url, key, spec, tuple(prior), stores
        self.kv_tokens: int | None = None

    def point(self, m: Measurement, _verdict: PointVerdict) -> None:
        with self.stores(self.url) as store:
            store.add_capacity_point(self.key, _stored(m))


class CapacityExecutor:
    """run_trial's signature: the trial launched with the load search as its benchmark stage."""

    def __init__(
        self, space: SearchSpace, *, db_url: str, study: str, inner: Any = run_trial,
        warm: tuple[str, str] | None = None, stores: StoreOpener = open_store,
    ) -> None:  # fmt: skip
        spec = capacity_spec(space)
        if spec is None:
            raise ValueError(f"{space.path}: no capacity objective")
        self.space, self.url, self.study, self.spec, self.inner = space, db_url, study, spec, inner
        self.warm = warm  # (database URL, study) of a warm start: its capacities start the search too
        self.stores = stores

    def _prior(self, config_hash: str | None = None) -> list[float]:
        """The capacities found so far under the same SLOs and knob: this launch's own (a finalist's
        repeat), else this study's, else a warm start's."""
        wanted = tuple(s.name for s in self.spec.slo)
        sources = [(self.url, self.study)] + ([self.warm] if self.warm else [])
        for url, study in sources:
            with self.stores(url, create=url == self.url) as store:
                records = store.capacity(study)
            found = [
                r
                for r in records
                if r.outcome == "ok" and r.capacity and r.knob == self.spec.load and tuple(r.slos) == wanted
            ]
            own = [float(r.capacity) for r in found if r.capacity and r.config_hash == config_hash]
            if own or found:
                return own or [float(r.capacity) for r in found if r.capacity]
        return []

    def __call__(
        self, config: TrialConfig, ctx: TrialContext, *, label: str, prepared: Any = None
    ) -> TrialResult:
        launch = prepared if prepared is not None else prepare_launch(config, ctx, label=label)
        if isinstance(launch, Failure):
            result: TrialResult = self.inner(config, ctx, label=label, prepared=launch)
            return result
        key = stored.SearchKey(
            study=self.study,
            config_hash=key_of(launch),
            run_key=run_key(label),
            search_key=search_key(self.spec),
        )
        sink = _Sink(self.url, key, self.spec, self._prior(key.config_hash), self.stores)
        with self.stores(self.url) as store:
            known = store.capacity_points(key)
        search = Search(plan=plan_for(self.spec, prior=sink.prior, bench_concurrency=1, kv_requests=None))
        for p in known:
            search.record(_measurement(p))
        if known:
            log.info("%s: resuming its load search from %d measured points", label, len(known))
        result = self._launches(config, ctx, label, launch, search, sink)
        return self._finish(result, search, sink, label)

    def _launches(
        self, config: TrialConfig, ctx: TrialContext, label: str, launch: Any, search: Search, sink: _Sink
    ) -> TrialResult:
        """Launch and search; a server that dies under a load marks it failed and is launched again."""
        for attempt in range(1, MAX_LAUNCHES + 1):
            name = label if attempt == 1 else f"{label}-{attempt}"
            if attempt > 1:
                launch = prepare_launch(config, ctx, label=name)
            stage = _Stage(ctx, search, self.spec, sink)
            result: TrialResult = self.inner(config, replace(ctx, bench=stage), label=name, prepared=launch)
            if result.failure is None or stage.died_at is None or result.outcome is Outcome.INTERRUPTED:
                return result
            died = Measurement(load=stage.died_at, values={}, completed=0, failed=0,
                               died=result.failure.outcome.value)  # fmt: skip
            search.record(died)
            sink.point(died, search.verdicts()[died.load])
            log.warning("%s: the server died under %g: launching it again to search below", label, died.load)
        return result

    def _finish(self, result: TrialResult, search: Search, sink: _Sink, label: str) -> TrialResult:
        if result.outcome is Outcome.INTERRUPTED or not search.runs:
            return result  # an interrupted search resumes from its stored points
        capacity = search.capacity()
        record = CapacityRecord(
            study=self.study,
            trial_number=_number(label),
            row_id=0,  # bound to the trial's row by its launch (bind_rows) when read
            config_hash=sink.key.config_hash,
            knob=self.spec.load,
            slos=tuple(s.name for s in self.spec.slo),
            capacity=capacity,
            points=curve_points(search, sink.kv_tokens, self.space.bench),
            outcome="ok" if result.ok else result.outcome.value,
            message=None if result.failure is None else result.failure.message[:500],
        )
        with self.stores(self.url) as store:
            store.save_capacity(record)
        if not result.ok:
            return result
        value = capacity if capacity is not None else 0.0  # measured: no load met the SLOs
        return replace(result, stage_metrics={**result.stage_metrics, self.spec.metric: value})


def executor_for(
    space: SearchSpace, *, db_url: str, study: str, warm: tuple[str, str] | None = None,
    stores: StoreOpener = open_store,
) -> Any:  # fmt: skip
    """What launches the study's trials: with the load search when the space has a capacity objective."""
    if capacity_spec(space) is None:
        return run_trial
    return CapacityExecutor(space, db_url=db_url, study=study, warm=warm, stores=stores)


def curve_points(search: Search, kv_tokens: int | None, bench: BenchSettings) -> tuple[dict[str, Any], ...]:
    """Each load judged, with its curve and what failed it; a failing load whose requests in flight
    (Σ e2e / duration) held more tokens than the KV pool also names the pool."""
    per_request = tokens_per_request(bench)
    out = []
    for v in search.verdicts().values():
        limits, why = list(v.limits), v.why
        in_flight = _median_of(search.runs[v.load], "concurrency")
        if not v.passed and kv_tokens and in_flight and in_flight * per_request > kv_tokens:
            limits.append("kv_pool")
            why += f"; {in_flight:,.0f} in flight x {per_request:,.0f} tokens > KV pool {kv_tokens:,}"
        out.append({
            "load": v.load, "passed": v.passed, "runs": v.runs, "medians": dict(v.medians), "why": why,
            "limits": limits, "curve": dict(v.curve), "kv_tokens": kv_tokens,
        })  # fmt: skip
    return tuple(out)


def _median_of(runs: Sequence[Measurement], name: str) -> float | None:
    values = [r.values.get(name) for r in runs]
    present = [float(x) for x in values if x is not None]
    return statistics.median(present) if present else None


def _number(label: str) -> int | None:
    digits = [p for p in label.split("-") if p.isdigit()]
    return int(digits[0]) if digits else None


__all__ = ["CapacityExecutor", "capacity_spec", "curve_points", "executor_for", "little_jump", "plan_for"]
