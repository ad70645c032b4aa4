"""Finalists: the last launches of the budget re-measure the best front candidates.

One noisy measurement must not decide the best configuration. When only `count × repeats`
launches of the budget are left, the `count` best feasible trials (the Pareto front first, each
ranked by its distance to the utopia point) are launched `repeats` more times; the repeats are
store rows linked to the original (`confirm_of`), and the front, `status` and `export --best`
use the median over all measurements of a configuration.

Repeats go only where they can change the answer. A candidate measured more than `margin` below the
incumbent on the first objective is not contested (a run-to-run noise of a few percent cannot close
that gap), and a "fraction twin" of a better candidate (the same configuration at another memory
fraction, which sets KV capacity, not speed, where the run is not KV-bound) is not a second
finalist. With fewer than two contested candidates nothing is re-measured; the reserve is what the
picks need, decided as late as the budget allows, and what they do not need goes on exploring.

A repeat is also weighed against exploring (`Outlook`, the structured sampler's last ask): the
repeats' knowledge gradient -- how much one more measurement of each pick raises the expected true
value of the configuration picked, given the measurement noise and the picks' gaps -- against the
expected improvement of as many exploring launches. Early in a short budget the search has
seldom reached the best region and an exploring launch is worth more than guarding a 1% misranking;
late in a long one the open candidates promise little and the repeats win. The decision is taken
again at every launch of the reserve's window, so a reserve not claimed now may be claimed smaller.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from optuna.trial import FrozenTrial, TrialState

from tuner.front import ranked
from tuner.search.told import concluded
from tuner.study.learn import launched

log = logging.getLogger(__name__)

STATE_ATTR = "finalists"  # study user attr: {trial number: repeats claimed}
WEIGH_EXPLORING = True  # the repeats' knowledge gradient against the sampler's outlook (False: always repeat)


@dataclass(frozen=True, kw_only=True, slots=True)
class FinalistJob:
    """One repeat launch of a finalist."""

    trial: FrozenTrial
    repeat: int  # 1-based


def pick_finalists(
    trials: Sequence[FrozenTrial],
    directions: Sequence[str],
    count: int,
    *,
    twin_params: Collection[str] = (),
    margin: float | None = None,
) -> list[int]:
    """The `count` best feasible launched trials: Pareto-front members first, then by utopia distance.

    `twin_params`: params (the memory fraction) a trial may differ in from a better pick and still be
    its twin, not a finalist of its own. `margin`: only trials whose first objective is within this
    share of the best one are contested; fewer than two contested trials: none is a finalist.
    """
    by_number = {
        t.number: t
        for t in trials
        if t.state is TrialState.COMPLETE
        and t.user_attrs.get("feasible")
        and launched(t.user_attrs)
        and t.values is not None
    }
    order = ranked({n: t.values for n, t in by_number.items()}, directions)
    if margin is not None and order:
        firsts = [by_number[n].values[0] for n in order]
        sign = 1.0 if directions[0] == "maximize" else -1.0
        best = max(firsts, key=lambda v: sign * v)
        order = [n for n in order if sign * (best - by_number[n].values[0]) <= margin * abs(best)]
    picks: list[int] = []
    seen: set[tuple[tuple[str, str], ...]] = set()
    for n in order:
        key = tuple(sorted((k, repr(v)) for k, v in by_number[n].params.items() if k not in twin_params))
        if twin_params and key in seen:
            continue
        seen.add(key)
        picks.append(n)
    return picks[:count] if margin is None or len(picks) >= 2 else []


@dataclass(frozen=True, kw_only=True, slots=True)
class Outlook:
    """What the search expects of one more exploring launch (the sampler's latest ask)."""

    gain: float  # the best open candidate's expected improvement, as a share of the incumbent
    noise: float  # the objective's measurement noise sd in log units (a relative sd)


def repeat_gain(
    firsts: Sequence[float], direction: str, *, repeated: int, repeats: int, noise: float
) -> float:
    """The knowledge gradient of re-measuring the first `repeated` picks `repeats` times each: the
    expected rise, as a share, of the true first objective of the configuration picked afterwards.

    `firsts`: each pick's one measurement of the first objective. Per pick j beside the measured best
    a, the log difference's posterior sd falls from noise·sqrt(2) to noise·sqrt(1/n_a + 1/n_j); the
    change of its mean has sd s = the square root of the variances' difference, and the gain of
    reordering is s·(phi(d/s) - (d/s)·Phi(-d/s)) for the measured gap d (summed over the pairs).
    """
    if noise <= 0 or len(firsts) < 2 or any(v <= 0 for v in firsts):
        return 0.0
    logs = [math.log(v) if direction == "maximize" else -math.log(v) for v in firsts]
    best = max(range(len(logs)), key=logs.__getitem__)
    more = [repeats if i < repeated else 0 for i in range(len(logs))]
    total = 0.0
    for j, log_j in enumerate(logs):
        if j == best:
            continue
        after = 1.0 / (1 + more[best]) + 1.0 / (1 + more[j])
        s = noise * math.sqrt(max(2.0 - after, 0.0))
        if s <= 0:
            continue
        z = (logs[best] - log_j) / s
        total += s * (math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi) - z * 0.5 * math.erfc(z / math.sqrt(2)))
    return total


def reserve_state(
    trials: Sequence[FrozenTrial],
    directions: Sequence[str],
    *,
    count: int,
    repeats: int,
    left: int,
    twin_params: Collection[str] = (),
    margin: float | None = None,
    outlook: Outlook | None = None,
) -> dict[str, int] | None:
    """The finalists' state to claim now, with `left` launches of the budget left (none running),
    or None while the budget still has room to explore before the picks' repeats, or while (with
    an `outlook`) exploring those launches is worth more than the repeats' knowledge gradient."""
    if count <= 0 or repeats <= 0:
        return None
    picks = pick_finalists(trials, directions, count, twin_params=twin_params, margin=margin)
    if not picks or left > len(picks) * repeats:
        return None
    chosen = picks[: max(1, left // repeats)]
    if outlook is not None and WEIGH_EXPLORING:
        by_number = {t.number: t for t in trials}
        firsts = [float((by_number[n].values or [0.0])[0]) for n in picks]
        kg = repeat_gain(firsts, directions[0], repeated=len(chosen), repeats=repeats, noise=outlook.noise)
        explore = outlook.gain * len(chosen) * repeats
        if kg < explore:
            log.info(
                "finalists not re-measured yet (%d launches left): the repeats would gain %.2f%% of the "
                "pick, exploring %.2f%%", left, 100 * kg, 100 * explore,
            )  # fmt: skip
            return None
    return {str(n): 0 for n in chosen}


def next_job(
    trials: Sequence[FrozenTrial], state: Mapping[str, int], repeats: int
) -> tuple[FinalistJob, dict[str, int]] | None:
    """The next repeat to launch and the state after claiming it, or None when all are claimed."""
    by_number = {t.number: t for t in trials}
    for key, claimed in sorted(state.items(), key=lambda kv: int(kv[0])):
        if claimed < repeats and int(key) in by_number:
            return FinalistJob(trial=by_number[int(key)], repeat=claimed + 1), {**state, key: claimed + 1}
    return None


def affordable(count: int, repeats: int, budget: int) -> int:
    """Finalists the budget affords: their repeats take at most a quarter of it."""
    if repeats <= 0:
        return 0
    return max(0, min(count, budget // (4 * repeats)))


def claimed(state: Mapping[str, int]) -> int:
    """Finalist launches claimed so far."""
    return sum(state.values())


def launch_counts(trials: Sequence[FrozenTrial], state: Mapping[str, int]) -> tuple[int, int]:
    """Launches finished and running as the budget counts them: trials that launched a server (not
    pruned, forbidden or reused, whichever trial they reuse) plus the finalists' repeats claimed."""
    ran = [t for t in trials if (concluded(t) or t.state is TrialState.RUNNING) and launched(t.user_attrs)]
    done = sum(1 for t in ran if concluded(t))
    return done + claimed(state), len(ran) - done
