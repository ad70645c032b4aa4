"""A simulated deployment without processes: every launch answered by the simulator's oracle.

`World(space_file)` reads a shipped sim space twice: as the product reads it (`load_space`, so
configurations, flags and launch keys are exactly the tuner's) and as the oracle reads it
(`tuner.sim.spacefile`, for the scenario, the workload and the points of the space). A launch
renders the configuration's SGLang flags like `tuner run` would, resolves them like the
simulator (`launch_from_argv`) and asks the noise-free oracle (`tuner.sim.oracle.predict`) what
the server would do. Failures are classified by the product's own log classifier over the log
lines the simulator would print (so the blamed backend, role and stage are what a live run
records); a measured launch gets a throughput with the scenario's run-to-run noise (one
Gaussian factor per launch, σ = noise_pct, clipped to ±10%, as the live simulator draws it).

    world = World(ROOT / "search_spaces" / "dsv32-fp8-h200-sim.yaml")
    shot = world.shot(params)               # oracle entry of a params dict (cached by launch key)
    result = world.trial_result(config, spec, rng)   # a TrialResult shaped like run_trial's
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import random
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tuner.bench.settings import LoadPoint
from tuner.bench.types import BenchMetrics, BenchResult, LatencyStats, LoadPointResult
from tuner.config import (
    Failure,
    GpuInfo,
    LaunchSpec,
    Outcome,
    Phase,
    ServerFacts,
    ServerLoad,
    StageTimings,
    TrialConfig,
)
from tuner.engine import engine_for
from tuner.result import TrialResult
from tuner.search.evidence import Evidence, knobs_of
from tuner.search.rules import Rule, rules_from
from tuner.session import render_launch
from tuner.sglang.logs import classify_failure
from tuner.sim import logfmt, memory
from tuner.sim.generate import write
from tuner.sim.generation_check import generate
from tuner.sim.landscape import _violations
from tuner.sim.oracle import Outcome as SimOutcome
from tuner.sim.oracle import Prediction, predict
from tuner.sim.resolve import Launch
from tuner.sim.spacefile import Point, launch_from_argv, read_space
from tuner.space.loader import config_from_params, load_space

ROOT = Path(__file__).resolve().parents[1]
NOISE_CLIP = 0.10  # the live simulator clips its per-run factor to ±10%
SIGQUIT = "Received sigquit from a child process. It usually means the child failed."


@dataclass(frozen=True, kw_only=True, slots=True)
class Shot:
    """What launching one configuration does, noise-free (the oracle's answer)."""

    key: str  # the product's launch key
    prediction: Prediction
    failure: Failure | None  # None: the server came up and measured
    feasible: bool  # measured and every constraint the oracle can judge holds
    tp: int
    captured_bs: tuple[int, ...]
    graphs: bool

    @property
    def measured(self) -> bool:
        return self.failure is None

    @property
    def throughput(self) -> float:
        return self.prediction.output_tok_s or 0.0

    @property
    def kv_tokens(self) -> int:
        return self.prediction.kv_tokens or 0


class World:
    """One shipped sim space: its product space, its oracle, its true best and front."""

    def __init__(self, path: Path) -> None:
        logging.getLogger("tuner").setLevel(logging.ERROR)  # a launch per point: no flag warnings
        self.path = path
        self.sim = read_space(path)
        self.scenario = self.sim.scenario()
        self.space = load_space(path)
        self.engine = engine_for(self.space, state_root=None)
        self.version = self.engine.sglang_version
        self.noise = self.scenario.perf.noise_pct / 100.0
        self.name = self.space.name.removesuffix("-sim")
        self._by_key: dict[str, Shot] = {}
        self._logs: dict[tuple[Any, ...], Failure] = {}
        self.points: list[Point] = list(self.sim.points())
        g = self.scenario.gpus
        self.gpus = tuple(
            GpuInfo(index=i, uuid=f"GPU-sim-{i}", name=g.name, compute_capability=g.compute_capability,
                    total_mib=g.total_mib)
            for i in range(g.count)
        )  # fmt: skip
        cache = _shot_cache(path, self.scenario)
        kept: list[Shot] | None = None
        if cache.exists():  # the answers and the points' shots in order (rendering each point again is slow)
            self._by_key, kept = pickle.loads(cache.read_bytes())
        self.shots = kept if kept is not None and len(kept) == len(self.points) else [
            self.shot(p) for p in self.points
        ]
        if kept is None:
            cache.parent.mkdir(parents=True, exist_ok=True)
            part = cache.with_suffix(f".{os.getpid()}.part")
            part.write_bytes(pickle.dumps((self._by_key, self.shots)))
            part.replace(cache)
        ok = [s for s in self.shots if s.feasible]
        self.best = max(s.throughput for s in ok)
        self.front_hv = hypervolume([(s.throughput, float(s.kv_tokens)) for s in ok])

    # -- launches -------------------------------------------------------------------------------

    def config(self, params: Mapping[str, object]) -> TrialConfig:
        return config_from_params(self.space, params)

    def spec(self, config: TrialConfig) -> LaunchSpec:
        """The launch `tuner run` would make (fixed port: nothing listens)."""
        return render_launch(config, self.space, self.engine, port=30000, log_path=Path("/dev/null"))

    def shot(self, params: Mapping[str, object]) -> Shot:
        return self.shot_of(self.spec(self.config(params)))

    def shot_of(self, spec: LaunchSpec) -> Shot:
        """The oracle's answer for a rendered launch (cached by its launch key)."""
        hit = self._by_key.get(spec.key)
        if hit is not None:
            return hit
        flags = list(spec.argv[len(self.engine.launcher) :])
        launch = launch_from_argv(self.scenario, self.version, flags)
        prediction = predict(self.scenario, launch, self.sim.workload_for(launch))
        failure = self._failure(prediction, launch)
        shot = Shot(
            key=spec.key,
            prediction=prediction,
            failure=failure,
            feasible=failure is None and not _violations(self.sim, prediction),
            tp=launch.tp_size,
            captured_bs=launch.captured_bs,
            graphs=launch.graphs,
        )
        self._by_key[spec.key] = shot
        return shot

    def measure(self, shot: Shot, rng: random.Random) -> float:
        """A noisy output throughput of a measured launch (one factor per launch, as the simulator)."""
        factor = max(-NOISE_CLIP, min(NOISE_CLIP, rng.gauss(0.0, self.noise))) if self.noise else 0.0
        return shot.throughput * (1.0 + factor)

    # -- failures as the log classifier reads them ------------------------------------------------

    def _failure(self, p: Prediction, launch: Launch) -> Failure | None:
        o = p.outcome
        if o is SimOutcome.OK:
            return None
        if o is SimOutcome.NAN:
            return Failure(outcome=Outcome.NAN, phase=Phase.GATE, message=f"NaN in the output: {p.detail}")
        if o is SimOutcome.GARBAGE:
            return Failure(outcome=Outcome.GARBAGE, phase=Phase.GATE, message="garbage tokens at the gate")
        key = (o, launch.prefill_backend, launch.decode_backend, launch.graphs, launch.mem_fraction_static)
        if key not in self._logs:
            phase = Phase.BENCH if o is SimOutcome.OOM_UNDER_LOAD else Phase.LAUNCH
            lines = self._log_lines(p, launch)
            v = classify_failure(lines, exit_code=-9, phase=phase)
            self._logs[key] = Failure(
                outcome=v.outcome, phase=phase, message=v.message, excerpt=v.excerpt, exit_code=-9,
                backend=v.backend, backend_role=v.role, stage=v.stage,
            )  # fmt: skip
        return self._logs[key]

    def _log_lines(self, p: Prediction, launch: Launch) -> list[str]:
        """The lines the simulator's child and parent print for a failure (tuner/sim/child.py order)."""
        s = self.scenario
        plan = memory.plan_memory(
            s, tp_size=launch.tp_size, fraction=launch.mem_fraction_static,
            kv_dtype=launch.kv_cache_dtype, captured_bs=launch.captured_bs,
        )  # fmt: skip
        total = plan.total_mib
        lines = [logfmt.server_args_line(launch.args)]
        if s.model.sparse_attention:
            lines.append(logfmt.backends_line(launch))
        lines.append(logfmt.load_begin(total - plan.overhead_mib / 2))
        o = p.outcome
        if o is SimOutcome.OOM_AT_LOAD:
            error = logfmt.scheduler_exception("load", logfmt.cuda_oom(plan.weights_mib, total, 0.0))
            return [*lines, *error.splitlines(), SIGQUIT]
        avail = total - plan.overhead_mib / 2 - plan.weights_mib
        lines.append(logfmt.load_end(1.0, s.model.architecture, s.model.dtype, avail, plan.weights_mib))
        if o is SimOutcome.NOT_ENOUGH_MEMORY:
            error = logfmt.not_enough_memory(launch.version, launch.mem_fraction_static)
            return [*lines, *logfmt.scheduler_exception("kv", error).splitlines(), SIGQUIT]
        avail = total - plan.weights_mib - plan.kv_mib - plan.overhead_mib
        lines.append(
            logfmt.kv_allocated(
                launch, plan.kv_tokens, plan.kv_mib, memory.torch_kv_dtype(launch.kv_cache_dtype)
            )
        )
        lines.append(logfmt.pool_end(avail))
        if o is SimOutcome.UNSUPPORTED:
            where = "capture" if launch.graphs else "forward"
            error = launch.unsupported_error or "RuntimeError: Unsupported architecture"
            return [*lines, *logfmt.scheduler_exception(where, error).splitlines(), SIGQUIT]
        if o is SimOutcome.OOM_AT_CAPTURE:
            lines.append(logfmt.capture_begin(launch, avail))
            tried = memory.capture_workspace_mib(s, plan.max_captured_bs)
            cause = logfmt.cuda_oom(tried, total, 0.0)[len("torch.OutOfMemoryError: ") :]
            error = logfmt.capture_failed(launch.version, cause)
            return [*lines, *logfmt.scheduler_exception("capture", error).splitlines(), SIGQUIT]
        if o is SimOutcome.OOM_UNDER_LOAD:
            lines.append(logfmt.uvicorn_running("127.0.0.1", 30000))
            error = logfmt.cuda_oom(1024.0, total, 0.0)
            lines += logfmt.scheduler_exception("forward", error).splitlines()
            return [*lines, logfmt.subprocess_crashed("scheduler_0", 4242, 1)]
        lines += logfmt.scheduler_exception("device", f"RuntimeError: {p.detail}").splitlines()
        return [*lines, SIGQUIT]

    # -- results shaped like run_trial's ----------------------------------------------------------

    def trial_result(self, config: TrialConfig, spec: LaunchSpec, rng: random.Random) -> TrialResult:
        """What run_trial would return for this launch, with a noisy measurement when it measures."""
        shot = self.shot_of(spec)
        now = datetime.now(timezone.utc)
        p = shot.prediction
        failure = shot.failure
        server = None
        up = failure is None or failure.phase in (Phase.GATE, Phase.BENCH)
        if up:
            server = ServerFacts(
                base_url=spec.base_url, startup_s=1.0, kv_tokens=p.kv_tokens, kv_tokens_log=p.kv_tokens,
                captured_bs=shot.captured_bs or None, cuda_graph=shot.graphs,
            )  # fmt: skip
        free = p.min_free_mib if p.min_free_mib is not None else p.free_mib
        bench = self._bench(shot, self.measure(shot, rng)) if failure is None else None
        return TrialResult(
            config=config,
            launch=spec,
            outcome=failure.outcome if failure else Outcome.OK,
            failure=failure,
            sglang_version=self.version,
            server=server,
            bench=bench,
            min_free_mib=(int(free),) * shot.tp if up and free is not None else None,
            started_at=now,
            finished_at=now,
            timings=StageTimings(launch_s=1.0, bench_s=float(p.duration_s or 0.0)),
            gpus=self.gpus[: shot.tp],
            load=None if failure is not None else ServerLoad(
                peak_running=p.max_batch, retractions=p.retractions,
                peak_kv_usage=round(p.peak_kv_used / p.kv_tokens, 2) if p.kv_tokens else None,
            ),
        )

    def _bench(self, shot: Shot, output_tok_s: float) -> BenchResult:
        w = self.sim.workload
        p = shot.prediction
        scale = output_tok_s / shot.throughput if shot.throughput else 1.0
        duration = (p.duration_s or 1.0) / scale
        out_tokens = w.num_prompts * w.output_len
        in_tokens = w.num_prompts * w.input_len

        def stats(ms: float | None, p99: float | None = None) -> LatencyStats:
            v = (ms or 0.0) / scale
            top = (p99 if p99 is not None else ms or 0.0) / scale
            return LatencyStats(
                mean_ms=v, median_ms=v, p90_ms=top, p95_ms=top, p99_ms=top, count=w.num_prompts
            )

        metrics = BenchMetrics(
            duration_s=duration, completed=w.num_prompts, failed=0, errors=(),
            total_input_tokens=in_tokens, total_input_tokens_server=in_tokens, total_output_tokens=out_tokens,
            request_throughput=w.num_prompts / duration, input_throughput=in_tokens / duration,
            input_throughput_server=in_tokens / duration, output_throughput=output_tok_s,
            total_throughput=(in_tokens + out_tokens) / duration,
            ttft=stats(p.ttft_p50_ms, p.ttft_p99_ms), tpot=stats(p.tpot_p50_ms), itl=stats(p.tpot_p50_ms),
            e2e=stats(p.e2e_p99_ms),
            max_itl_ms=(p.tpot_p50_ms or 0.0) / scale, queue=LatencyStats(), concurrency=float(w.concurrency),
            max_output_tokens_per_s=output_tok_s, max_concurrent_requests=w.concurrency,
            steady_output_throughput=output_tok_s, steady_window_s=duration, tokens_per_content_event=1.0,
            zero_gap_fraction=0.0, output_tokens_source="usage",
        )  # fmt: skip
        point = LoadPointResult(
            point=LoadPoint(concurrency=w.concurrency, num_prompts=w.num_prompts),
            metrics=metrics,
            records=(),
            warmup_requests=0,
            flushed=True,
        )
        return BenchResult(points=(point,), client_cpu_share=0.01, loop_lag_p99_ms=0.1, duration_s=duration)

    # -- what failures prove ---------------------------------------------------------------------

    def evidence(self, trial: int, config: TrialConfig, shot: Shot) -> Evidence:
        """What a launch proves, as the study records it (tuner.study.learn.evidence_of)."""
        f = shot.failure
        return Evidence(
            trial=trial,
            knobs=knobs_of(config),
            outcome=f.outcome if f else Outcome.OK,
            stage=f.stage if f else None,
            message=f.message if f else "",
            backend=f.backend if f else None,
            backend_role=f.backend_role if f else None,
            kv_tokens=shot.prediction.kv_tokens if (f is None or f.phase is not Phase.LAUNCH) else None,
            min_free_mib=int(shot.prediction.min_free_mib)
            if f is None and shot.prediction.min_free_mib
            else None,
        )

    def failure_causes(self) -> tuple[int, int]:
        """(distinct rules the space's failures prove, rules needed to cover every failing point).

        The second is a greedy set cover of the failing points by the rules their failures prove:
        the failures a search that learns each cause once must see at least (about) that many.
        """
        candidates, cover, unexplained = self.failure_cover()
        return candidates, len(cover) + unexplained

    def failure_cover(self) -> tuple[int, list[Rule], int]:
        """(distinct rules the space's failures prove, the greedy cover's rules in the order picked,
        failing points no rule covers)."""
        failing = [(i, p) for i, (p, s) in enumerate(zip(self.points, self.shots, strict=True)) if s.failure]
        knobs = {i: knobs_of(self.config(p)) for i, p in failing}
        candidates: dict[tuple[object, ...], Rule] = {}
        for i, p in failing:
            for rule in rules_from(self.evidence(i, self.config(p), self.shots[i])):
                candidates.setdefault(_scope(rule), rule)
        covered = [(rule, {i for i, k in knobs.items() if rule.covers(k)}) for rule in candidates.values()]
        left = set(knobs)
        cover: list[Rule] = []
        while left:
            best, hits = max(covered, key=lambda c: len(c[1] & left), default=(None, set()))
            hit = hits & left
            if best is None or not hit:
                return len(candidates), cover, len(left)  # failures no rule explains: each its own cause
            left -= hit
            cover.append(best)
        return len(candidates), cover, 0


def _scope(r: Rule) -> tuple[object, ...]:
    where = (r.fraction, r.graph_key, r.graph_max_bs, r.others)
    return (r.kind, r.role, r.backend, r.pair, r.graphs, *where)


def hypervolume(points: list[tuple[float, float]]) -> float:
    """Area dominated by `points` (both maximised) above the reference point (0, 0)."""
    area, covered_y = 0.0, 0.0
    for x, y in sorted(points, key=lambda p: (-p[0], -p[1])):
        if y > covered_y:
            area += x * (y - covered_y)
            covered_y = y
    return area


GENERATOR = "v6"  # the generator's version: its landscapes are cached apart from earlier ones
WORLD_FILES = {
    "glm5-nvfp4-sm120": "glm5-nvfp4-sm120-sim.yaml",
    "dsv32-fp8-h200": "dsv32-fp8-h200-sim.yaml",
    "glm5-nvfp4-b200-tp4": "glm5-nvfp4-b200-tp4-sim.yaml",
    "tiny-fast": "tiny-fast-sim.yaml",
}


# every source that renders a launch or answers it
_ORACLE_CODE = (
    "tuner/sim", "tuner/sglang", "tuner/space", "tuner/knobs", "tuner/config.py", "tuner/session.py",
    "tuner/engine.py",
)  # fmt: skip


def _shot_cache(path: Path, scenario: object) -> Path:
    """Where a world's oracle answers are kept between runs: keyed by the space file, the scenario and
    every source file that renders a launch or answers it (a change to any of them builds afresh)."""
    digest = hashlib.sha256(path.read_bytes() + repr(scenario).encode())
    for part in _ORACLE_CODE:
        root = ROOT / part
        for f in sorted(root.rglob("*.py")) if root.is_dir() else [root]:
            digest.update(f.read_bytes())
    digest.update(Path(__file__).read_bytes())
    return Path(tempfile.gettempdir()) / "tuner-world-shots" / f"{digest.hexdigest()[:24]}.pkl"


def world(name: str) -> World:
    """A shipped sim space by name, or a generated landscape as `gen-SEED` (written once to a temp folder)."""
    if name.startswith("gen-"):
        return World(generated_space(int(name[4:])))
    return World(ROOT / "search_spaces" / WORLD_FILES[name])


def generated_space(seed: int) -> Path:
    """The space file of generated landscape `seed` (tuner.sim.generate), cached under the temp folder."""
    folder = Path(tempfile.gettempdir()) / f"tuner-generated-{GENERATOR}" / str(seed)
    space = folder / "space.yaml"
    if not space.exists():
        found, _ = generate(seed)
        write(found, folder)
    return space
