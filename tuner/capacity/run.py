"""`tuner capacity`: relaunch a trial's configuration once and search its highest load within the SLOs.

The launch, the gate and the teardown are the study's own (`trial_session`, `run_trial`); only
the benchmark stage is replaced, for this one launch, by the capacity search, which runs the
study's benchmark client (its workload, warmup, flush and self-check) at one load point after
another on the same server. The configuration is rendered again and must give the launch the
trial recorded (same config hash), as `confirm` requires. The result goes to its own table,
beside the trial's row; the trial's measurements and the study's front are left as they are.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tuner.bench.settings import MAX_PROMPTS as MAX_POINT_REQUESTS
from tuner.bench.settings import BenchSettings, LoadPoint
from tuner.bench.types import BenchResult
from tuner.capacity.search import Knob, Measurement, PointVerdict, Search, SearchPlan
from tuner.config import Failure, Outcome, TrialConfig
from tuner.errors import ConfigError, ProfileError
from tuner.interrupts import INTERRUPTS
from tuner.metrics import bench_values
from tuner.report.export import select
from tuner.report.frame import StudyData, load_study_data, measurements
from tuner.session import TrialContext, key_of, prepare_launch, trial_session
from tuner.space.goals import Slo
from tuner.space.loader import SearchSpace, config_from_params
from tuner.store.capacity import CapacityRecord
from tuner.store.factory import open_store
from tuner.store.protocol import StoreOpener
from tuner.store.rows import StoredTrial
from tuner.trial import run_trial

log = logging.getLogger(__name__)

OnPoint = Callable[[Measurement, PointVerdict], None]  # a run and its load's verdict so far
MAX_PROMPTS = 1000  # requests per load point at most (about 12 s of offered load below ~80 req/s)
MAX_LAUNCHES = 3  # launches per capacity run: the first, and one after each death under load


@dataclass(frozen=True, kw_only=True, slots=True)
class CapacityRequest:
    """What to measure: which trial, under which SLOs, by raising which knob."""

    trial: int | None = None  # None: the --best choice
    slos: tuple[Slo, ...] = ()  # empty: the space's latency constraints
    knob: Knob = Knob.REQUEST_RATE
    start: float | None = None  # None: from the trial's own measurement
    repeats: int = 3
    max_points: int = 14
    prompts: int | None = None  # requests per load point; None: by the load


def slos_for(space: SearchSpace, given: Sequence[str]) -> tuple[Slo, ...]:
    """The SLOs given on the command line, else the space's constraints on benchmark metrics."""
    if given:
        out = []
        for text in given:
            try:
                out.append(Slo.model_validate(text.replace(" ", "")))
            except ValueError as exc:
                raise ConfigError(
                    f"--slo {text!r}: expected METRIC<=NUMBER, e.g. 'ttft_p99_ms<=2000'"
                ) from exc
        return tuple(out)
    from tuner.metrics import BENCH_METRICS

    found = tuple(s for s in space.constraints if s.metric in BENCH_METRICS)
    if not found:
        raise ConfigError(
            f"capacity: {space.path} defines no SLO on a benchmark metric; expected --slo, "
            "e.g. --slo 'ttft_p99_ms<=2000'"
        )
    return found


def start_load(knob: Knob, row: StoredTrial, given: float | None) -> float:
    """Where the search starts: given, else what the trial's own measurement sustained."""
    if given is not None:
        return given
    m = measurements(row)
    if knob is Knob.CONCURRENCY:
        return max(1.0, round(m.get("concurrency") or 16.0))
    rate = m.get("request_throughput")
    return round(rate, 3) if rate else 1.0


def point_settings(bench: BenchSettings, knob: Knob, load: float, prompts: int | None) -> BenchSettings:
    """The study's benchmark at one load point: an offered rate (at most the study's concurrency in
    flight) or a concurrency."""
    if knob is Knob.CONCURRENCY:  # at least one request per client, or the concurrency is never reached
        conc = min(int(load), MAX_POINT_REQUESTS)
        wanted = max(prompts, conc) if prompts else max(32, 5 * conc)
        point = LoadPoint(concurrency=conc, num_prompts=min(MAX_POINT_REQUESTS, wanted))
    else:  # in flight at most what the study measured with, as a deployment caps it
        cap = bench.load_points[bench.objective_point].concurrency
        prompts = prompts or min(MAX_PROMPTS, max(32, math.ceil(12 * load)))
        point = LoadPoint(concurrency=cap, request_rate=load, num_prompts=prompts)
    return bench.model_copy(update={"load_points": (point,), "objective_point": 0})


class _CapacityStage:
    """The benchmark stage of the capacity launch: the search, over the study's benchmark client."""

    def __init__(
        self, ctx: TrialContext, search: Search, prompts: int | None, on_point: OnPoint | None,
        *, close_at_capacity: bool = False,
    ) -> None:  # fmt: skip
        self.inner = ctx.bench
        self.search = search
        self.prompts = prompts
        self.on_point = on_point
        self.results: list[tuple[float, BenchResult]] = []
        self.died_at: float | None = None  # the load under which the server died
        # when this launch measured nothing at the capacity (found by an earlier launch or process),
        # one run there, so the launch's own figures are those of its capacity
        self.close_at_capacity = close_at_capacity

    def _next(self) -> float | None:
        load = self.search.next_load()
        if load is not None or not self.close_at_capacity:
            return load
        best = self.search.capacity()
        if best is None or any(at == best for at, _ in self.results) or self.died_at is not None:
            return None
        return best

    def __call__(self, base_url: str, settings: BenchSettings, **kw: Any) -> BenchResult:
        died: threading.Event | None = kw.get("server_died")
        while (load := self._next()) is not None and not INTERRUPTS.requested:
            result = self.inner(
                base_url, point_settings(settings, self.search.plan.knob, load, self.prompts), **kw
            )
            if INTERRUPTS.requested:
                break  # a run cut short by a stop says nothing about this load
            self.results.append((load, result))
            metrics = result.objective_metrics
            if metrics is None or result.crashed or (died is not None and died.is_set()):
                self.died_at = load
                break
            m = Measurement(
                load=load,
                values={**bench_values(metrics), "duration_s": metrics.duration_s},
                completed=metrics.completed,
                failed=metrics.failed,
            )
            self.search.record(m)
            if self.on_point is not None:
                self.on_point(m, self.search.verdicts()[load])
        runs = [r for _, r in self.results]
        points = tuple(p for r in runs for p in r.points)
        best = self.search.capacity()
        # the objective point is a run at the capacity found (the trial then judges a point that passed)
        index = max((i for i, (load, _) in enumerate(self.results) if load == best), default=len(points) - 1)
        last = runs[-1] if runs else None
        return BenchResult(
            points=points,
            objective_point=index,
            model=last.model if last else "",
            crashed=bool(last and last.crashed),
            client_bound=any(r.client_bound for r in runs),
            client_cpu_share=max((r.client_cpu_share for r in runs), default=0.0),
            loop_lag_p99_ms=max(
                (r.loop_lag_p99_ms for r in runs if r.loop_lag_p99_ms is not None), default=None
            ),
            starved=any(r.starved for r in runs),
            duration_s=sum(r.duration_s for r in runs),
        )


def _search_launches(
    space: SearchSpace,
    config: TrialConfig,
    row: StoredTrial,
    search: Search,
    request: CapacityRequest,
    label: str,
    on_point: OnPoint | None,
    study: str,
) -> Failure | None:
    """Launch and search; a server that dies under a load marks that load failed and is launched
    again (up to MAX_LAUNCHES) to go on below it. The failure that ended the search, if any."""
    failure: Failure | None = None
    with trial_session(space) as ctx:
        for attempt in range(1, MAX_LAUNCHES + 1):
            prepared = prepare_launch(config, ctx, label=f"{label}-{attempt}")
            if key_of(prepared) != row.config_hash:
                raise ProfileError(
                    f"trial {row.trial_number} of study {study!r}: {space.path} now renders a different "
                    f"launch (config hash {key_of(prepared)}, recorded {row.config_hash}); expected the "
                    "study's space file and SGLang version"
                )
            stage = _CapacityStage(ctx, search, request.prompts, on_point)
            result = run_trial(
                config, replace(ctx, bench=stage), label=f"{label}-{attempt}", prepared=prepared
            )
            failure = result.failure
            if failure is None or stage.died_at is None or result.outcome is Outcome.INTERRUPTED:
                break
            died = Measurement(
                load=stage.died_at, values={}, completed=0, failed=0, died=failure.outcome.value
            )
            search.record(died)
            if on_point is not None:
                on_point(died, search.verdicts()[died.load])
            log.warning("the server died under %g: launching it again to search below", stage.died_at)
            failure = None
            if search.next_load() is None:
                break
    return failure


def _choose(data: StudyData, trial: int | None) -> StoredTrial:
    choice = select(data, trial=trial)
    return choice.row


def capacity(
    space: SearchSpace, request: CapacityRequest, *, db_url: str, study: str | None = None,
    on_point: OnPoint | None = None, stores: StoreOpener = open_store,
) -> CapacityRecord:  # fmt: skip
    """Relaunch the chosen trial, search its capacity under the SLOs, store and return the result."""
    if request.repeats < 1 or request.max_points < 2:
        raise ConfigError("capacity: expected --repeats ≥ 1 and --max-points ≥ 2")
    preferred = space.study_name if study is None else None
    data = load_study_data(db_url, study, preferred=preferred, stores=stores)
    row = _choose(data, request.trial)
    number = row.trial_number
    slos = request.slos or slos_for(space, ())
    try:
        config = config_from_params(space, row.params)
    except ConfigError as exc:
        raise ProfileError(f"trial {number} of study {data.name!r} does not fit {space.path}: {exc}") from exc
    plan = SearchPlan(
        knob=request.knob,
        start=start_load(request.knob, row, request.start),
        slos=slos,
        repeats=request.repeats,
        max_points=request.max_points,
    )
    search = Search(plan=plan)
    label = f"capacity-{number if number is not None else row.id:04d}"
    failure = _search_launches(space, config, row, search, request, label, on_point, data.name)
    verdicts = search.verdicts()
    points = tuple(
        {
            "load": v.load,
            "passed": v.passed,
            "runs": v.runs,
            "medians": dict(v.medians),
            "why": v.why,
            "limits": list(v.limits),
            "curve": dict(v.curve),
        }
        for v in verdicts.values()
    )
    record = CapacityRecord(
        study=data.name,
        trial_number=number,
        row_id=row.id,
        config_hash=row.config_hash,
        knob=plan.knob.value,
        slos=tuple(s.name for s in slos),
        capacity=search.capacity() if failure is None else None,
        points=points,
        outcome="ok" if failure is None else failure.outcome.value,
        message=None if failure is None else failure.message[:500],
    )
    if record.outcome != Outcome.INTERRUPTED.value:
        with stores(db_url) as store:  # an interrupted search is not a result
            store.save_capacity(record)
    return record


def finalists_capacity(
    space: SearchSpace, *, db_url: str, study: str, on_point: OnPoint | None = None,
    stores: StoreOpener = open_store,
) -> list[CapacityRecord]:  # fmt: skip
    """`search.finalists.capacity`: the capacity of each finalist the study re-measured (else of the
    --best choice) under the space's SLOs; a finalist already measured for this launch is skipped."""
    import optuna

    from tuner.study.finalists import STATE_ATTR
    from tuner.study.storage import make_storage

    slos = slos_for(space, ())
    data = load_study_data(db_url, study, stores=stores)
    loaded = optuna.load_study(study_name=data.name, storage=make_storage(db_url))
    claimed = loaded.user_attrs.get(STATE_ATTR) or {}
    numbers: list[int | None] = [int(n) for n in claimed] or [None]
    done = []
    for number in numbers:
        row = _choose(data, number)
        known = data.capacity_of(row.id)
        if known is not None and known.config_hash == row.config_hash and known.outcome == "ok":
            continue
        request = CapacityRequest(trial=number, slos=slos)
        done.append(
            capacity(space, request, db_url=db_url, study=data.name, on_point=on_point, stores=stores)
        )
    return done
