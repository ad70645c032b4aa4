"""How well each search strategy spends a small launch budget, in-process against the simulator's oracle.

For every shipped sim scenario with failures (tiny-fast, which has none, with --tiny) and every
seed, each strategy of benchmarks/search_strategies.py spends `--budget` launches; outcomes and
KV tokens come from the noise-free oracle (tuner.sim.oracle), measured throughputs carry the
scenario's run-to-run noise. No process is started and nothing goes over HTTP: the tuner runs as
the real StudyRunner on a temporary SQLite file, with `execute=` answered by the oracle.

Per scenario and strategy, median [min–max] over the seeds:
  to 2%      launches until the first launch of a feasible configuration whose true (noise-free)
             output throughput is within 2% of the true best feasible one (">N": never in budget)
  wasted     launches that measured nothing (crash, OOM, NaN, garbage, unsupported)
  bad        launches in a region already proven bad: covered (tuner.search.rules.covering) by a
             rule that an earlier failure of the same run proves (tuner.search.rules.rules_from); a
             note counts those whose covering rules a launch even earlier contradicts
  HV         hypervolume of the feasible launches' true (output tok/s, KV tokens), reference (0, 0),
             divided by that of the oracle's true front
  pick       true throughput of the configuration the strategy would report (highest median of its
             measurements), as % of the true best
  <=10       share of seeds within 2% by launch 10
and per scenario "failure causes": the rules needed to cover every failing point of the space
(greedy set cover over the rules its failures prove), for the target wasted <= causes + 1.
With --long-budget 32 every run is repeated at that budget (HV@32, to 2% and pick at 32).

Per family of generated landscapes (tuner.sim.generate_families; the shipped scenarios are one
family of their own), per strategy: the median over the family's landscapes of each landscape's
median over seeds (to 2%, wasted, bad, HV, pick), the share of all runs within 2% by launch 10,
and the worst run's pick.

    python benchmarks/search_efficiency.py [--seeds 10] [--budget 16] [--long-budget 32] [--tiny]
        [--jobs 2] [--scenario NAME ...] [--strategy NAME ...] [--generated train|test|none]
        [--gen-count N] [--family NAME ...]
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import multiprocessing
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import optuna

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from search_strategies import DIAGNOSTICS, STRATEGIES, Run, _quiet, grid_first  # noqa: E402
from search_world import World, hypervolume, world  # noqa: E402

from tuner.search.evidence import Evidence, knobs_of  # noqa: E402
from tuner.search.rules import Rule, contradicts, covering, rules_from  # noqa: E402
from tuner.sim.generate import TEST_SEEDS, TRAIN_SEEDS  # noqa: E402
from tuner.sim.generate_families import FAMILIES, family_of  # noqa: E402
from tuner.space.loader import suggest  # noqa: E402
from tuner.study.learn import policy_for, study_evidence  # noqa: E402
from tuner.study.storage import make_sampler  # noqa: E402

SCENARIOS = ("glm5-nvfp4-sm120", "dsv32-fp8-h200", "glm5-nvfp4-b200-tp4")
WITHIN = 0.02


@dataclass(frozen=True, kw_only=True, slots=True)
class Score:
    """The figures of one run."""

    scenario: str
    strategy: str
    seed: int
    to_best: int | None  # launches until the first within 2% of the true best; None: never
    wasted: int
    proven_bad: int
    bad_disproved: int  # of those, launches whose covering rules an even earlier launch contradicts
    hv: float
    pick: float  # % of the true best
    launches: int
    asks: int
    pruned: int
    pruned_by: tuple[tuple[str, int], ...]  # the tuner's pruned asks by reason
    reused: int  # the tuner's asks answered by an earlier measurement of the same launch
    note: str
    budget: int = 16
    first5: tuple[str, ...] = ()  # launch keys of the first five launches (how much seeds differ)


def score(w: World, run: Run, seed: int) -> Score:
    """The figures of a run's launches."""
    target = (1 - WITHIN) * w.best
    to_best = next(
        (i + 1 for i, s in enumerate(run.steps) if s.shot.feasible and s.shot.throughput >= target), None
    )
    rules: list[Rule] = []
    seen: list[Evidence] = []
    bad = disproved = 0
    for i, step in enumerate(run.steps):
        knobs = knobs_of(step.config)
        hits = [r for r in rules if r.covers(knobs)]
        if covering(hits, knobs) is not None:
            bad += 1
            disproved += all(any(contradicts(r, e) for e in seen) for r in hits)
        ev = w.evidence(i, step.config, step.shot)
        rules += rules_from(ev)
        seen.append(ev)
    feasible = {s.shot.key: s.shot for s in run.steps if s.shot.feasible}
    hv = hypervolume([(s.throughput, float(s.kv_tokens)) for s in feasible.values()]) / w.front_hv
    measured: dict[str, list[float]] = {}
    for s in run.steps:
        if s.shot.feasible and s.measured is not None:
            measured.setdefault(s.shot.key, []).append(s.measured)
    pick_key = max(measured, key=lambda k: statistics.median(measured[k]), default=None)
    pick = 100 * feasible[pick_key].throughput / w.best if pick_key is not None else 0.0
    return Score(
        scenario=w.name,
        strategy=run.strategy,
        seed=seed,
        to_best=to_best,
        wasted=sum(1 for s in run.steps if not s.shot.measured),
        proven_bad=bad,
        bad_disproved=disproved,
        hv=hv,
        pick=pick,
        launches=len(run.steps),
        asks=run.asks,
        pruned=int(run.extra.get("pruned", 0)),
        pruned_by=tuple(sorted(run.extra.get("pruned_by", {}).items())),
        reused=int(run.extra.get("reused", 0)),
        note=run.note,
        budget=len(run.steps),
        first5=tuple(st.shot.key for st in run.steps[:5]),
    )


_WORLDS: dict[str, World] = {}


def _world(name: str) -> World:
    if name not in _WORLDS:
        _WORLDS[name] = world(name)
    return _WORLDS[name]


VARIANTS: dict[str, list[tuple[str, str]]] = {}  # label -> [(module.NAME, value)]: the tuner, tweaked


def tweak(items: Sequence[str]) -> None:
    """Apply MODULE.NAME=VALUE items for the whole run (the --tweak option)."""
    _tweak([tuple(item.split("=", 1)) for item in items])  # type: ignore[misc]


def _tweak(settings: Sequence[tuple[str, str]]) -> list[tuple[object, str, object]]:
    """Set constants of tuner.search modules; returns what to restore."""
    undo = []
    for target, value in settings:
        module, name = target.rsplit(".", 1)
        mod = importlib.import_module(f"tuner.{module}" if "." in module else f"tuner.search.{module}")
        old = getattr(mod, name)
        undo.append((mod, name, old))
        setattr(mod, name, _value_like(old, value))
    return undo


def split_settings(text: str) -> list[str]:
    """A variant's settings split at the commas outside brackets: "a.X=1,b.Y=(0.1, 0.2)" -> 2 settings."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            out.append(text[start:i])
            start = i + 1
    out.append(text[start:])
    return [x for x in out if x]


def _value_like(old: object, text: str) -> object:
    """A --tweak value read as the constant's type: a bool from true/false (or 1/0), a tuple, set or dict from
    its Python literal, a number or string as written."""
    if isinstance(old, bool):
        if text.strip().lower() not in ("true", "false", "1", "0"):
            raise SystemExit(f"--tweak: {text!r} is not a bool (true or false)")
        return text.strip().lower() in ("true", "1")
    if isinstance(old, (tuple, list, dict, set, frozenset)):
        return type(old)(ast.literal_eval(text))
    return type(old)(text)


def run_one(job: tuple[str, str, int, int]) -> Score:
    """One strategy, scenario and seed (a pool task)."""
    scenario, strategy, seed, budget = job
    w = _world(scenario)
    if strategy in VARIANTS:
        undo = _tweak(VARIANTS[strategy])
        try:
            run = STRATEGIES["tuner"](w, seed, budget)
            run.strategy = strategy
            return replace(score(w, run, seed), scenario=scenario, budget=budget)
        finally:
            for mod, name, old in undo:
                setattr(mod, name, old)
    return replace(
        score(w, {**STRATEGIES, **DIAGNOSTICS}[strategy](w, seed, budget), seed),
        scenario=scenario,
        budget=budget,
    )


def family(name: str) -> str:
    """The family of a landscape: a generated one's (gen-SEED), or "shipped"."""
    return family_of(int(name[4:])) if name.startswith("gen-") else "shipped"


def _span(values: Sequence[float], fmt: str, budget: int | None = None) -> str:
    def show(v: float) -> str:
        return f">{budget}" if budget is not None and v > budget else format(v, fmt)

    return f"{show(statistics.median(values))} [{show(min(values))}–{show(max(values))}]"


def report(scores: Sequence[Score], budget: int, strategies: Sequence[str]) -> list[str]:
    """The table, scenario by scenario, and the targets for the tuner."""
    out: list[str] = []
    targets: list[str] = []
    for name in dict.fromkeys(s.scenario for s in scores):
        w = _world(name)
        rules, causes = w.failure_causes()
        feasible = sum(1 for s in w.shots if s.feasible)
        out += [
            "",
            f"{name} [{family(name)}]: {len(w.points)} points, {feasible} feasible; "
            f"true best {w.best:,.1f} out tok/s "
            f"(within 2%: >= {(1 - WITHIN) * w.best:,.1f}); noise {100 * w.noise:g}%; "
            f"distinct failure causes in the space: {causes} (rule cover; {rules} distinct rules)",
            f"  {'strategy':<11} {'to 2% (launches)':<18} {'wasted':<14} {'bad':<12} "
            f"{'HV@' + str(budget):<20} {'pick % of best':<22} <=10  asks (pruned)",
        ]
        for strategy in strategies:
            mine = [s for s in scores if s.scenario == name and s.strategy == strategy and s.budget == budget]
            if not mine:
                continue
            to_best = [float(s.to_best if s.to_best is not None else budget + 1) for s in mine]
            within10 = f"{sum(1 for t in to_best if t <= 10) / len(to_best):.2f}  "
            extra = ""
            if strategy == "grid":
                extra = f"   (whole grid: first within 2% at launch {grid_first(w)})"
            asks = _span([s.asks for s in mine], ".0f")
            pruned = f" ({_span([s.pruned for s in mine], '.0f')})" if strategy.startswith("tuner") else ""
            spans = [
                _span(to_best, ".0f", budget),
                _span([s.wasted for s in mine], ".0f"),
                _span([s.proven_bad for s in mine], ".0f"),
                _span([s.hv for s in mine], ".2f"),
                _span([s.pick for s in mine], ".1f"),
            ]
            cells = "".join(f"{c:<{width}} " for c, width in zip(spans, (18, 14, 12, 20, 22), strict=True))
            out.append(f"  {strategy:<11} {cells}{within10}{asks}{pruned}{extra}")
            notes = {s.note for s in mine if s.note}
            if strategy.startswith("tuner"):
                reasons = [dict(s.pruned_by) for s in mine]
                parts = [f"{k} {_span([r.get(k, 0) for r in reasons], '.0f')}" for k in sorted(reasons[0])]
                parts.append(f"reused measurement {_span([s.reused for s in mine], '.0f')}")
                notes.add("asks not launched: " + ", ".join(parts))
            disproved = sum(s.bad_disproved for s in mine)
            if disproved:
                total = sum(s.proven_bad for s in mine)
                notes.add(
                    f"{disproved} of {total} 'bad' launches are covered only by rules that a launch before "
                    "the failure contradicts (that region had measured fine)"
                )
            distinct = len({s.first5 for s in mine})
            notes.add(f"first 5 launches: {distinct} distinct sequences over {len(mine)} seeds")
            out += [f"              note: {n[:200]}" for n in sorted(notes)]
            if strategy == "tuner":
                targets.append(_targets(name, mine, to_best, budget, causes))
    if targets:
        out += [
            "",
            "targets for the tuner (0 proven-bad launches; median <= 10 to 2%; wasted <= causes + 1):",
            *targets,
        ]
    return out


def _targets(name: str, mine: Sequence[Score], to_best: Sequence[float], budget: int, causes: int) -> str:
    """The tuner's figures against the issue's targets, on one line."""
    bad = sum(s.proven_bad for s in mine)
    median_best = statistics.median(to_best)
    shown_best = f">{budget}" if median_best > budget else f"{median_best:g}"
    over = sum(1 for s in mine if s.wasted > causes + 1)
    return (
        f"  {name:<22} proven-bad launches {bad} ({'met' if bad == 0 else 'MISSED'}); "
        f"median to 2% {shown_best} ({'met' if median_best <= 10 else 'MISSED'}); "
        f"wasted median {statistics.median(s.wasted for s in mine):g}, max {max(s.wasted for s in mine)} "
        f"vs causes + 1 = {causes + 1} ({'met' if not over else f'MISSED in {over} seeds'})"
    )


def summary(
    scores: Sequence[Score], budget: int, strategies: Sequence[str], long_budget: int = 0
) -> list[str]:
    """Per family and strategy: medians over landscapes of the per-landscape medians over seeds, the
    share of runs within 2% by launch 10 and the worst run's pick; HV and pick at the long budget too."""
    names = list(dict.fromkeys(s.scenario for s in scores))
    out = [
        "",
        "per family: median over landscapes of the per-landscape median over seeds; <=10: share of runs "
        "within 2% by launch 10; worst: the lowest pick of any run",
        f"  {'family':<13} {'n':<3} {'strategy':<9} {'to 2%':<6} {'<=10':<5} {'pick %':<7} {'worst':<6} "
        f"{'HV@' + str(budget):<6} {'wasted':<7} {'bad':<4} {'causes':<7}"
        + (
            f" {'to2%@' + str(long_budget):<8} {'pick@' + str(long_budget):<8} {'worst':<6} HV@{long_budget}"
            if long_budget
            else ""
        ),
    ]
    for fam in ("shipped", *FAMILIES, "all generated"):
        group = [n for n in names if (family(n) == fam) or (fam == "all generated" and n.startswith("gen-"))]
        if not group:
            continue
        causes = statistics.median(_world(n).failure_causes()[1] for n in group)
        for strategy in strategies:
            cells = _family_cells(scores, group, strategy, budget)
            if cells is None:
                continue
            line = f"  {fam:<13} {len(group):<3} {strategy:<9} {cells} {causes:<7g}"
            if long_budget:
                more = _family_cells(scores, group, strategy, long_budget, short=True)
                line += f" {more or ''}"
            out.append(line)
    return out


def _family_cells(
    scores: Sequence[Score], group: Sequence[str], strategy: str, budget: int, *, short: bool = False
) -> str | None:
    rows = []
    runs = []
    for name in group:
        mine = [s for s in scores if s.scenario == name and s.strategy == strategy and s.budget == budget]
        if not mine:
            continue
        runs += mine
        rows.append((
            statistics.median(float(s.to_best or budget + 1) for s in mine),
            statistics.median(s.wasted for s in mine),
            statistics.median(s.proven_bad for s in mine),
            statistics.median(s.hv for s in mine),
            statistics.median(s.pick for s in mine),
        ))  # fmt: skip
    if not rows:
        return None
    to = statistics.median(r[0] for r in rows)
    shown = f">{budget}" if to > budget else f"{to:g}"
    share = sum(1 for s in runs if s.to_best is not None and s.to_best <= 10) / len(runs)
    pick = statistics.median(r[4] for r in rows)
    worst = min(s.pick for s in runs)
    hv = statistics.median(r[3] for r in rows)
    if short:
        return f"{shown:<8} {pick:<8.1f} {worst:<6.1f} {hv:.2f}"
    wasted = statistics.median(r[1] for r in rows)
    bad = statistics.median(r[2] for r in rows)
    return f"{shown:<6} {share:<5.2f} {pick:<7.1f} {worst:<6.1f} {hv:<6.2f} {wasted:<7g} {bad:<4g}"


def paired(scores: Sequence[Score], base: str, others: Sequence[str], budget: int) -> list[str]:
    """Each strategy against `base` run by run (same landscape, same seed): the mean difference in
    launches to 2% (a miss counted as budget + 1) and in pick, with a 95% interval from resampling
    whole landscapes -- a finer test than the medians of medians, which move by whole launches."""
    by = {(s.strategy, s.scenario, s.seed): s for s in scores if s.budget == budget}
    lines = [
        f"\npaired against {base} at {budget} launches: mean difference per run "
        "[95% interval over landscapes]"
    ]
    lines.append(f"  {'family':<14}{'strategy':<12}{'to 2% (launches)':<26}{'pick (points of %)':<26}runs")
    rng = random.Random(0)
    for fam in [*sorted({family(s.scenario) for s in scores}), "all"]:
        for other in others:
            per: dict[str, list[tuple[float, float]]] = {}
            for (st, sc, seed), mine in by.items():
                ref = by.get((base, sc, seed))
                if st != other or ref is None or (fam != "all" and family(sc) != fam):
                    continue
                to = lambda x: x.to_best if x.to_best is not None else budget + 1  # noqa: E731
                per.setdefault(sc, []).append((to(mine) - to(ref), mine.pick - ref.pick))
            if not per:
                continue
            names = sorted(per)
            runs = [d for n in names for d in per[n]]

            def mean_of(rows: list[tuple[float, float]], i: int) -> float:
                return statistics.fmean(r[i] for r in rows)

            boots = []
            for _ in range(1000):
                pick = [d for n in rng.choices(names, k=len(names)) for d in per[n]]
                boots.append((mean_of(pick, 0), mean_of(pick, 1)))
            cells = []
            for i in (0, 1):
                lo, hi = sorted(b[i] for b in boots)[25], sorted(b[i] for b in boots)[974]
                cells.append(f"{mean_of(runs, i):+.2f} [{lo:+.2f}..{hi:+.2f}]")
            lines.append(f"  {fam:<14}{other:<12}{cells[0]:<26}{cells[1]:<26}{len(runs)}")
    return lines


def ask_times(name: str, kind: str, trials: int = 200) -> str:
    """Seconds per ask (the sampler's choice and the policy's screen) near trial 50 and trial `trials`.

    An in-memory Optuna study asks `trials` times as the study does (sampler seeded per ask, the
    policy built from the study's evidence); each suggestion is answered by the oracle and told.
    """
    _quiet()
    w = _world(name)
    space = replace(w.space, sampler=w.space.sampler.model_copy(update={"kind": kind, "seed": 1}))
    study = optuna.create_study(directions=["maximize", "maximize"])
    study.set_metric_names(["output_throughput", "kv_tokens"])
    rng = random.Random(1)
    took: list[float] = []
    for n in range(trials):
        t0 = time.perf_counter()
        study.sampler = make_sampler(space, seed=n)
        trial = study.ask()
        config, params = suggest(space, trial)
        policy_for(space, study_evidence(space, study.get_trials(deepcopy=False))).decide(config)
        took.append(time.perf_counter() - t0)
        shot = w.shot_of(w.spec(config))
        ok = shot.failure is None
        trial.set_user_attr("outcome", "ok" if ok else shot.failure.outcome.value)  # type: ignore[union-attr]
        trial.set_user_attr("failure", None if ok else shot.failure.outcome.value)  # type: ignore[union-attr]
        trial.set_user_attr("feasible", shot.feasible)
        trial.set_user_attr("kv_tokens", shot.kv_tokens)
        study.tell(trial, [w.measure(shot, rng) if ok else 0.0, float(shot.kv_tokens) if ok else 0.0])
    near = {n: took[max(0, n - 10) : n] for n in (50, trials)}
    shown = ", ".join(f"at {n}: {statistics.median(v):.3f} s" for n, v in near.items() if v)
    return f"  {name:<22} {kind:<11} seconds per ask (median of 10) {shown}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--budget", type=int, default=16)
    parser.add_argument("--long-budget", type=int, default=0, help="also every run at this budget (e.g. 32)")
    parser.add_argument(
        "--family", action="append", choices=FAMILIES, help="only generated landscapes of these"
    )
    parser.add_argument(
        "--jobs", type=int, default=2, help="worker processes (at most 2 on a shared machine)"
    )
    parser.add_argument("--tiny", action="store_true", help="also tiny-fast (no failures)")
    parser.add_argument(
        "--scenario",
        action="append",
        help=f"one of {', '.join(SCENARIOS)}, tiny-fast, or gen-SEED (generated)",
    )
    parser.add_argument(
        "--generated",
        choices=("train", "test", "none"),
        default="test",
        help="also the generated landscapes of this split (tuner.sim.generate; default: test)",
    )
    parser.add_argument("--gen-count", type=int, default=None, help="only the first N generated seeds")
    parser.add_argument("--first-seed", type=int, default=1, help="the seeds run are first-seed .. + seeds - 1")
    parser.add_argument("--dump", default=None, help="also every run's figures as JSON lines to this file")
    parser.add_argument("--quick", action="store_true", help="3 seeds, 5 generated landscapes")
    parser.add_argument("--no-shipped", action="store_true", help="generated landscapes only")
    parser.add_argument(
        "--ask-time",
        action="store_true",
        help="instead: the time per ask of a 200-launch study of each --scenario, structured and tpe",
    )
    parser.add_argument(
        "--strategy",
        action="append",
        choices=[*STRATEGIES, *DIAGNOSTICS],
        help="default: all but the diagnostic tuner-nofin (the tuner with finalists off)",
    )
    parser.add_argument(
        "--tweak",
        action="append",
        default=[],
        metavar="MODULE.NAME=VALUE",
        help="set a constant of tuner.search.MODULE (or tuner.PACKAGE.MODULE) for this run (training seeds)",
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="LABEL:MODULE.NAME=VALUE[,...]",
        help="an extra strategy: the tuner with these constants (compared in one run, worlds built once)",
    )
    args = parser.parse_args(argv)
    tweak(args.tweak)
    for item in args.variant:
        label, _, settings = item.partition(":")
        VARIANTS[label] = [tuple(x.split("=", 1)) for x in split_settings(settings)]  # type: ignore[misc]
    if args.quick:
        args.seeds, args.gen_count = min(args.seeds, 3), args.gen_count or 5
    scenarios = args.scenario or [*SCENARIOS, *(["tiny-fast"] if args.tiny else [])]
    if args.no_shipped:
        scenarios = []
    if args.ask_time:
        for name in scenarios:
            for kind in ("structured", "tpe"):
                print(ask_times(name, kind), flush=True)
        return 0
    if args.generated != "none":
        split = TRAIN_SEEDS if args.generated == "train" else TEST_SEEDS
        chosen = [n for n in split if not args.family or family_of(n) in args.family]
        scenarios = list(dict.fromkeys([*scenarios, *(f"gen-{n}" for n in chosen[: args.gen_count])]))
    strategies = [*(args.strategy or ([] if VARIANTS else list(STRATEGIES))), *VARIANTS]
    started = time.monotonic()
    for name in scenarios:  # built once here; forked workers inherit them
        _world(name)
        print(f"built {name}", file=sys.stderr, flush=True)
    budgets = [args.budget, *([args.long_budget] if args.long_budget else [])]
    jobs = [
        (sc, st, seed, b)
        for b in budgets
        for sc in scenarios
        for st in strategies
        for seed in range(args.first_seed, args.first_seed + args.seeds)
    ]
    jobs.sort(
        key=lambda j: not j[1].startswith("tuner")
    )  # the slow ones first, so both workers finish together
    if args.jobs > 1:
        with multiprocessing.get_context("fork").Pool(min(args.jobs, 2)) as pool:
            scores = pool.map(run_one, jobs, chunksize=1)
    else:
        scores = [run_one(j) for j in jobs]
    print(
        f"search efficiency: {len(scenarios)} scenarios x {len(strategies)} strategies x {args.seeds} seeds, "
        f"budget {args.budget} launches; median [min–max] over seeds"
    )
    print("\n".join(report(scores, args.budget, strategies)))
    print("\n".join(summary(scores, args.budget, strategies, args.long_budget)))
    if args.dump:
        with open(args.dump, "w", encoding="utf-8") as out:
            for sc in scores:
                out.write(json.dumps({**asdict(sc), "family": family(sc.scenario)}) + "\n")
    if len(strategies) > 1:
        for b in budgets:
            print("\n".join(paired(scores, strategies[0], strategies[1:], b)))
    print(f"\n{len(jobs)} runs in {time.monotonic() - started:.0f} s ({min(args.jobs, 2)} processes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
