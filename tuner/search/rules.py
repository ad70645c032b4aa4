"""Failures as rules: what one failed launch proves about the knobs, and which suggestions it covers.

| failure (outcome, stage)            | rule covers                                                   |
|-------------------------------------|---------------------------------------------------------------|
| unsupported, naming a backend       | every configuration using that backend in that role           |
| unsupported, naming none            | that backend pair                                             |
| NaN / garbage / wrong answer (gate) | that backend pair with the same KV dtype; narrowed by launches |
|                                     | of the pair that passed: to the failure's CUDA-graph setting   |
|                                     | (on or off), then to graphs on with max bs >= the failure's    |
| OOM at load                         | fraction >= f (other memory knobs equal)                      |
| OOM at capture, graphs max bs g     | fraction >= f with graphs on and max bs >= g, any chunked-     |
|                                     | prefill size, max running requests >= r                       |
| OOM under load                      | fraction >= f, chunked-prefill size >= c and max running       |
|                                     | requests >= r (where the launch set them), same graph setting |
| not enough memory for the KV cache  | fraction <= f, any chunked-prefill size, max running requests |
|                                     | >= r, any KV dtype at least as wide                           |

Why these scopes (what the failure proves, from how SGLang uses the knobs; each knob's module
states its own part, summarised here): the fraction sizes the
weights plus KV pool at load; what is left is for CUDA graphs and activations. Capturing the decode
graphs needs memory that grows with the largest captured batch, and happens before any request:
the prefill chunk size plays no part, so a capture OOM holds for every chunk size, and a larger
running-request cap captures at least the same graphs. The KV pool is what the fraction leaves
after the weights and the request-to-token table (which grows with the running-request cap), in
bytes: "not enough memory" holds for any chunk size, any larger cap and any wider KV dtype. Under load, the
activations of a prefill chunk grow with the chunk size and the batch with max running requests:
an OOM there holds for larger chunks and more running requests too. NaN that only the captured
graphs show grows with the batch sizes captured: a pair that passed with graphs at max bs 8 and
gave NaN at max bs 32 is ruled out with graphs at max bs >= 32, never below a size that passed.

With GRAPH_NAN_FROM_SIZE (off: measured no better on the training landscapes, docs/design.md) a
NaN in captured graphs starts at that narrowest scope -- graphs on from the failure's max bs up --
since wrong numbers there may be the capture's own (a bug of some captured batch size) and say
nothing of eager decode; a NaN in eager decode still covers every graph setting. By default a
broken pair starts wide: most wrong numbers are the kernels' own, and eager decode then fails too.

Each scope is the knob's own (`Knob.scopes` and `Knob.size` in tuner.knobs: the fraction, the
CUDA graphs, the KV dtype, the chunk and the running cap each say, per rule kind, whether the rule
holds them equal, for any value, or from the failure's size up or down); this module names no
knob. "Other memory knobs equal": every flag or TrialConfig field no knob describes is held equal
by every rule, the backend rules too (no rule fails open); the attention backends count as
memory-neutral. A rule is dropped once a launch it covers gets
past the point where the rule said it would fail (it was wrong), or narrowed where a narrower
scope (a broken pair's graph setting or graph size) is not contradicted; it is not made when an
earlier launch contradicts every scope it could have.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import Literal

from tuner.config import Outcome
from tuner.knobs.protocol import Scope
from tuner.knobs.registry import knob_flagged
from tuner.search.evidence import (
    DECODE,
    FRACTION,  # the knob held in Knobs.fraction
    GATE_OUTCOMES,
    GRAPHS,  # the knob held in Knobs.graphs, graph_max_bs, graph_key
    PREFILL,
    Evidence,
    Knobs,
    scope_of,
    size_of,
)

GRAPH_NAN_FROM_SIZE = False  # a NaN in captured graphs rules out graphs from the failing max bs up only


class RuleKind(str, Enum):
    """What a rule says fails."""

    BACKEND = "backend_unsupported"  # a backend in a role does not run on this GPU
    PAIR = "pair_broken"  # a backend pair (and KV dtype) computes wrong answers
    PAIR_UNSUPPORTED = "pair_unsupported"  # a pair does not start, no backend named
    OOM_LOAD = "oom_at_load"  # fraction >= f
    OOM_CAPTURE = "oom_at_capture"  # fraction >= f, graphs on, max bs >= g
    OOM_SERVING = "oom_under_load"  # fraction >= f, same graph setting
    TOO_LITTLE = "not_enough_memory"  # fraction <= f


Region = Literal["backend", "pair", "memory"]
Contradiction = Literal["ready", "measured", "loaded"]


@dataclass(frozen=True, slots=True)
class KindSpec:
    """What a rule kind covers and what proves it wrong."""

    region: Region  # a backend in a role, a backend pair, or a memory region of the fraction
    contradicted_by: Contradiction  # a covered launch that got ready, was measured, or loaded
    graph_scoped: bool = False  # the region narrows to the failure's CUDA-graph setting (a broken pair)


RULE_KINDS: dict[RuleKind, KindSpec] = {
    RuleKind.BACKEND: KindSpec("backend", "ready"),
    RuleKind.PAIR: KindSpec("pair", "measured", graph_scoped=True),
    RuleKind.PAIR_UNSUPPORTED: KindSpec("pair", "ready"),
    RuleKind.OOM_LOAD: KindSpec("memory", "loaded"),
    RuleKind.OOM_CAPTURE: KindSpec("memory", "ready"),
    RuleKind.OOM_SERVING: KindSpec("memory", "measured"),
    RuleKind.TOO_LITTLE: KindSpec("memory", "loaded"),
}
if set(RULE_KINDS) != set(RuleKind):  # a kind without its row would fall through every reader
    raise RuntimeError(f"rule kinds without a row in RULE_KINDS: {set(RuleKind) - set(RULE_KINDS)}")


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
    graphs: bool | None = None  # PAIR: only with CUDA graphs on (True) or off (False); None: either
    fraction: float | None = None  # memory rules
    graph_key: str | None = None  # memory rules holding the graph setting equal (OOM_SERVING)
    graph_max_bs: int | None = None  # OOM_CAPTURE, PAIR with graphs on: max bs >= this (None: any size)
    others: tuple[tuple[str, object], ...] = ()  # the failure's other flags, held as their knobs say

    @property
    def at_least(self) -> tuple[tuple[str, float], ...]:
        """The flags covered from the failure's size up (-1, SGLang's "no limit", as the largest)."""
        return tuple(
            (n, s) for n, v in self.others
            if scope_of(self.kind.value, n) == "up" and (s := size_of(n, v)) is not None
        )  # fmt: skip

    def covers(self, k: Knobs) -> bool:
        """True when a launch of these knobs would fail as this rule's evidence did."""
        spec = RULE_KINDS[self.kind]
        if spec.region == "backend":
            roles = (PREFILL, DECODE) if self.role is None else (self.role,)
            return any(k.backend(r) == self.backend for r in roles) and self._others_match(k)
        if spec.region == "pair":
            if (k.prefill, k.decode) != self.pair:
                return False
            if spec.graph_scoped and self.graphs is not None:
                if k.graphs != self.graphs:
                    return False
                if self.graphs and self.graph_max_bs is not None and not _bs_at_least(k, self.graph_max_bs):
                    return False
            return self._others_match(k)
        if k.fraction is None or self.fraction is None:
            return False
        if not _within(_FRACTION_SCOPE[self.kind], k.fraction, self.fraction):
            return False
        return self._graphs_match(k) and self._others_match(k)  # flags last: the costliest test

    def _graphs_match(self, k: Knobs) -> bool:
        """The graph setting as the CUDA-graph knob's scope for this memory rule holds it."""
        scope = _GRAPH_SCOPE[self.kind]
        if scope == "free":
            return True
        if scope == "equal":
            return k.graph_key == self.graph_key
        if not k.graphs:
            return False
        if self.graph_max_bs is None:  # SGLang's default list: that list only
            return k.graph_key == "default"
        return _within(scope, k.graph_max_bs, self.graph_max_bs)

    def _others_match(self, k: Knobs) -> bool:
        """Each flag as its knob's scope holds it: equal, free, or within the failure's size."""
        if k.others == self.others:
            return True  # every flag equal
        mine, theirs = dict(self.others), dict(k.others)
        kind = self.kind.value
        for name in mine.keys() | theirs.keys():
            scope = scope_of(kind, name)
            if scope == "free" or (name in mine and name in theirs and mine[name] == theirs[name]):
                continue
            if scope == "equal" or name not in mine or name not in theirs:
                return False
            if not _within(scope, size_of(name, theirs[name]), size_of(name, mine[name])):
                return False
        return True

    def describe(self) -> str:
        """One line: the region and the evidence."""
        spec = RULE_KINDS[self.kind]
        if spec.region == "backend":
            role = f" as {self.role} backend" if self.role else ""
            region = f"backend {self.backend}{role}"
        elif self.pair is not None:
            region = f"backends {self.pair[0]}/{self.pair[1]}{self._held_shown()}"
            if self.graphs is not None and spec.graph_scoped:
                region += f" with CUDA graphs {'on' if self.graphs else 'off'}"
                if self.graphs and self.graph_max_bs is not None:
                    region += f" of max bs >= {self.graph_max_bs}"
        else:
            op = "<=" if FRACTION.scopes.get(self.kind.value) == "down" else ">="
            region = f"{FRACTION.name} {op} {self.fraction:g}"
            if self.kind is RuleKind.OOM_CAPTURE:
                region += " with CUDA graphs" + (
                    f" of max bs >= {self.graph_max_bs}" if self.graph_max_bs is not None else ""
                )
            elif self.graph_key is not None:
                region += f" with graphs {self.graph_key}"
            region += "".join(f", {n} >= {b:g}" for n, b in self.at_least)
            below = (n for n, _ in self.others if scope_of(self.kind.value, n) == "down")
            region += "".join(f", {n} <= {dict(self.others)[n]}" for n in below)
        return f"{region}: {self.outcome.value} (trial {self.evidence}: {self.line[:160]})"

    def _held_shown(self) -> str:
        """The knobs a backend-pair rule holds equal, as each knob shows its value (", KV fp8_e4m3")."""
        shown = [
            knob.show(v) for n, v in self.others
            if (knob := knob_flagged(n)) is not None and scope_of(self.kind.value, n) == "equal"
        ]  # fmt: skip
        return "".join(f", {s}" for s in shown)


_UNSUPPORTED = frozenset({Outcome.UNSUPPORTED})
# The fraction's and the graphs' scope per rule kind (read once: `covers` runs per candidate and rule).
_FRACTION_SCOPE: dict[RuleKind, Scope] = {kind: FRACTION.scopes.get(kind.value, "equal") for kind in RuleKind}
_GRAPH_SCOPE: dict[RuleKind, Scope] = {kind: GRAPHS.scopes.get(kind.value, "equal") for kind in RuleKind}


def rules_from(ev: Evidence, *, proven_only: bool = False) -> tuple[Rule, ...]:
    """The rules one launch proves (none for a success or a failure that says nothing of the knobs).

    `proven_only`: a broken pair's rule no wider than the failure shows (graphs from its max bs up
    when it failed in captured graphs), as GRAPH_NAN_FROM_SIZE; see derive_rules."""
    k = ev.knobs
    line = ev.message or ev.outcome.value
    if ev.outcome in _UNSUPPORTED:
        if ev.backend is not None and ev.backend != "dsa" and _uses(k, ev.backend, ev.backend_role):
            rule = Rule(
                kind=RuleKind.BACKEND, backend=ev.backend, role=ev.backend_role,
                others=_held(RuleKind.BACKEND, k.others),
                evidence=ev.trial, line=line, outcome=ev.outcome, confidence=0.9,
            )  # fmt: skip
            return (rule,)
        if k.prefill is not None or k.decode is not None:
            pair = (k.prefill, k.decode)
            kind = RuleKind.PAIR_UNSUPPORTED
            return (
                Rule(
                    kind=kind, pair=pair, others=_held(kind, k.others),
                    evidence=ev.trial, line=line, outcome=ev.outcome, confidence=0.8,
                ),
            )  # fmt: skip
        return ()
    if ev.outcome in GATE_OUTCOMES:
        if k.prefill is None and k.decode is None:
            return ()
        # wrong numbers in eager decode are the kernels' own, so every graph setting; in captured graphs
        # they may be the capture's (a graph-only bug of some batch size): graphs on from that size up
        on = bool(k.graphs) and (GRAPH_NAN_FROM_SIZE or proven_only)
        rule = Rule(
            kind=RuleKind.PAIR, pair=(k.prefill, k.decode), others=_held(RuleKind.PAIR, k.others),
            graphs=True if on else None, graph_max_bs=k.graph_max_bs if on else None,
            evidence=ev.trial, line=line, outcome=ev.outcome, confidence=0.9,
        )  # fmt: skip
        return (rule,)
    kind_of = _memory_kind(ev)
    if kind_of is None or k.fraction is None:
        return ()
    graphs = _GRAPH_SCOPE[kind_of]
    return (
        Rule(
            kind=kind_of, fraction=k.fraction, others=_held(kind_of, k.others),
            graph_key=k.graph_key if graphs == "equal" else None,
            graph_max_bs=k.graph_max_bs if graphs in ("up", "down") else None,
            evidence=ev.trial, line=line, outcome=ev.outcome, confidence=1.0,
        ),
    )  # fmt: skip


def _held(kind: RuleKind, others: tuple[tuple[str, object], ...]) -> tuple[tuple[str, object], ...]:
    """The flags a rule of `kind` says anything about (those its knobs leave free dropped), so that two
    failures that differ only in a free flag make one rule."""
    return tuple((n, v) for n, v in others if scope_of(kind.value, n) != "free")


def _within(scope: Scope, value: float | None, bound: float | None) -> bool:
    """`value` inside a scope's bound: >= for up, <= for down, equal otherwise (None: outside)."""
    if value is None or bound is None:
        return False
    if scope == "free":
        return True
    return value >= bound if scope == "up" else value <= bound if scope == "down" else value == bound


def _bs_at_least(k: Knobs, bound: int) -> bool:
    """Graphs on with a known largest captured batch of at least `bound`."""
    return k.graphs and k.graph_max_bs is not None and k.graph_max_bs >= bound


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
    by = RULE_KINDS[rule.kind].contradicted_by
    if by == "ready":
        return ev.got_ready
    if by == "measured":
        return ev.outcome.measured
    return ev.got_ready or ev.stage in ("capture", "warmup")  # loaded: past the weights and the KV pool


def derive_rules(evidence: Iterable[Evidence], *, proven_only: bool = False) -> tuple[Rule, ...]:
    """The rules standing after every launch, in trial order: added by failures, narrowed or dropped by
    contradictions.

    An unsupported pair whose log names no backend is blamed on one backend when the launches say
    which: both halves are the same backend, or the other half is proven to run in its role.

    Two scopes are inferred beyond what the failure itself shows: a broken pair's eager decode and
    smaller graphs after wrong numbers in captured graphs, and that blame of one backend. A launch
    inside them could contradict them, but none is made while they prune, so where they leave the
    study nothing to launch they would stand unchecked for good. `proven_only` keeps each rule to
    what its failure shows (the study asks for it then: tuner.study.learn.policy_for).
    """
    # each rule with the failure that made it and the rule as the failure made it (before any blame):
    # a blame on one backend that a later launch contradicts falls back to the failure's own scope,
    # for the launch proves at least what its log names
    standing: list[tuple[Rule, Evidence, Rule]] = []
    earlier: list[Evidence] = []
    ordered = sorted(evidence, key=lambda e: e.trial)
    for ev in ordered:
        if any(contradicts(rule, ev) for rule, _, _ in standing):
            kept: list[tuple[Rule, Evidence, Rule]] = []
            for rule, failure, made_as in standing:
                narrow: Rule | None = rule
                if contradicts(rule, ev):
                    seen = [*earlier, ev]
                    narrow = _fitted(rule, failure, seen) or _fitted(made_as, failure, seen)
                if narrow is not None:
                    kept.append((narrow, failure, made_as))
            standing = kept
        made = rules_from(ev, proven_only=proven_only)
        if made:
            scopes = {_scope(r) for r, _, _ in standing}
            for rule in made:
                blamed = rule if proven_only else _blame_one(rule, ev, ordered)
                fitted = _fitted(blamed, ev, earlier) or _fitted(rule, ev, earlier)
                if fitted is not None and _scope(fitted) not in scopes:
                    standing.append((fitted, ev, rule))
                    scopes.add(_scope(fitted))
        earlier.append(ev)
    return tuple(r for r, _, _ in standing)


def _blame_one(rule: Rule, ev: Evidence, evidence: Sequence[Evidence]) -> Rule:
    """A PAIR_UNSUPPORTED rule narrowed to the one backend, in its role, that the other launches prove is at
    fault. A pair of one backend says that backend fails in at least one role, not in both (a kernel may
    be built for decode and not for prefill): it is narrowed like any pair, else it stays on the pair (the
    support model carries the doubt to both roles) -- a rule over both roles would never let a launch
    show the role that runs."""
    if rule.kind is not RuleKind.PAIR_UNSUPPORTED or rule.pair is None:
        return rule
    prefill, decode = rule.pair
    backend = replace(rule, kind=RuleKind.BACKEND, pair=None, others=_held(RuleKind.BACKEND, rule.others))
    # a launch that came up and then failed as unsupported (a kernel missing under load) proves
    # neither of its halves runs
    runs = [e for e in evidence if e.got_ready and e.outcome not in _UNSUPPORTED]
    good_prefill = prefill is not None and any(e.knobs.prefill == prefill for e in runs)
    good_decode = decode is not None and any(e.knobs.decode == decode for e in runs)
    if good_prefill and not good_decode and decode is not None:
        return replace(backend, backend=decode, role=DECODE, confidence=0.7)
    if good_decode and not good_prefill and prefill is not None:
        return replace(backend, backend=prefill, role=PREFILL, confidence=0.7)
    return rule


def _fitted(rule: Rule, ev: Evidence, earlier: Sequence[Evidence]) -> Rule | None:
    """The widest scope of the rule, no wider than it is, that no earlier launch contradicts; None when
    every scope is contradicted. Only a broken pair has narrower scopes: the failure's CUDA-graph
    setting, then (with graphs on) the failure's max batch size and above."""
    for scope in _scopes(rule, ev):
        if not any(contradicts(scope, e) for e in earlier):
            return scope
    return None


def _scopes(rule: Rule, ev: Evidence) -> list[Rule]:
    """The rule and its narrower scopes, widest first."""
    if rule.kind is not RuleKind.PAIR:
        return [rule]
    k = ev.knobs
    scopes = [replace(rule, graphs=None, graph_max_bs=None)]
    scopes.append(replace(rule, graphs=k.graphs, graph_max_bs=None))
    if k.graphs and k.graph_max_bs is not None:
        scopes.append(replace(rule, graphs=True, graph_max_bs=k.graph_max_bs))
    keys = [_scope(s) for s in scopes]
    return scopes[keys.index(_scope(rule)) :] if _scope(rule) in keys else [rule]


def _scope(r: Rule) -> tuple[object, ...]:
    where = (r.fraction, r.graph_key, r.graph_max_bs, r.others)
    return (r.kind, r.role, r.backend, r.pair, r.graphs, *where)


def covering(rules: Sequence[Rule], knobs: Knobs) -> Rule | None:
    """The most confident rule covering these knobs, or None."""
    hits = [r for r in rules if r.covers(knobs)]
    return max(hits, key=lambda r: r.confidence) if hits else None
