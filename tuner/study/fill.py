"""Untried configurations: what the study launches when the sampler keeps suggesting what it measured.

On a finely stepped space a sampler can re-suggest measured configurations for hundreds of asks in
a row while most of the space is untried. After a run of asks that launched nothing, the study
enqueues one configuration that was never asked, that no `forbidden:` entry matches and that no
failure rule or memory prediction rules out, drawn uniformly with the study's seeded RNG. When
there is none, `left()` counts why, so the run stops with an honest reason.

A space whose every param is discrete (a float or int range with a step counts) and that has at
most `ENUMERATE_LIMIT` configurations is enumerated: the draw is uniform over the untried ones,
and "nothing left" is exact. A larger or continuous space is drawn from at random (`DRAWS` tries).
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.config import TrialConfig
from tuner.errors import ConfigError
from tuner.search.told import concluded
from tuner.space.loader import SearchSpace, config_from_params
from tuner.space.params import Param, ParamKind, clean_float, condition_holds
from tuner.space.sampling import forbidden_reason, sampler_params
from tuner.study.learn import sampler_seed

log = logging.getLogger(__name__)

FILL_IN_AFTER = 8  # asks in a row that launched nothing before an untried configuration is enqueued
ENUMERATE_LIMIT = 50_000  # configurations; a larger space is drawn from at random
DRAWS = 512

Launchable = Callable[[TrialConfig], bool]  # False: a failure rule or the memory model rules it out


@dataclass(frozen=True, kw_only=True, slots=True)
class Left:
    """What is left of a space: counted when it could be enumerated, else estimated from draws."""

    total: int | None  # configurations in the space; None: too many to count, or continuous
    untried: int  # never asked and launchable (found in the draws when total is None)
    asked: int  # asked before (launched, reused, or told pruned)
    ruled_out: int  # covered by a failure rule or the memory model
    forbidden: int  # matched by a `forbidden:` entry

    def describe(self) -> str:
        """One line for the stop message."""
        if self.total is None:
            return (
                f"no untried configuration outside the rules in {DRAWS} random draws "
                f"({self.asked} asked before, {self.ruled_out} ruled out, {self.forbidden} forbidden)"
            )
        return (
            f"of the space's {self.total} configurations, {self.asked} were asked before, {self.ruled_out} "
            f"are ruled out by failure rules or the memory model, {self.forbidden} are forbidden and "
            f"{self.untried} are left"
        )


def _values(p: Param) -> list[Any] | None:
    """Every value of a param, or None for a continuous range."""
    if p.is_discrete:
        return list(p.choices)
    assert p.low is not None and p.high is not None
    if p.kind is ParamKind.INT:
        step = int(p.step or 1)
        return list(range(int(p.low), int(p.high) + 1, step))
    if p.step is None:
        return None
    n = int(math.floor((p.high - p.low) / p.step + 1e-9))
    return [clean_float(p, p.low + i * p.step) for i in range(n + 1)]


def _size(space: SearchSpace) -> int | None:
    """An upper bound on the configurations of the space (conditions ignored); None when continuous."""
    size = 1
    for p in space.params:
        values = _values(p)
        if values is None:
            return None
        size *= len(values) + (1 if p.when else 0)  # a conditional param may also be absent
        if size > ENUMERATE_LIMIT:
            return size
    return size


def _enumerate(space: SearchSpace) -> Iterator[dict[str, object]]:
    """Every params dict of a discrete space, conditions honoured."""

    def walk(i: int, values: dict[str, Any]) -> Iterator[dict[str, object]]:
        if i == len(space.params):
            yield dict(values)
            return
        p = space.params[i]
        if not condition_holds(p, values):
            yield from walk(i + 1, values)
            return
        for v in _values(p) or []:
            values[p.name] = v
            yield from walk(i + 1, values)
            del values[p.name]

    yield from walk(0, {})


def _draw(space: SearchSpace, rng: random.Random) -> dict[str, object]:
    """One params dict drawn uniformly per param, conditions honoured."""
    values: dict[str, Any] = {}
    for p in space.params:
        if not condition_holds(p, values):
            continue
        choices = _values(p)
        if choices is not None:
            values[p.name] = rng.choice(choices)
            continue
        assert p.low is not None and p.high is not None
        if p.log:
            values[p.name] = clean_float(p, math.exp(rng.uniform(math.log(p.low), math.log(p.high))))
        else:
            values[p.name] = clean_float(p, rng.uniform(p.low, p.high))
    return values


def _judge(
    space: SearchSpace, params: Mapping[str, object], asked: set[TrialConfig], launchable: Launchable
) -> str:
    """untried, asked, ruled_out, forbidden, or invalid."""
    if forbidden_reason(space, params) is not None:
        return "forbidden"
    try:
        config = config_from_params(space, params)
    except ConfigError:
        return "invalid"
    if config in asked:
        return "asked"
    return "untried" if launchable(config) else "ruled_out"


def asked_configs(space: SearchSpace, trials: Iterable[FrozenTrial]) -> list[TrialConfig]:
    """The configurations of the trials asked so far (finished or running), in this space's terms."""
    out = []
    for t in trials:
        if concluded(t) or t.state is TrialState.RUNNING:
            try:
                out.append(config_from_params(space, t.params))
            except ConfigError:
                continue  # a trial of another version of the space: it says nothing here
    return out


def untried(
    space: SearchSpace, asked: Iterable[TrialConfig], launchable: Launchable, rng: random.Random
) -> tuple[dict[str, object] | None, Left]:
    """An untried, launchable configuration drawn uniformly (None when none is found), and what is left."""
    seen = set(asked)
    size = _size(space)
    counts = {"untried": 0, "asked": 0, "ruled_out": 0, "forbidden": 0, "invalid": 0}
    if size is not None and size <= ENUMERATE_LIMIT:
        fresh: list[dict[str, object]] = []
        for params in _enumerate(space):
            verdict = _judge(space, params, seen, launchable)
            counts[verdict] += 1
            if verdict == "untried":
                fresh.append(params)
        total = sum(counts.values()) - counts["invalid"]
        left = Left(total=total, **{k: v for k, v in counts.items() if k != "invalid"})
        return (rng.choice(fresh) if fresh else None), left
    found: dict[str, object] | None = None
    for _ in range(DRAWS):
        params = _draw(space, rng)
        verdict = _judge(space, params, seen, launchable)
        counts[verdict] += 1
        if verdict == "untried":
            found = params
            break
    return found, Left(total=None, **{k: v for k, v in counts.items() if k != "invalid"})


def exhausted(idle: int, left: Left) -> str:
    """Why the run stops short of its budget."""
    return (
        f"the last {idle} suggestions were all covered by failure rules, the memory model or earlier "
        f"launches, and {left.describe()}: the space has nothing new to launch (see `status` for the rules)"
    )


def enqueue_untried(
    study: optuna.Study,
    space: SearchSpace,
    launches: Callable[[TrialConfig], bool],
    host: str,
    *,
    marks: Mapping[str, object] | None = None,
) -> Left | None:
    """Enqueue an untried configuration that `launches` (no rule covers it); None when one was
    enqueued or an enqueued trial is still to be asked, else what is left of the space (the caller
    holds the workers' lock)."""
    trials = study.get_trials(deepcopy=False)
    if any(t.state is TrialState.WAITING for t in trials):
        return None  # an enqueued trial is still to be asked
    rng = random.Random(sampler_seed(space.sampler.seed, f"{host}|fill-in", len(trials)))
    params, left = untried(space, asked_configs(space, trials), launches, rng)
    if params is None:
        return left
    study.enqueue_trial(sampler_params(space, params), user_attrs={"fill_in": True, **(marks or {})})
    log.info("the sampler keeps suggesting measured configurations: an untried one is next (%s)",
             left.describe())  # fmt: skip
    return None
