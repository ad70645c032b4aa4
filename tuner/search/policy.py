"""Launch or not: a suggestion covered by a failure rule, or that the memory model says would miss
the free-VRAM constraint or leave no room for the KV cache, is told to the sampler as infeasible
without a launch."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tuner.config import Outcome, TrialConfig
from tuner.search.evidence import Evidence, knobs_of
from tuner.search.memory import MemoryModel, Prediction, fit_memory
from tuner.search.rules import Rule, covering, derive_rules

# A prediction prunes only when it misses by more than this (or twice the fit's worst residual).
FREE_MARGIN_MIB = 512.0
KV_MARGIN_TOKENS = 4096.0


@dataclass(frozen=True, kw_only=True, slots=True)
class Decision:
    """The policy's answer for one suggestion."""

    launch: bool
    reason: str  # why not (the rule and its evidence, or the prediction); "" to launch
    outcome: Outcome | None  # what a launch would end as, when pruned
    rule: Rule | None
    prediction: Prediction


@dataclass(frozen=True, kw_only=True, slots=True)
class Policy:
    """What the study knows: the standing failure rules and the memory model."""

    rules: tuple[Rule, ...]
    memory: MemoryModel
    prune: bool = True
    min_free_mib: float | None = None  # a `min_free_vram_mib >= X` constraint, if the space has one
    # only what launches proved prunes: the rules no wider than their failures show (tuner.search.rules), and
    # no prediction of the memory model
    proven_only: bool = False

    def decide(self, config: TrialConfig) -> Decision:
        """Launch, or prune with the rule or prediction that proves the launch would be wasted."""
        knobs = knobs_of(config)
        prediction = self.memory.predict(knobs)
        if self.prune:
            rule = covering(self.rules, knobs)
            if rule is not None:
                reason = rule.describe()
                return Decision(
                    launch=False, reason=reason, outcome=rule.outcome, rule=rule, prediction=prediction
                )
            # a prediction is the fit's extrapolation, not a launch's proof: proven_only leaves it out
            why = None if self.proven_only else self._predicted_miss(prediction)
            if why is not None:
                outcome, reason = why
                return Decision(
                    launch=False, reason=reason, outcome=outcome, rule=None, prediction=prediction
                )
        return Decision(launch=True, reason="", outcome=None, rule=None, prediction=prediction)

    def _predicted_miss(self, p: Prediction) -> tuple[Outcome, str] | None:
        n = self.memory.launches
        if p.kv_tokens is not None:
            margin = max(KV_MARGIN_TOKENS, 2 * (p.kv_error or 0.0))
            if p.kv_tokens + margin < 0:
                return Outcome.NOT_ENOUGH_MEMORY, (
                    f"predicted KV tokens {p.kv_tokens:,.0f}: no room for the KV cache "
                    f"(memory model of {n} launches)"
                )
        if (
            p.min_free_mib is not None
            and p.min_free_mib + max(FREE_MARGIN_MIB, 2 * (p.free_error_mib or 0.0)) < 0
        ):
            return Outcome.OOM, (
                f"predicted lowest free VRAM {p.min_free_mib:,.0f} MiB: out of memory "
                f"(memory model of {n} launches)"
            )
        if self.min_free_mib is not None and p.min_free_mib is not None:
            margin = max(FREE_MARGIN_MIB, 2 * (p.free_error_mib or 0.0))
            if p.min_free_mib + margin < self.min_free_mib:
                return Outcome.SLO_VIOLATION, (
                    f"predicted lowest free VRAM {p.min_free_mib:,.0f} MiB < {self.min_free_mib:,.0f} MiB "
                    f"(memory model of {n} launches)"
                )
        return None


def build_policy(
    evidence: Sequence[Evidence],
    *,
    prune: bool = True,
    min_free_mib: float | None = None,
    proven_only: bool = False,
) -> Policy:
    """The policy after these launches (`proven_only`: rules no wider than their failures show)."""
    rules = derive_rules(evidence, proven_only=proven_only)
    memory = fit_memory(evidence)
    return Policy(rules=rules, memory=memory, prune=prune, min_free_mib=min_free_mib, proven_only=proven_only)
