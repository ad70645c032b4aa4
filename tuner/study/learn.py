"""The study's memory of what its launches proved: evidence kept on Optuna trials, the policy built
from it, and sampler seeds that never replay a stream.

Everything a rule needs is written as user attributes when a trial is told (outcome, stage,
blamed backend, proving line, KV tokens, lowest free VRAM), so the rules are derived again from
the study itself on every ask: by any worker, after any resume, and from another study for a
warm start.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from tuner.config import Outcome, TrialResult, Verdict
from tuner.errors import ConfigError
from tuner.search.evidence import Evidence, knobs_of
from tuner.search.policy import Policy, build_policy
from tuner.space.loader import SearchSpace, config_from_params

PRUNED = "pruned"  # user attr: the trial was told infeasible without a launch
NOT_LAUNCHED = ("pruned", "dedup_of", "forbidden", "duplicate_running")


def told_without_launch(attrs: Mapping[str, Any]) -> bool:
    """The ask was told without a launch (pruned, forbidden, reused). Present-and-set, not truthy:
    `dedup_of` names the reused trial, and trial 0 is falsy."""
    return any(k in attrs and attrs[k] is not None and attrs[k] is not False for k in NOT_LAUNCHED)


def evidence_attrs(result: TrialResult, verdict: Verdict) -> dict[str, Any]:
    """The user attributes that keep what a launched trial proved."""
    failure = result.failure
    gate = result.gate
    sequential_ok = None
    if gate is not None and failure is not None:
        rounds = {(a.round.value, a.verdict.value) for a in gate.answers}
        sequential_ok = not any(r == "sequential" and v != "passed" for r, v in rounds)
    return {
        "stage": failure.stage if failure else None,
        "failure_backend": failure.backend if failure else None,
        "failure_backend_role": failure.backend_role if failure else None,
        "gate_sequential_ok": sequential_ok,
        "min_free_vram_mib": verdict.metrics.get("min_free_vram_mib"),
    }


def evidence_of(space: SearchSpace, trial: FrozenTrial) -> Evidence | None:
    """What a finished, launched trial proved; None for trials that launched nothing or say nothing."""
    attrs = trial.user_attrs
    if trial.state is not TrialState.COMPLETE or told_without_launch(attrs):
        return None
    try:
        outcome = Outcome(attrs.get("failure") or attrs.get("outcome") or "ok")
        config = config_from_params(space, trial.params)
    except (ValueError, ConfigError):
        return None
    return Evidence(
        trial=trial.number,
        knobs=knobs_of(config),
        outcome=outcome,
        stage=_str(attrs.get("stage")),
        message=str(attrs.get("failure_message") or ""),
        backend=_str(attrs.get("failure_backend")),
        backend_role=_str(attrs.get("failure_backend_role")),
        gate_sequential_ok=attrs.get("gate_sequential_ok"),
        kv_tokens=_int(attrs.get("kv_tokens")),
        min_free_mib=_int(attrs.get("min_free_vram_mib")),
    )


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: object) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def study_evidence(space: SearchSpace, trials: Iterable[FrozenTrial]) -> list[Evidence]:
    """The evidence of every launched trial of a study."""
    return [ev for t in trials if (ev := evidence_of(space, t)) is not None]


def policy_for(space: SearchSpace, evidence: Iterable[Evidence]) -> Policy:
    """The study's policy: its rules and memory model, with the space's free-VRAM constraint."""
    floor = None
    for slo in space.constraints:
        if slo.metric == "min_free_vram_mib" and slo.op in (">=", ">"):
            floor = slo.bound if floor is None else max(floor, slo.bound)
    return build_policy(list(evidence), prune=space.search.prune, min_free_mib=floor)


def sampler_seed(base: int | None, worker: str, asked: int) -> int:
    """A seed no other worker or resumed run draws: the space's seed, this worker and the ask count.

    With a fixed space seed, every run of the same worker asking its n-th trial gets the same seed
    (reproducible), while two workers, or a run resumed after n trials, draw different streams.
    """
    text = f"{base if base is not None else 'unseeded'}|{worker}|{asked}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big")


def measured_before(trials: Iterable[FrozenTrial], chash: str, *, exclude: int) -> FrozenTrial | None:
    """A launched, finished trial of the same launch key (its result is reused instead of relaunching)."""
    for t in trials:
        attrs = t.user_attrs
        if (
            t.state is TrialState.COMPLETE
            and t.number != exclude
            and attrs.get("cfg_hash") == chash
            and not told_without_launch(attrs)
        ):
            return t
    return None
