"""Search strategies over a `World` (benchmarks/search_world.py), each spending a budget of launches.

    tuner   the new default: the real StudyRunner (SQLite file, baselines, failure rules, memory model,
            per-ask seeds, finalists) with the structured sampler, `execute=` answered by the oracle
    release this release's default: the same StudyRunner with the TPE sampler
    scoot   SCOOT-style BO: the structured sampler's GP + EHVI + constraint model, no rules, no finalists
    tpe     plain TPE as the tuner used it before: the same sampler settings, the backend pair as
            one categorical, failures told as infeasible, no pruning, no finalists (baselines first)
    random  distinct points of the space drawn uniformly
    grid    the space's points in enumeration order (tuner.sim.spacefile)
    tier    a tier list: the first baseline, then one knob at a time from it (8 candidates); the
            rest of the budget repeats that from the best measured so far

Every strategy returns the launches it made, in order; a launch of a configuration measured
before (same launch key) is reused without a launch by tuner and tpe, as the tuner does.
"""

from __future__ import annotations

import logging
import random
import tempfile
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import optuna
from search_world import Shot, World

from tuner.config import Failure, LaunchSpec, TrialConfig
from tuner.result import TrialResult
from tuner.session import TrialContext, prepare_launch
from tuner.space.loader import ParamKind
from tuner.space.params import condition_holds
from tuner.study.events import Hooks
from tuner.study.runner import StudyRunner
from tuner.study.storage import make_sampler
from tuner.study.tell import not_launched

MAX_ASKS = 400  # tpe: suggestions in all (repeats of measured launches are reused, not launched)


@dataclass(frozen=True, kw_only=True, slots=True)
class Step:
    """One launch."""

    config: TrialConfig
    shot: Shot
    measured: float | None  # the noisy output throughput; None when the launch measured nothing
    repeat: bool = False  # a finalist's re-measurement


@dataclass(kw_only=True, slots=True)
class Run:
    """The launches of one strategy on one world and seed."""

    strategy: str
    steps: list[Step]
    asks: int = 0  # suggestions made (launched, reused or pruned)
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def _quiet() -> None:
    logging.getLogger("tuner").setLevel(logging.ERROR)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.simplefilter("ignore")


def _step(world: World, config: TrialConfig, rng: random.Random, *, repeat: bool = False) -> Step:
    shot = world.shot_of(world.spec(config))
    return Step(
        config=config, shot=shot, measured=world.measure(shot, rng) if shot.measured else None, repeat=repeat
    )


def noise_rng(world: World, seed: int, strategy: str) -> random.Random:
    return random.Random(f"{world.name}|{strategy}|{seed}")


# -- a: the tuner ---------------------------------------------------------------------------------


def run_tuner(
    world: World,
    seed: int,
    budget: int,
    *,
    finalists: bool = True,
    db_dir: Path | None = None,
    kind: str = "structured",
    label: str = "tuner",
    prune: bool = True,
    hooks: Hooks | None = None,
) -> Run:
    """The real StudyRunner on a temporary SQLite file; every launch answered by the oracle.

    `finalists=False` turns the finalists' re-measurements off (a diagnostic: all launches explore).
    """
    _quiet()
    rng = noise_rng(world, seed, "tuner")
    steps: list[Step] = []

    def execute(
        config: TrialConfig, ctx: TrialContext, *, label: str, prepared: LaunchSpec | Failure | None = None
    ) -> TrialResult:
        spec = prepared if prepared is not None else prepare_launch(config, ctx, label=label)
        if isinstance(spec, Failure):  # rejected flags: nothing launched
            return not_launched(config, world.version, spec.outcome, spec.message)
        result = world.trial_result(config, spec, rng)
        measured = result.bench.objective_metrics if result.bench is not None else None
        steps.append(
            Step(
                config=config,
                shot=world.shot_of(spec),
                measured=measured.output_throughput if measured is not None else None,
                repeat=label.startswith("finalist"),
            )
        )
        return result

    with tempfile.TemporaryDirectory(dir=db_dir) as tmp:
        space = replace(
            world.space,
            name=f"bench-{world.name}-{seed}",
            log_dir=Path(tmp),
            sampler=world.space.sampler.model_copy(update={"seed": seed, "kind": kind}),
        )
        if not finalists or not prune:
            search = world.space.search
            count = search.finalists.count if finalists else 0
            off = search.finalists.model_copy(update={"count": count})
            space = replace(space, search=search.model_copy(update={"finalists": off, "prune": prune}))
        runner = StudyRunner(
            space, db_url=f"sqlite:///{tmp}/study.db", n_trials=budget, execute=execute, hooks=hooks
        )
        summary = runner.run()
        trials = runner.study.get_trials(deepcopy=False)
        why = [str(t.user_attrs.get("rule")) for t in trials if t.user_attrs.get("pruned")]
        by = {"forbidden": why.count("forbidden"), "memory model": why.count("memory_model")}
        by["failure rules"] = len(why) - sum(by.values())
        reused = sum(1 for t in trials if t.user_attrs.get("dedup_of") is not None)
    return Run(
        strategy=label if finalists or not prune else f"{label}-nofin",
        steps=steps,
        asks=summary.ran,
        note=summary.exhausted or "",
        extra={"pruned": len(why), "pruned_by": by, "reused": reused},
    )


# -- b: plain TPE as before -----------------------------------------------------------------------


def _suggest_plain(world: World, trial: optuna.Trial) -> dict[str, object]:
    """Every active param, the backend pair as one categorical (the tuner's encoding before)."""
    values: dict[str, Any] = {}
    for p in world.space.params:
        if not condition_holds(p, values):
            continue
        if p.kind is ParamKind.FLOAT:
            assert p.low is not None and p.high is not None
            values[p.name] = trial.suggest_float(p.name, p.low, p.high, step=p.step, log=p.log)
        elif p.kind is ParamKind.INT:
            assert p.low is not None and p.high is not None
            values[p.name] = trial.suggest_int(
                p.name, int(p.low), int(p.high), step=int(p.step or 1), log=p.log
            )
        else:
            values[p.name] = trial.suggest_categorical(p.name, p.choices)
    return values


def run_tpe(world: World, seed: int, budget: int) -> Run:
    """An in-process Optuna loop with the tuner's former sampler (multivariate grouped TPE, seeded)."""
    _quiet()
    rng = noise_rng(world, seed, "tpe")
    space = replace(world.space, sampler=world.space.sampler.model_copy(update={"kind": "tpe", "seed": seed}))
    study = optuna.create_study(directions=["maximize", "maximize"], sampler=make_sampler(space, seed=seed))
    for baseline in world.space.baselines:
        study.enqueue_trial(dict(baseline), skip_if_exists=True)
    steps: list[Step] = []
    told: dict[str, tuple[list[float], float, float]] = {}
    asks = 0
    while len(steps) < budget and asks < MAX_ASKS:
        trial = study.ask()
        asks += 1
        config = world.config(_suggest_plain(world, trial))
        shot = world.shot_of(world.spec(config))
        if shot.key not in told:  # a launch measured before is reused, not launched again
            step = _step(world, config, rng)
            steps.append(step)
            told[shot.key] = _tell_values(step)
        values, failed, slo = told[shot.key]
        trial.set_constraint("failure", failed)  # as the tuner told failures (Optuna reads these)
        trial.set_constraint("slo", slo)
        study.tell(trial, values)
    return Run(strategy="tpe", steps=steps, asks=asks)


def _tell_values(step: Step) -> tuple[list[float], float, float]:
    """Objective values and constraints as the tuner judged a trial: pessimistic 0s for a failure."""
    if step.measured is None:
        return [0.0, 0.0], 1.0, 1.0
    return [step.measured, float(step.shot.kv_tokens)], 0.0, (0.0 if step.shot.feasible else 1.0)


# -- c, d: random and grid ------------------------------------------------------------------------


def run_random(world: World, seed: int, budget: int) -> Run:
    rng = noise_rng(world, seed, "random")
    points = random.Random(f"{world.name}|random-points|{seed}").sample(world.points, budget)
    return Run(strategy="random", steps=[_step(world, world.config(p), rng) for p in points], asks=budget)


def run_grid(world: World, seed: int, budget: int) -> Run:
    rng = noise_rng(world, seed, "grid")
    steps = [_step(world, world.config(p), rng) for p in world.points[:budget]]
    return Run(strategy="grid", steps=steps, asks=budget, extra={"full_grid_first": grid_first(world)})


def grid_first(world: World, within: float = 0.02) -> int:
    """Launches the grid needs to reach a point within `within` of the true best (noise-free)."""
    for i, shot in enumerate(world.shots):
        if shot.feasible and shot.throughput >= (1 - within) * world.best:
            return i + 1
    return len(world.shots) + 1


# -- e: a tier list -------------------------------------------------------------------------------


def _neighbours(world: World, anchor: Mapping[str, object], rng: random.Random) -> list[dict[str, object]]:
    """Every one-knob move from `anchor`, the knobs taken in turn (shuffled per seed)."""
    moves: list[list[dict[str, object]]] = []
    for param in world.sim.params:
        if param.name not in anchor:
            continue
        options = [v for v in param.values if v != anchor[param.name]]
        rng.shuffle(options)
        moves.append([{**anchor, param.name: v} for v in options])
    rng.shuffle(moves)
    out: list[dict[str, object]] = []
    while any(moves):
        for m in moves:
            if m:
                out.append(m.pop(0))
    return out


def run_tier(world: World, seed: int, budget: int, tier_size: int = 8) -> Run:
    """Baseline, then one knob at a time from it (`tier_size` candidates); again from the best so far."""
    rng = noise_rng(world, seed, "tier")
    order = random.Random(f"{world.name}|tier-order|{seed}")
    anchor: dict[str, object] = dict(world.space.baselines[0])
    steps: list[Step] = []
    seen: set[str] = set()
    scores: dict[str, tuple[float, dict[str, object]]] = {}

    def launch(params: dict[str, object]) -> None:
        config = world.config(params)
        step = _step(world, config, rng)
        seen.add(step.shot.key)
        steps.append(step)
        if step.measured is not None and step.shot.feasible:
            scores[step.shot.key] = (step.measured, params)

    launch(anchor)
    while len(steps) < budget:
        room = min(budget - len(steps), tier_size - (1 if len(steps) < tier_size else 0))
        fresh = [n for n in _neighbours(world, anchor, order) if world.shot(n).key not in seen][:room]
        if not fresh:
            break
        for params in fresh:
            launch(params)
        if scores:
            anchor = max(scores.values(), key=lambda s: s[0])[1]
    return Run(strategy="tier", steps=steps, asks=len(steps))


def run_tuner_without_finalists(world: World, seed: int, budget: int) -> Run:
    return run_tuner(world, seed, budget, finalists=False)


def run_release(world: World, seed: int, budget: int) -> Run:
    """This release's default: the same StudyRunner with the TPE sampler."""
    return run_tuner(world, seed, budget, kind="tpe", label="release")


def run_scoot(world: World, seed: int, budget: int) -> Run:
    """SCOOT-style BO: the structured sampler's GP, EHVI and hidden-constraint model, without failure
    rules, memory-model pruning or finalists (what a black-box BO with a constraint model can do)."""
    return run_tuner(world, seed, budget, finalists=False, label="scoot", prune=False)


STRATEGIES: dict[str, Callable[[World, int, int], Run]] = {
    "tuner": run_tuner,
    "release": run_release,
    "tpe": run_tpe,
    "random": run_random,
    "grid": run_grid,
    "tier": run_tier,
    "scoot": run_scoot,
}
DIAGNOSTICS: dict[str, Callable[[World, int, int], Run]] = {"tuner-nofin": run_tuner_without_finalists}
