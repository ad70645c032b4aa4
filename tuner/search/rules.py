"""Failures as rules: what one failed launch proves about the knobs, and which suggestions it covers.

| failure (outcome, stage)            | rule covers                                                   |
|-------------------------------------|---------------------------------------------------------------|
| unsupported, naming a backend       | every configuration using that backend in that role           |
| unsupported, naming none            | that backend pair                                             |
| NaN / garbage / wrong answer (gate) | that backend pair with the same KV dtype (and CUDA graphs on   |
|                                     | or off as in the failure, when the pair passed with the other) |
| OOM at load                         | fraction ≥ f (other memory knobs equal)                       |
| OOM at capture, graphs max bs g     | fraction ≥ f with graphs on and max bs ≥ g                    |
| OOM under load                      | fraction ≥ f with the same graph setting                      |
| not enough memory for the KV cache  | fraction ≤ f                                                  |

"Other memory knobs equal": the KV dtype and every flag the rules know nothing about; the
attention backends count as memory-neutral. A rule is dropped once a launch it covers gets
past the point where the rule said it would fail (it was wrong), and is not made when an earlier
launch already did; a broken pair that passed earlier with CUDA graphs switched the other way
is narrowed to the failure's graph setting instead (a NaN only captured graphs show).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from enum import Enum

from tuner.config import Outcome
from tuner.search.evidence import DECODE, GATE_OUTCOMES, PREFILL, Evidence, Knobs


class RuleKind(str, Enum):
    """What a rule says fails."""

    BACKEND = "backend_unsupported"  # a backend in a role does not run on this GPU
    PAIR = "pair_broken"  # a backend pair (and KV dtype) computes wrong answers
    PAIR_UNSUPPORTED = "pair_unsupported"  # a pair does not start, no backend named
    OOM_LOAD = "oom_at_load"  # fraction >= f
    OOM_CAPTURE = "oom_at_capture"  # fraction >= f, graphs on, max bs >= g
    OOM_SERVING = "oom_under_load"  # fraction >= f, same graph setting
    TOO_LITTLE = "not_enough_memory"  # fraction <= f


@dataclass(frozen=True, kw_only=True, slots=True)
class Rule:
    """A region of the space that a failed launch proved bad, with its evidence."""

    kind: RuleKind
    evidence: int  # the trial whose failure proves it
    line: str  # the proving log line
    confidence: float  # 1.0: the log names the cause outright; lower: inferred scope
    outcome: Outcome  # what a covered launch would end as
    role: str | None = None  # BACKEND: prefill/decode, None for both
    backend: str | None = None  # BACKEND
    pair: tuple[str | None, str | None] | None = None  # PAIR*: (prefill, decode)
    kv_dtype: str | None = None  # PAIR: and the memory rules
    graphs: bool | None = None  # PAIR: only with CUDA graphs on (True) or off (False); None: either
    fraction: float | None = None  # memory rules
    graph_key: str | None = None  # OOM_SERVING
    graph_max_bs: int | None = None  # OOM_CAPTURE (None: any size with graphs on)
    others: tuple[tuple[str, object], ...] = ()  # memory rules: the other flags held equal

    def covers(self, k: Knobs) -> bool:
        """True when a launch of these knobs would fail as this rule's evidence did."""
        if self.kind is RuleKind.BACKEND:
            roles = (PREFILL, DECODE) if self.role is None else (self.role,)
            return any(k.backend(r) == self.backend for r in roles)
        if self.kind is RuleKind.PAIR_UNSUPPORTED:
            return (k.prefill, k.decode) == self.pair
        if self.kind is RuleKind.PAIR:
            same_graphs = self.graphs is None or k.graphs == self.graphs
            return (k.prefill, k.decode) == self.pair and k.kv_dtype == self.kv_dtype and same_graphs
        if k.kv_dtype != self.kv_dtype or k.others != self.others:
            return False
        if k.fraction is None or self.fraction is None:
            return False
        if self.kind is RuleKind.TOO_LITTLE:
            return k.fraction <= self.fraction
        if k.fraction < self.fraction:
            return False
        if self.kind is RuleKind.OOM_CAPTURE:
            if not k.graphs:
                return False
            if self.graph_max_bs is None or k.graph_max_bs is None:
                return k.graph_key == ("default" if self.graph_max_bs is None else f"max:{self.graph_max_bs}")
            return k.graph_max_bs >= self.graph_max_bs
        if self.kind is RuleKind.OOM_SERVING:
            return k.graph_key == self.graph_key
        return True  # OOM_LOAD

    def describe(self) -> str:
        """One line: the region and the evidence."""
        if self.kind is RuleKind.BACKEND:
            role = f" as {self.role} backend" if self.role else ""
            region = f"backend {self.backend}{role}"
        elif self.pair is not None:
            kv = f", KV {self.kv_dtype}" if self.kv_dtype and self.kind is RuleKind.PAIR else ""
            region = f"backends {self.pair[0]}/{self.pair[1]}{kv}"
            if self.graphs is not None and self.kind is RuleKind.PAIR:
                region += f" with CUDA graphs {'on' if self.graphs else 'off'}"
        else:
            op = "<=" if self.kind is RuleKind.TOO_LITTLE else ">="
            region = f"mem-fraction-static {op} {self.fraction:g}"
            if self.kind is RuleKind.OOM_CAPTURE:
                region += " with CUDA graphs" + (
                    f" of max bs >= {self.graph_max_bs}" if self.graph_max_bs is not None else ""
                )
            elif self.kind is RuleKind.OOM_SERVING:
                region += f" with graphs {self.graph_key}"
        return f"{region}: {self.outcome.value} (trial {self.evidence}: {self.line[:160]})"


_UNSUPPORTED = frozenset({Outcome.UNSUPPORTED})


def rules_from(ev: Evidence) -> tuple[Rule, ...]:
    """The rules one launch proves (none for a success or a failure that says nothing of the knobs)."""
    k = ev.knobs
    line = ev.message or ev.outcome.value
    if ev.outcome in _UNSUPPORTED:
        if ev.backend is not None and ev.backend != "dsa" and _uses(k, ev.backend, ev.backend_role):
            rule = Rule(
                kind=RuleKind.BACKEND, backend=ev.backend, role=ev.backend_role,
                evidence=ev.trial, line=line, outcome=ev.outcome, confidence=0.9,
            )  # fmt: skip
            return (rule,)
        if k.prefill is not None or k.decode is not None:
            pair = (k.prefill, k.decode)
            kind = RuleKind.PAIR_UNSUPPORTED
            return (
                Rule(kind=kind, pair=pair, evidence=ev.trial, line=line, outcome=ev.outcome, confidence=0.8),
            )
        return ()
    if ev.outcome in GATE_OUTCOMES:
        if k.prefill is None and k.decode is None:
            return ()
        rule = Rule(
            kind=RuleKind.PAIR, pair=(k.prefill, k.decode), kv_dtype=k.kv_dtype,
            evidence=ev.trial, line=line, outcome=ev.outcome, confidence=0.9,
        )  # fmt: skip
        return (rule,)
    kind_of = _memory_kind(ev)
    if kind_of is None or k.fraction is None:
        return ()
    return (
        Rule(
            kind=kind_of, fraction=k.fraction, kv_dtype=k.kv_dtype, others=k.others,
            graph_key=k.graph_key if kind_of is RuleKind.OOM_SERVING else None,
            graph_max_bs=k.graph_max_bs if kind_of is RuleKind.OOM_CAPTURE else None,
            evidence=ev.trial, line=line, outcome=ev.outcome, confidence=1.0,
        ),
    )  # fmt: skip


def _memory_kind(ev: Evidence) -> RuleKind | None:
    """Which monotone memory rule a failure proves, if any."""
    if ev.outcome is Outcome.NOT_ENOUGH_MEMORY:
        return RuleKind.TOO_LITTLE
    if ev.outcome is not Outcome.OOM:
        return None
    if ev.stage == "capture":
        return RuleKind.OOM_CAPTURE if ev.knobs.graphs else None
    if ev.stage == "serving":
        return RuleKind.OOM_SERVING
    return RuleKind.OOM_LOAD if ev.stage in ("load", None) else None


def _uses(k: Knobs, backend: str, role: str | None) -> bool:
    roles = (PREFILL, DECODE) if role is None else (role,)
    return any(k.backend(r) == backend for r in roles)


def contradicts(rule: Rule, ev: Evidence) -> bool:
    """A launch the rule covers got past the point where the rule said it would fail."""
    if not rule.covers(ev.knobs):
        return False
    if rule.kind in (RuleKind.BACKEND, RuleKind.PAIR_UNSUPPORTED):
        return ev.got_ready
    if rule.kind is RuleKind.PAIR:
        return ev.outcome.measured
    if rule.kind is RuleKind.OOM_SERVING:
        return ev.outcome.measured
    if rule.kind is RuleKind.OOM_CAPTURE:
        return ev.got_ready
    return ev.got_ready or ev.stage in ("capture", "warmup")  # OOM_LOAD, TOO_LITTLE: it loaded


def derive_rules(evidence: Iterable[Evidence]) -> tuple[Rule, ...]:
    """The rules standing after every launch, in trial order: added by failures, dropped by contradictions.

    An unsupported pair whose log names no backend is blamed on one backend when the launches say
    which: both halves are the same backend, or the other half is proven to run in its role.
    """
    standing: list[Rule] = []
    earlier: list[Evidence] = []
    ordered = sorted(evidence, key=lambda e: e.trial)
    for ev in ordered:
        standing = [r for r in standing if not contradicts(r, ev)]
        for made in rules_from(ev):
            rule = _fitted(_blame_one(made, ev, ordered), ev, earlier)
            if rule is not None and not any(_same(rule, r) for r in standing):
                standing.append(rule)
        earlier.append(ev)
    return tuple(standing)


def _blame_one(rule: Rule, ev: Evidence, evidence: Sequence[Evidence]) -> Rule:
    """A PAIR_UNSUPPORTED rule narrowed to the one backend the other launches prove is at fault."""
    if rule.kind is not RuleKind.PAIR_UNSUPPORTED or rule.pair is None:
        return rule
    prefill, decode = rule.pair
    if prefill is not None and prefill == decode:
        return replace(rule, kind=RuleKind.BACKEND, backend=prefill, role=None, pair=None, confidence=0.7)
    runs = [e for e in evidence if e.got_ready]
    good_prefill = prefill is not None and any(e.knobs.prefill == prefill for e in runs)
    good_decode = decode is not None and any(e.knobs.decode == decode for e in runs)
    if good_prefill and not good_decode and decode is not None:
        return replace(rule, kind=RuleKind.BACKEND, backend=decode, role=DECODE, pair=None, confidence=0.7)
    if good_decode and not good_prefill and prefill is not None:
        return replace(rule, kind=RuleKind.BACKEND, backend=prefill, role=PREFILL, pair=None, confidence=0.7)
    return rule


def _fitted(rule: Rule, ev: Evidence, earlier: Sequence[Evidence]) -> Rule | None:
    """The rule as the earlier launches allow it: a broken pair narrowed to the failure's CUDA-graph
    setting when the pair passed with the other one; None when an earlier launch contradicts it."""
    if not any(contradicts(rule, e) for e in earlier):
        return rule
    if rule.kind is RuleKind.PAIR and rule.graphs is None:
        narrowed = replace(rule, graphs=ev.knobs.graphs)
        if not any(contradicts(narrowed, e) for e in earlier):
            return narrowed
    return None


def _scope(r: Rule) -> tuple[object, ...]:
    where = (r.fraction, r.graph_key, r.graph_max_bs, r.others)
    return (r.kind, r.role, r.backend, r.pair, r.kv_dtype, r.graphs, *where)


def _same(a: Rule, b: Rule) -> bool:
    return _scope(a) == _scope(b)


def covering(rules: Sequence[Rule], knobs: Knobs) -> Rule | None:
    """The most confident rule covering these knobs, or None."""
    hits = [r for r in rules if r.covers(knobs)]
    return max(hits, key=lambda r: r.confidence) if hits else None
