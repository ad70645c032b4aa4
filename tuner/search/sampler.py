"""`sampler: {kind: structured}`: an Optuna sampler that scores every candidate of the space.

Optuna stays the study and its storage: this sampler reads the study's trials, chooses one
whole configuration per trial (tuner.search.strategy.choose) and answers each of the trial's
suggestions from it. The choice is made at TrialConfig level in the space's naming and mapped
to the sampler's parameter names by tuner.space.sampling (so a backend pair is only ever one of
the pair param's choices). Candidates already launched or pruned, those running on another
worker, and those the failure rules or the memory model prove bad (the policy the study passes
in) are never chosen, and a trial asked while earlier ones are still choosing takes the next best
candidate rather than the best; so workers asking at once pick different points, and a long study on a
fine grid keeps finding new launches until the grid is spent.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from tuner.search import feasible, strategy
from tuner.search.candidates import (
    Candidates,
    candidates,
    capped_batch,
    params_key,
    role_of,
    running_batch,
    running_caps,
)
from tuner.search.evidence import knobs_of
from tuner.search.feasible import Mechanism, mechanism_of
from tuner.search.plane import finite_number, fitted_plane, vram_floors
from tuner.search.policy import Policy
from tuner.search.strategy import Seen, decide
from tuner.search.surrogate import Features
from tuner.search.told import concluded, measured_values
from tuner.search.twins import Loaded, twins_of
from tuner.sglang.backend_support import built_for, sm_major
from tuner.space.goals import Slo
from tuner.space.sampling import joined_params, sampler_params

if TYPE_CHECKING:
    from tuner.space.loader import SearchSpace

PolicyOf = Callable[[Sequence[FrozenTrial]], Policy]
RELATIVE_MARGINS = False  # SLO margins as log ratios to their bounds (relative_margin)
# the decode batch a running-request cap allows, as a prior on throughput: log throughput's prior mean
# rises by RUNNING_PRIOR x log(min(cap, clients) / clients) (0: a flat prior; 1: tokens per step grow
# with the batch, each step as long)
RUNNING_PRIOR = 0.0
# first objectives that grow with the decode batch (per-user throughput and latencies do not)
THROUGHPUTS = ("output_throughput", "total_throughput", "request_throughput", "output_throughput_per_gpu")
# trial system attr: {"gain": the best open candidate's expected gain as a share of the incumbent, "noise":
# the objective model's noise sd, log units} at the ask (tuner.study.finalists weighs a repeat against it)
OUTLOOK_ATTR = "tuner:outlook"
NOT_LAUNCHED = ("pruned", "forbidden", "duplicate_running")  # user attrs of trials that launched nothing
_CACHE: dict[int, tuple[Any, Candidates, Features]] = {}  # id(space) -> (space, candidates, features)


def space_candidates(space: SearchSpace) -> tuple[Candidates, Features]:
    """The space's candidates and features, enumerated once per space object."""
    hit = _CACHE.get(id(space))
    if hit is not None and hit[0] is space:
        return hit[1], hit[2]
    found = candidates(space, seed=space.sampler.seed or 0)
    features = Features(
        cat=np.asarray(found.cat, dtype=np.int64).reshape(len(found.keys), -1),
        num=np.asarray(found.num, dtype=np.float64).reshape(len(found.keys), -1),
    )
    if len(_CACHE) > 8:
        _CACHE.clear()
    _CACHE[id(space)] = (space, found, features)
    return found, features


class StructuredSampler(optuna.samplers.BaseSampler):
    """Chooses whole configurations from a surrogate of the knobs; see the module docstring."""

    def __init__(
        self,
        space: SearchSpace,
        *,
        seed: int | None,
        policy_of: PolicyOf | None = None,
        budget: int | None = None,
    ) -> None:
        self._space = space
        self._seed = seed
        self._policy_of = policy_of
        self._budget = budget if budget is not None else space.budget.n_trials
        self._plans: dict[int, dict[str, object]] = {}
        self._fallback = optuna.samplers.RandomSampler(seed=seed)

    def infer_relative_search_space(
        self, study: optuna.Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return {}

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        return {}

    def sample_independent(
        self, study: optuna.Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        plan = self._plans.get(trial.number)
        if plan is None:
            plan = self._plan(study, trial)
            self._plans[trial.number] = plan
        if param_name in plan:
            value = plan[param_name]
            try:
                if param_distribution._contains(param_distribution.to_internal_repr(value)):
                    return value
            except (TypeError, ValueError):
                pass
        return self._fallback.sample_independent(study, trial, param_name, param_distribution)

    def _plan(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, object]:
        """The whole configuration of `trial`, in the sampler's parameter names ({} when none is left)."""
        found, features = space_candidates(self._space)
        trials = study.get_trials(deepcopy=False)
        index = found.index()
        allowed = [True] * len(found.keys)
        seen: list[Seen] = []
        pending: list[int] = []
        directions = study.directions
        choosing = 0  # trials asked before this one, still choosing: they take the better candidates
        launches = 0
        for t in trials:
            if t.number == trial.number or not (concluded(t) or t.state is TrialState.RUNNING):
                continue  # a verdict's FAIL / PRUNED is read like a COMPLETE one (tuner.search.told)
            i = index.get(params_key(joined_params(self._space, t.params)))
            if i is None:
                choosing += t.state is TrialState.RUNNING and t.number < trial.number
                continue
            allowed[i] = False
            if t.state is TrialState.RUNNING:
                pending.append(i)
                launches += 1
                continue
            got = _seen(t, i, directions)
            if got is not None:
                seen.append(got)
                launches += 1
        second = capacity = twins = None
        if self._policy_of is not None:
            policy = self._policy_of(trials)
            explained = {r.evidence for r in policy.rules} if policy.prune else set()
            seen = [
                replace(s, explained=True) if not s.feasible and s.trial in explained else s for s in seen
            ]
            kv: list[float] = []
            predicted: list[float | None] = []  # KV tokens per candidate, launched ones too (KV_COVER)
            for i, config in enumerate(found.configs):
                if not allowed[i]:
                    kv.append(0.0)
                    if strategy.KV_COVER:
                        predicted.append(policy.memory.predict(knobs_of(config)).kv_tokens)
                    continue
                decision = policy.decide(config)
                allowed[i] = decision.launch
                kv.append(float(decision.prediction.kv_tokens or 0.0))
                predicted.append(decision.prediction.kv_tokens)
            if strategy.KV_COVER:
                capacity = _kv_cover(self._space, found, predicted)
            if strategy.TWINS:
                twins = _twins(self._space, found, trials, seen, kv)
            names = list(study.metric_names or [])
            maximised = len(directions) > 1 and directions[1] is StudyDirection.MAXIMIZE
            if maximised and names[1:2] == ["kv_tokens"] and any(kv):
                second = np.asarray(kv, dtype=np.float64)
        support = _support(found, trials)
        priors = {Mechanism.SUPPORT: support} if support is not None else {}
        # trials asked together share one draw and take its ranks in turn (`choosing` earlier ones first)
        seed = (self._seed or 0) * 1_000_003 + trial.number - choosing
        plane = fitted_plane(found, trials, seen, self._space)
        left = None if self._budget is None else max(1, self._budget - launches)
        pick = decide(
            features, found.blocks, seen, allowed, second=second, seed=seed, rank=choosing,
            left=left, budget=self._budget, pending=pending, capacity=capacity, priors=priors,
            memory_fits=None if plane is None else plane.p_above(0.0), slo_met=vram_floors(plane, trials),
            offset=_running_offset(self._space, found, study.metric_names, directions), twins=twins,
        )  # fmt: skip
        if pick is None:
            return {}
        if pick.gain is not None:  # what exploring is worth now: the finalists' reserve weighs it
            outlook = {"gain": pick.gain, "noise": pick.noise}
            study._storage.set_trial_system_attr(trial._trial_id, OUTLOOK_ATTR, outlook)
        return sampler_params(self._space, found.params[pick.index])


def _running_offset(
    space: SearchSpace,
    found: Candidates,
    names: Sequence[str] | None,
    directions: Sequence[StudyDirection],
) -> np.ndarray | None:
    """Per candidate, the physics prior of its log throughput from its running-request cap: a closed
    loop of C clients decodes min(cap, C) requests at a time, and a decode step costs about the same
    for a few more requests (the weights' read dominates), so throughput grows with the batch the cap
    allows. None: off, a first objective that is not a throughput, no cap knob or an open loop."""
    first = names[0] if names else ""
    if RUNNING_PRIOR <= 0 or first not in THROUGHPUTS or directions[0] is not StudyDirection.MAXIMIZE:
        return None
    caps = running_caps(space)
    clients = running_batch(space)
    if not caps or not clients:
        return None
    batches = np.asarray([capped_batch(params, float(clients), caps) for params in found.params])
    out: np.ndarray = RUNNING_PRIOR * np.log(batches / clients)
    return out


def _twins(
    space: SearchSpace,
    found: Candidates,
    trials: Sequence[FrozenTrial],
    seen: Sequence[Seen],
    kv_pool: Sequence[float],
) -> np.ndarray | None:
    """Per candidate, the row of a measured launch it is a twin of (tuner.search.twins; -1: none)."""
    clients = running_batch(space)
    if clients is None or any(o.capacity is not None for o in space.objectives):
        return None  # an open loop; or a capacity search, whose loads go past the benchmark's clients
    by_number = {t.number: t for t in trials}
    launches = []
    for s in seen:
        t = by_number.get(s.trial) if s.trial is not None else None
        if t is None or not s.feasible or s.log_first is None:
            continue
        a = {k: v for k, v in t.user_attrs.items() if finite_number(v)}
        launches.append(
            Loaded(
                index=s.index, peak_running=_whole(a.get("bench_peak_running")),
                peak_kv_usage=a.get("bench_peak_kv_usage"), retractions=_whole(a.get("bench_retractions")),
                kv_pool=_whole(a.get("kv_tokens")),
            )  # fmt: skip
        )
    roles = {p.name: role_of(p) for p in space.params}
    return twins_of(found.params, roles, clients, launches, [v or None for v in kv_pool])


def _whole(value: float | None) -> int | None:
    return None if value is None else int(value)


def _kv_cover(space: SearchSpace, found: Candidates, predicted: Sequence[float | None]) -> np.ndarray | None:
    """Per candidate, the share of the running batch's tokens its KV pool holds as the memory model
    predicts it (`predicted` KV tokens), min(1, KV tokens / (batch x (input + output))), the batch
    being the clients' capped by the candidate's running-request caps; -1 where the model cannot
    tell yet. None: the benchmark's batch is unknown (an open loop only)."""
    clients = running_batch(space)
    if clients is None:
        return None
    caps = running_caps(space)
    workload = space.bench.workload
    per_request = float(workload.input_len + workload.output_len)
    out = np.full(len(predicted), -1.0)
    for i, kv in enumerate(predicted):
        if kv is not None:
            demand = capped_batch(found.params[i], float(clients), caps) * per_request
            out[i] = min(1.0, max(0.0, kv) / demand)
    return out


def _support(found: Candidates, trials: Sequence[FrozenTrial]) -> np.ndarray | None:
    """The support mechanism's prior per candidate, from the kernels SGLang ships for the GPU the
    launches ran on (the latest that says); None when no launch told its GPU or no backend is known."""
    if not feasible.SUPPORT_PRIOR:
        return None
    major = None
    for t in trials:
        got = sm_major(t.user_attrs.get("compute_capability"))
        major = got if got is not None else major
    if major is None:
        return None
    built = []
    for config in found.configs:
        k = knobs_of(config)
        backends = [b for b in dict.fromkeys((k.prefill, k.decode)) if b is not None]
        built.append(tuple(built_for(b, major) for b in backends))
    if not any(f is not None for flags in built for f in flags):
        return None
    return feasible.support_prior(built)


def _better(value: float, direction: StudyDirection) -> float | None:
    """An objective value turned higher-is-better and positive (1 / v for a minimised one)."""
    if not math.isfinite(value) or value <= 0:
        return None
    return value if direction is StudyDirection.MAXIMIZE else 1.0 / value


def _seen(t: FrozenTrial, index: int, directions: Sequence[StudyDirection]) -> Seen | None:
    """What a finished trial says to the surrogates (None: it launched nothing of its own).

    Objectives are read as the study declares them (any metric, either direction): each is turned
    higher-is-better and positive, the first modelled in logs.
    """
    attrs = t.user_attrs
    if any(attrs.get(k) for k in NOT_LAUNCHED) or attrs.get("dedup_of") is not None:
        return None
    values = measured_values(t) or ()
    outcome = str(attrs.get("failure") or attrs.get("outcome") or "ok")
    failed = mechanism_of(outcome)
    if (
        failed is None
        and attrs.get("failure") is None
        and attrs.get("outcome") is None
        and not attrs.get("feasible")
    ):
        failed = Mechanism.OTHER  # no outcome recorded and not feasible: a failure of unknown kind
    measured = failed is None
    first = _better(values[0], directions[0]) if measured and values else None
    second = _better(values[1], directions[1]) if first is not None and len(values) > 1 else None
    margins = tuple(
        relative_margin(k.removeprefix("c_slo:"), float(v))
        for k, v in sorted(attrs.items()) if k.startswith("c_slo:") and finite_number(v)
    )  # fmt: skip
    if measured and not attrs.get("feasible") and not any(m > 0 for m in margins):
        failed = Mechanism.OTHER  # infeasible for a reason the margins do not show
    return Seen(
        index=index, log_first=None if first is None else math.log(first), second=second,
        feasible=bool(attrs.get("feasible")), trial=t.number, failed=failed,
        margins=margins if measured and margins else None, captured=outcome != "capture_failed",
    )  # fmt: skip


def relative_margin(name: str, margin: float) -> float:
    """An SLO's margin (the distance past its bound, <= 0 met) as the log of the measured value over the
    bound, oriented the same way: latencies and memory scale by knob effects (a larger batch multiplies
    the step time), so their logs are close to additive in the knobs, as the surrogate's kernel says.
    `name` is the SLO's ("tpot_p50_ms<=40"); the margin is kept as it is when either side is not > 0,
    and always unless RELATIVE_MARGINS (a measured option, off: docs/design.md)."""
    slo = Slo.from_name(name) if RELATIVE_MARGINS else None
    if slo is None:
        return margin
    upper = slo.op in ("<=", "<")
    value = slo.bound + margin if upper else slo.bound - margin
    if slo.bound <= 0 or value <= 0:
        return margin
    return math.log(value / slo.bound) if upper else math.log(slo.bound / value)
