"""One search, launch by launch: what the tuner launched on one landscape and seed, against the truth.

    python benchmarks/search_trace.py gen-10 [--seed 1] [--budget 16] [--top 5] [--tweak MODULE.NAME=VALUE]

Prints the landscape's best configurations (the oracle's truth), then every launch of the tuner's
study (the real StudyRunner, answered by the oracle as in benchmarks/search_efficiency.py): its
configuration, how it ended, its true throughput as % of the best and the noisy measurement.
A diagnostic for tuning on the training landscapes: it shows which winner was never launched and
what the launches went to instead.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from search_efficiency import tweak  # noqa: E402
from search_strategies import run_tuner  # noqa: E402
from search_world import Shot, World, world  # noqa: E402

from tuner.config import TrialConfig  # noqa: E402
from tuner.search import acquire, sampler, strategy  # noqa: E402
from tuner.search.candidates import params_key  # noqa: E402
from tuner.space.sampling import joined_params  # noqa: E402

WATCH: dict[str, list[int]] = {}  # "rows": the candidate rows of the true best configurations


def watched_decide(*args: object, **kwargs: object) -> strategy.Choice | None:
    """strategy.decide, printing the chosen row's scores beside the best configurations' scores."""
    got: dict[str, np.ndarray] = {}
    real_scores = acquire.log_scores

    def spy(mu: np.ndarray, sd: np.ndarray, log_p: np.ndarray, **kw: object) -> np.ndarray:
        out = real_scores(mu, sd, log_p, **kw)  # type: ignore[arg-type]
        got.update(mu=mu, sd=sd, log_p=log_p, acq=out)
        return out

    strategy.log_scores = spy  # type: ignore[assignment]
    try:
        choice = _real_decide(*args, **kwargs)  # type: ignore[arg-type]
    finally:
        strategy.log_scores = real_scores
    allowed = np.asarray(args[3], dtype=bool)
    rows = list(np.flatnonzero(allowed))
    if choice is None or not got:
        return choice
    pick = choice.index
    order = np.argsort(-got["acq"])

    def line(tag: str, row: int) -> str:
        if row not in rows:
            return f"      {tag:<7} row {row}: not open"
        j = rows.index(row)
        rank = int(np.flatnonzero(order == j)[0])
        return (f"      {tag:<7} mu {got['mu'][j]:+.3f} sd {got['sd'][j]:.3f} logP {got['log_p'][j]:+.2f} "
                f"acq {got['acq'][j]:+.2f} rank {rank}")  # fmt: skip

    print(line("chosen", pick))
    for row in WATCH.get("rows", [])[:2]:
        print(line("best", row))
    return choice


_real_decide = strategy.decide


def describe(config: TrialConfig) -> str:
    """A configuration in one short line."""
    g = config.cuda_graph
    graphs = "graphs=default"
    if g is not None:
        graphs = f"graphs<={g.effective_max_bs}" if g.enabled else "eager"
    flags = " ".join(f"{k.removesuffix('-size').split('-')[-1]}={v}" for k, v in config.flags)
    pair = f"{config.sparse_prefill_backend}/{config.sparse_decode_backend}"
    return f"f={config.mem_fraction_static} {graphs} {pair} {flags}".strip()


def ended(shot: Shot, w: World) -> str:
    if shot.failure is not None:
        return shot.failure.outcome.value
    return f"{100 * shot.throughput / w.best:5.1f}%" + ("" if shot.feasible else " (infeasible)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("scenario")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--budget", type=int, default=16)
    parser.add_argument("--top", type=int, default=5, help="the best configurations to show")
    parser.add_argument(
        "--tweak", action="append", default=[], metavar="MODULE.NAME=VALUE",
        help="set a constant of tuner.search.MODULE (as search_efficiency.py --tweak)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    tweak(args.tweak)
    w = world(args.scenario)
    ranked = sorted((s for s in zip(w.points, w.shots, strict=True) if s[1].feasible),
                    key=lambda s: -s[1].throughput)  # fmt: skip
    print(f"{w.name}: {len(w.points)} points, best {w.best:,.1f} tok/s")
    for point, shot in ranked[: args.top]:
        print(f"  best {100 * shot.throughput / w.best:5.1f}%  {describe(w.config(point))}")
    found, _ = sampler.space_candidates(w.space)
    index = found.index()
    WATCH["rows"] = [index[params_key(joined_params(w.space, p))] for p, _ in ranked[: args.top]
                     if params_key(joined_params(w.space, p)) in index]  # fmt: skip
    sampler.decide = watched_decide  # type: ignore[assignment]
    run = run_tuner(w, args.seed, args.budget)
    for i, step in enumerate(run.steps, 1):
        measured = "" if step.measured is None else f"  measured {step.measured:,.1f}"
        tag = " (finalist)" if step.repeat else ""
        print(f"{i:>3} {ended(step.shot, w):<18} {describe(step.config)}{measured}{tag}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
