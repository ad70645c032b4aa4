"""Keep a drawn landscape only when it is a fair test: valid, with failures, a best that is not everywhere.

    generate(seed) -> (Draw, best line)    the first sub-seed of `seed` whose draw passes

Checks: the scenario passes the scenario validation (parse_scenario), and the oracle over every
point of the space (tuner.sim.landscape.evaluate) finds a feasible best, failing points, and
between 5% and 90% of the points feasible, at most a fifth of them within 2% of the best.

Before the checks, what needs the oracle's view is placed (`settle`): an slo-bound draw gets a TPOT
p50 limit below the TPOT of the fastest measured points (a quantile of the measured TPOTs) and a
free-VRAM floor that rules out the highest fractions (a quantile of the measured lowest free VRAM),
so the best sits on a constraint boundary; a draw with an infeasible baseline gets a failing
point (drawn from the seed) as its baseline.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from tuner.errors import TunerError
from tuner.sim import generate as generate_module
from tuner.sim.generate import Draw, draw, write
from tuner.sim.landscape import Scored, _violations, best, evaluate
from tuner.sim.scenario import parse_scenario
from tuner.sim.spacefile import read_space

ATTEMPTS = 60
NEAR_SHARE = 0.2  # at most this share of the feasible points within 2% of the best


class GenerateError(TunerError):
    """No draw of a seed passed the checks."""


TPOT_QUANTILE = (0.25, 0.6)  # where among the measured points' TPOT p50 the slo-bound limit falls
FREE_QUANTILE = (0.15, 0.4)  # ... and the free-VRAM floor among their lowest free VRAM


def _scored(found: Draw) -> list[Scored]:
    scenario = parse_scenario(found.scenario, f"generated seed {found.seed}")
    with tempfile.TemporaryDirectory() as tmp:
        _, space_file = write(found, Path(tmp))
        return evaluate(read_space(space_file), scenario)


def settle(found: Draw, scored: list[Scored]) -> tuple[Draw, list[Scored]]:
    """The draw with its SLOs and infeasible baseline placed from the oracle's verdicts, re-judged."""
    rng = random.Random(f"tuner-landscape-settle|{found.seed}|{found.attempt}")
    space: dict[str, Any] = dict(found.space)
    measured = [s for s in scored if s.prediction.feasible]
    if found.slo and measured:
        tpot = sorted(s.prediction.tpot_p50_ms or 0.0 for s in measured)
        free = sorted(s.prediction.min_free_mib or 0.0 for s in measured)
        limit = tpot[int(rng.uniform(*TPOT_QUANTILE) * (len(tpot) - 1))]
        floor = free[int(rng.uniform(*FREE_QUANTILE) * (len(free) - 1))]
        fastest = max(measured, key=lambda s: s.prediction.output_tok_s or 0.0).prediction
        if (fastest.tpot_p50_ms or 0.0) <= limit and (fastest.min_free_mib or 0.0) >= floor:
            limit = (fastest.tpot_p50_ms or 0.0) * rng.uniform(0.85, 0.97)  # the limit binds the fastest
        space["constraints"] = [f"tpot_p50_ms <= {limit:.2f}", f"min_free_vram_mib >= {max(256, int(floor))}"]
    if found.infeasible_baseline:
        failing = [s.point for s in scored if not s.prediction.feasible]
        if failing:
            space["baselines"] = [dict(rng.choice(failing))]
    if space == found.space:
        return found, scored
    settled = replace(found, space=space)
    with tempfile.TemporaryDirectory() as tmp:
        _, space_file = write(settled, Path(tmp))
        sim = read_space(space_file)
    rescored = []
    for s in scored:
        violated = tuple(_violations(sim, s.prediction)) if s.prediction.feasible else ()
        rescored.append(replace(s, feasible=s.prediction.feasible and not violated, violated=violated))
    return settled, rescored


def check(found: Draw, scored: list[Scored] | None = None) -> tuple[str | None, list[Scored]]:
    """Why the draw is not a fair landscape (None: it is), and the oracle's verdict on every point."""
    if scored is None:
        scored = _scored(found)
    feasible = sum(1 for s in scored if s.feasible)
    if feasible == 0 or best(scored) is None:
        return "no feasible point", scored
    if feasible == len(scored):
        return "no failing point", scored
    share = feasible / len(scored)
    if not 0.05 <= share <= 0.9:
        return f"{100 * share:.0f}% of the points feasible", scored
    if within_two_percent(scored) > max(3, NEAR_SHARE * feasible):
        return "the best is everywhere", scored
    return None, scored


def within_two_percent(scored: list[Scored]) -> int:
    """Feasible points within 2% of the best output throughput."""
    top = best(scored)
    if top is None:
        return 0
    target = 0.98 * (top.prediction.output_tok_s or 0.0)
    return sum(1 for s in scored if s.feasible and (s.prediction.output_tok_s or 0.0) >= target)


def _with_scores(found: Draw) -> tuple[Draw, list[Scored]]:
    return found, _scored(found)


def generate(seed: int) -> tuple[Draw, str]:
    """The landscape of `seed` (the first attempt that passes) and a line naming its true best."""
    why: str | None = ""
    for attempt in range(ATTEMPTS):
        found, scored = settle(*_with_scores(draw(seed, attempt)))
        why, scored = check(found, scored)
        if why is None:
            top = best(scored)
            assert top is not None
            feasible = sum(1 for s in scored if s.feasible)
            near = within_two_percent(scored)
            line = (
                f"{found.family}: {len(scored)} points, {feasible} feasible, {near} within 2% of the best: "
                f"{top.prediction.output_tok_s:,.1f} out tok/s at {top.point}"
            )
            return found, line
    raise GenerateError(f"generate: no draw of seed {seed} passed the checks in {ATTEMPTS} attempts ({why})")


def main(argv: list[str]) -> int:
    """`python -m tuner.sim generate --seed N [--out DIR]`."""
    parser = argparse.ArgumentParser(prog="python -m tuner.sim generate", description=generate_module.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument(
        "--out", type=Path, help="folder for scenario.yaml and space.yaml (default: generated-SEED)"
    )
    args = parser.parse_args(argv)
    try:
        found, best = generate(args.seed)
        scenario, space = write(found, args.out or Path(f"generated-{args.seed}"))
    except TunerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{found.summary}\n{best}\nwrote {scenario} and {space}")
    print(f"true best and front: python -m tuner.sim landscape --space {space}")
    return 0
