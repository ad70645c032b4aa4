"""How well the structured search's models predict, ask by ask, against the landscapes' truth.

    python benchmarks/search_calibration.py record FILE [--generated train|test] [--count N] [--seeds 3]
    python benchmarks/search_calibration.py score FILE [--tweak MODULE.NAME=VALUE ...]

`record` runs the tuner (the real StudyRunner, answered by the oracle as in search_efficiency.py) on
generated landscapes and keeps every ask's inputs to `strategy.choose` with the truth of every
candidate. `score` replays those asks through the models (with any --tweak applied) and prints, per
family, the mean over runs of:

  zrms     root mean square of z = (log true throughput - mean) / sd over the open candidates that
           measure (1 for a calibrated model; above 1: overconfident)
  cover    share of them inside mean +- 1.96 sd (0.95 calibrated)
  ld       mean Gaussian log density of their truth (higher is better: a proper scoring rule)
  top_z    mean z of the open candidates within 10% of the best (how far the winners are underrated)
  top5     true throughput of the model's five best means, as a share of the best
  feas_ll  log loss of P(feasible) against the truth (base: of the launches' own feasible share)
  p_hit    chance the next launch is within 2% of the best (the acquisition's draw at TEMPERATURE)

A replay scores the models on the default's trajectories (off-policy): it separates a change of the
models from the luck of one search path in seconds, but says nothing of the paths a change would
take; search_efficiency.py judges those.
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import pickle
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import numpy as np  # noqa: E402
from search_efficiency import tweak  # noqa: E402
from search_strategies import run_tuner  # noqa: E402
from search_world import world  # noqa: E402

from tuner.search import acquire, feasible, sampler, strategy  # noqa: E402
from tuner.search.candidates import params_key  # noqa: E402
from tuner.search.feasible import Mechanism, Outcome, log_p_feasible  # noqa: E402
from tuner.sim.generate import TEST_SEEDS, TRAIN_SEEDS  # noqa: E402
from tuner.sim.generate_families import FAMILIES, family_of  # noqa: E402
from tuner.space.sampling import joined_params  # noqa: E402

KEYS = ("zrms", "cover", "ld", "top_z", "top5", "feas_ll", "feas_base", "p_hit")


def record_run(job: tuple[str, int]) -> dict[str, Any]:
    """One tuner run's asks (choose's inputs) and the truth per candidate row."""
    name, seed = job
    w = world(name)
    found, features = sampler.space_candidates(w.space)
    index = found.index()
    n = len(found.keys)
    thr, feas, meas = np.zeros(n), np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    for point, shot in zip(w.points, w.shots, strict=True):
        i = index.get(params_key(joined_params(w.space, point)))
        if i is not None:
            thr[i], feas[i], meas[i] = shot.throughput, shot.feasible, shot.measured
    asks: list[dict[str, Any]] = []
    real = sampler.choose

    def spy(*args: Any, **kwargs: Any) -> int | None:
        asks.append({"seen": list(args[2]), "allowed": list(args[3]), "kw": dict(kwargs)})
        return real(*args, **kwargs)

    sampler.choose = spy  # type: ignore[assignment]
    try:
        run_tuner(w, seed, 16)
    finally:
        sampler.choose = real
    return {"name": name, "seed": seed, "best": w.best, "features": features, "blocks": found.blocks,
            "thr": thr, "feas": feas, "meas": meas, "asks": asks}  # fmt: skip


def score_run(job: tuple[dict[str, Any], Sequence[str]]) -> tuple[str, dict[str, float]]:
    """The figures of one recorded run, replayed with the tweaks."""
    run, tweaks = job
    tweak(tweaks)
    got: dict[str, Any] = {}
    real_scores, real_post = acquire.log_scores, strategy._posterior

    def scores_spy(mu: Any, sd: Any, log_p: Any, **kw: Any) -> Any:
        out = real_scores(mu, sd, log_p, **kw)
        got.update(acq=out, log_p=log_p)
        return out

    def post_spy(*args: Any, **kw: Any) -> Any:
        out = real_post(*args, **kw)
        got.update(mu=out[0], sd=out[1])
        return out

    strategy.log_scores, strategy._posterior = scores_spy, post_spy  # type: ignore[assignment]
    features, blocks = run["features"], run["blocks"]
    thr, feas, meas, best = run["thr"], run["feas"], run["meas"], run["best"]
    figures: dict[str, list[float]] = collections.defaultdict(list)
    try:
        for ask in run["asks"]:
            got.clear()
            priors = dict(ask["kw"].get("priors") or {})  # the sampler's, recorded: off as a tweak says
            if not feasible.SUPPORT_PRIOR:
                priors.pop(Mechanism.SUPPORT, None)
            fits = ask["kw"].get("memory_fits") if feasible.MEMORY_PLANE else None
            ask = {**ask, "kw": {**ask["kw"], "priors": priors, "memory_fits": fits}}
            strategy.choose(features, blocks, ask["seen"], ask["allowed"], **ask["kw"])
            if "acq" not in got:
                continue
            rows = np.flatnonzero(np.asarray(ask["allowed"]))
            t, f = thr[rows], feas[rows]
            _feasibility(figures, features, blocks, ask, rows, f)
            ok = meas[rows] & (t > 0)
            if sum(1 for s in ask["seen"] if s.log_first is not None) >= 3 and ok.any():
                mu, sd = got["mu"][ok], got["sd"][ok]
                z = (np.log(t[ok]) - mu) / sd
                figures["zrms"].append(float(np.sqrt(np.mean(z * z))))
                figures["cover"].append(float(np.mean(np.abs(z) < 1.96)))
                figures["ld"].append(float(np.mean(-0.5 * z * z - np.log(sd) - 0.5 * np.log(2 * np.pi))))
                top = t[ok] >= 0.9 * best
                if top.any():
                    figures["top_z"].append(float(np.mean(z[top])))
                figures["top5"].append(float(np.mean(t[ok][np.argsort(-mu)[:5]]) / best))
            temperature = strategy.TEMPERATURE or 0.15
            weight = np.exp((got["acq"] - np.max(got["acq"])) / temperature)
            figures["p_hit"].append(float(np.sum(weight * (f & (t >= 0.98 * best))) / np.sum(weight)))
    finally:
        strategy.log_scores, strategy._posterior = real_scores, real_post  # type: ignore[assignment]
    return run["name"], {k: float(np.mean(v)) for k, v in figures.items()}


def _feasibility(
    figures: dict[str, list[float]], features: Any, blocks: Any, ask: dict[str, Any], rows: Any, truth: Any
) -> None:
    """Log loss of P(feasible) over the open candidates, and of the launches' own feasible share."""
    seen = ask["seen"]
    if len(seen) < 2:
        return
    outcomes = [
        Outcome(index=s.index, failed=s.mechanism, margins=s.margins, explained=s.explained) for s in seen
    ]
    priors = ask["kw"].get("priors")
    log_p = log_p_feasible(
        features, blocks, outcomes, features.take(list(rows)), explained_label=strategy.EXPLAINED_LABEL,
        prior_strength=strategy.PRIOR_LATER if any(s.feasible for s in seen) else 1.0,
        priors=priors, test_rows=rows, memory_fits=ask["kw"].get("memory_fits"),
    )  # fmt: skip
    p = np.clip(np.exp(log_p), 1e-4, 1 - 1e-4)
    base = min(0.95, max(0.05, float(np.mean([s.feasible for s in seen]))))
    figures["feas_ll"].append(float(np.mean(-(truth * np.log(p) + (~truth) * np.log(1 - p)))))
    figures["feas_base"].append(float(np.mean(-(truth * np.log(base) + (~truth) * np.log(1 - base)))))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("action", choices=("record", "score"))
    parser.add_argument("file", type=Path)
    parser.add_argument("--generated", choices=("train", "test"), default="train")
    parser.add_argument("--count", type=int, default=0, help="the first N landscapes of the split (0: all)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--tweak", action="append", default=[], metavar="MODULE.NAME=VALUE")
    args = parser.parse_args(argv)
    pool = multiprocessing.get_context("fork").Pool(min(args.jobs, 2))
    if args.action == "record":
        tweak(args.tweak)
        split = TRAIN_SEEDS if args.generated == "train" else TEST_SEEDS
        names = [f"gen-{n}" for n in split[: args.count or None]]
        for name in names:  # built once here; forked workers inherit them
            world(name)
        runs = pool.map(record_run, [(n, s) for n in names for s in range(1, args.seeds + 1)], chunksize=1)
        args.file.write_bytes(pickle.dumps(runs))
        print(f"recorded {sum(len(r['asks']) for r in runs)} asks of {len(runs)} runs into {args.file}")
        return 0
    runs = pickle.loads(args.file.read_bytes())
    scored = pool.map(score_run, [(r, args.tweak) for r in runs], chunksize=1)
    by_family: dict[str, list[dict[str, float]]] = collections.defaultdict(list)
    for name, figures in scored:
        by_family[family_of(int(name[4:]))].append(figures)
        by_family["all"].append(figures)
    print(f"{' '.join(args.tweak) or 'default'}: {len(scored)} runs")
    print(f"  {'family':<13}" + "".join(f"{k:>10}" for k in KEYS))
    for family in ("all", *FAMILIES):
        rows = by_family.get(family, [])
        if rows:
            cells = [
                np.mean([r[k] for r in rows if k in r]) if any(k in r for r in rows) else np.nan for k in KEYS
            ]
            print(f"  {family:<13}" + "".join(f"{c:>10.3f}" for c in cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
