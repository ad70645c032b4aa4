"""The study's memory of what its launches proved: evidence kept on Optuna trials, the policy built
from it, and sampler seeds that never replay a stream.

Everything a rule needs is written as user attributes when a trial is told (outcome, stage,
blamed backend, proving line, KV tokens, lowest free VRAM), so the rules are derived again from
the study itself on every ask: by any worker, after any resume, and from another study for a
warm start.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from optuna.trial import FrozenTrial

from tuner.config import Outcome, Verdict
from tuner.errors import ConfigError
from tuner.result import TrialResult
from tuner.search.evidence import Evidence, knobs_of
from tuner.search.policy import Policy, build_policy
from tuner.search.told import concluded
from tuner.space.loader import SearchSpace, config_from_params

PRUNED = "pruned"  # user attr: the trial was told infeasible without a launch
# user attr of the trial enqueued when the failure rules as inferred left nothing to launch: from then on
# the study's rules are no wider than their failures show (tuner.search.rules.derive_rules)
PROVEN_ONLY = "rules_proven_only"
NOT_LAUNCHED = ("pruned", "dedup_of", "forbidden", "duplicate_running")


def launched(attrs: Mapping[str, object]) -> bool:
    """True unless a marker says the trial launched nothing (told pruned, forbidden or reused).

    A marker counts when it is set to anything but None or False: `dedup_of` holds the number of
    the trial whose result was reused, and trial 0 is a reuse target like any other.
    """
    return not any(attrs.get(k) is not None and attrs.get(k) is not False for k in NOT_LAUNCHED)


def evidence_attrs(result: TrialResult, verdict: Verdict) -> dict[str, Any]:
    """The user attributes that keep what a launched trial proved."""
    failure = result.failure
    gate = result.gate
    sequential_ok = None
    if gate is not None and failure is not None:
        rounds = {(a.round.value, a.verdict.value) for a in gate.answers}
        sequential_ok = not any(r == "sequential" and v != "passed" for r, v in rounds)
    effective = result.effective.cuda_graph if result.effective is not None else None
    captured = result.server.captured_bs if result.server is not None else None
    load = result.load  # a launch that measured has one (tuner.trial)
    return {
        # what SGLang reports it ran, when that differs from the request: the rules learn from it
        "effective_key": result.effective_key,
        "effective_graphs": None if result.effective is None else (effective is None or effective.enabled),
        "effective_graph_max_bs": None if effective is None else effective.effective_max_bs,
        "stage": failure.stage if failure else None,
        "failure_backend": failure.backend if failure else None,
        "failure_backend_role": failure.backend_role if failure else None,
        "gate_sequential_ok": sequential_ok,
        "min_free_vram_mib": verdict.metrics.get("min_free_vram_mib"),
        # the GPU it ran on: which kernels SGLang ships for it (tuner.sglang.backend_support)
        "compute_capability": result.gpus[0].compute_capability if result.gpus else None,
        "gpu_total_mib": result.gpus[0].total_mib if result.gpus else None,
        # the largest decode batch its graphs captured, as the server reported (SGLang's own list's size)
        "captured_graph_max_bs": max(captured) if captured else None,
        # what bound the batch under the benchmark: the search reads which knobs could not matter
        "bench_peak_running": load.peak_running if load is not None else None,
        "bench_peak_kv_usage": load.peak_kv_usage if load is not None else None,
        "bench_retractions": load.retractions if load is not None else None,
    }


def evidence_of(space: SearchSpace, trial: FrozenTrial) -> Evidence | None:
    """What a finished, launched trial proved; None for trials that launched nothing or say nothing."""
    attrs = trial.user_attrs
    if not concluded(trial) or not launched(attrs):
        return None
    try:
        outcome = Outcome(attrs.get("failure") or attrs.get("outcome") or "ok")
        config = config_from_params(space, trial.params)
    except (ValueError, ConfigError):
        return None
    knobs = knobs_of(config)
    if isinstance(attrs.get("effective_graphs"), bool):  # learned as what ran, not as what was asked
        top = _int(attrs.get("effective_graph_max_bs"))
        knobs = replace(knobs, graphs=attrs["effective_graphs"], graph_max_bs=top)
    return Evidence(
        trial=trial.number,
        knobs=knobs,
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


def policy_for(space: SearchSpace, evidence: Iterable[Evidence], *, proven_only: bool = False) -> Policy:
    """The study's policy: its rules and memory model, with the space's free-VRAM constraint
    (`proven_only`: rules no wider than their failures show, once rules_proven_only says so)."""
    floor = None
    for slo in space.constraints:
        if slo.metric == "min_free_vram_mib" and slo.op in (">=", ">"):
            floor = slo.bound if floor is None else max(floor, slo.bound)
    return build_policy(list(evidence), prune=space.search.prune, min_free_mib=floor, proven_only=proven_only)


def rules_proven_only(trials: Iterable[FrozenTrial]) -> bool:
    """True once the study narrowed its rules to what their failures show (a trial carries the mark)."""
    return any(t.user_attrs.get(PROVEN_ONLY) for t in trials)


def study_policy(
    space: SearchSpace,
    trials: Sequence[FrozenTrial],
    *,
    warm: Iterable[Evidence] = (),
    proven_only: bool | None = None,
) -> Policy:
    """The policy of a study's trials (and a warm start's evidence), narrowed as the study's mark says
    unless `proven_only` is given."""
    narrow = rules_proven_only(trials) if proven_only is None else proven_only
    return policy_for(space, [*warm, *study_evidence(space, trials)], proven_only=narrow)


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
            concluded(t)
            and t.number != exclude
            and chash in (attrs.get("cfg_hash"), attrs.get("effective_key"))
            and launched(attrs)
        ):
            return t
    return None
