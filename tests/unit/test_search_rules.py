"""Failure rules: what a failed launch proves, which suggestions it covers, when it is dropped."""

from __future__ import annotations

import pytest

from tuner.config import CudaGraph, Outcome, TrialConfig
from tuner.search import rules
from tuner.search.evidence import Evidence, knobs_of
from tuner.search.rules import RuleKind, contradicts, covering, derive_rules, rules_from


def config(
    f: float = 0.85,
    graphs: int | None = None,
    pair: tuple[str, str] = ("trtllm", "trtllm"),
    kv: str | None = None,
    **flags: object,
) -> TrialConfig:
    extra = [("kv-cache-dtype", kv)] if kv else []
    extra += [(k.replace("_", "-"), v) for k, v in flags.items()]
    return TrialConfig(
        mem_fraction_static=f,
        cuda_graph=CudaGraph(enabled=False) if graphs is None else CudaGraph(max_bs=graphs),
        sparse_prefill_backend=pair[0],
        sparse_decode_backend=pair[1],
        flags=tuple(extra),  # type: ignore[arg-type]
    )


def ev(
    trial: int,
    cfg: TrialConfig,
    outcome: Outcome,
    *,
    stage: str | None = None,
    backend: str | None = None,
    role: str | None = None,
) -> Evidence:
    return Evidence(
        trial=trial, knobs=knobs_of(cfg), outcome=outcome, stage=stage, message=f"line of {trial}",
        backend=backend, backend_role=role,
    )  # fmt: skip


def covered(rules: tuple, cfg: TrialConfig) -> bool:  # type: ignore[type-arg]
    return covering(rules, knobs_of(cfg)) is not None


def test_an_unsupported_backend_is_learned_for_every_pair_that_uses_it() -> None:
    rules = rules_from(ev(0, config(pair=("fa3", "flashmla_kv")), Outcome.UNSUPPORTED, backend="fa3"))
    assert [r.kind for r in rules] == [RuleKind.BACKEND]
    assert covered(rules, config(pair=("fa3", "fa3"))) and covered(rules, config(pair=("trtllm", "fa3")))
    assert not covered(rules, config(pair=("trtllm", "flashmla_kv")))


def test_a_backend_blamed_in_one_role_covers_that_role_only() -> None:
    rules = rules_from(ev(0, config(pair=("fa3", "fa3")), Outcome.UNSUPPORTED, backend="fa3", role="decode"))
    assert covered(rules, config(pair=("trtllm", "fa3")))
    assert not covered(rules, config(pair=("fa3", "trtllm")))


def test_unsupported_without_a_named_backend_covers_the_pair_only() -> None:
    rules = rules_from(ev(0, config(pair=("a", "b")), Outcome.UNSUPPORTED))
    assert [r.kind for r in rules] == [RuleKind.PAIR_UNSUPPORTED]
    assert covered(rules, config(f=0.7, graphs=8, pair=("a", "b")))
    assert not covered(rules, config(pair=("a", "c")))


def test_nan_at_the_gate_covers_the_pair_with_the_same_kv_dtype() -> None:
    rules = rules_from(ev(0, config(pair=("flashmla_kv", "flashmla_kv"), kv="fp8_e4m3"), Outcome.NAN))
    assert covered(rules, config(f=0.6, graphs=64, pair=("flashmla_kv", "flashmla_kv"), kv="fp8_e4m3"))
    assert not covered(rules, config(pair=("flashmla_kv", "flashmla_kv"), kv="bfloat16"))
    assert not covered(rules, config(pair=("flashmla_kv", "trtllm"), kv="fp8_e4m3"))


@pytest.mark.parametrize(
    ("failure", "stage", "inside", "outside"),
    [
        (Outcome.OOM, "load", config(f=0.97, graphs=64), config(f=0.93)),
        (Outcome.NOT_ENOUGH_MEMORY, "load", config(f=0.5, graphs=8), config(f=0.62)),
        (Outcome.OOM, "capture", config(f=0.96, graphs=128), config(f=0.96, graphs=32)),
        (Outcome.OOM, "serving", config(f=0.99), config(f=0.99, graphs=64)),
    ],
)
def test_memory_failures_are_monotone_in_the_fraction(
    failure: Outcome, stage: str, inside: TrialConfig, outside: TrialConfig
) -> None:
    base = config(
        f=0.6 if failure is Outcome.NOT_ENOUGH_MEMORY else 0.95, graphs=64 if stage == "capture" else None
    )
    rules = rules_from(ev(0, base, failure, stage=stage))
    assert len(rules) == 1
    assert covered(rules, inside)
    assert not covered(rules, outside)


def test_capture_oom_needs_both_the_fraction_and_the_graph_size() -> None:
    rules = rules_from(ev(0, config(f=0.9, graphs=64), Outcome.OOM, stage="capture"))
    assert covered(rules, config(f=0.92, graphs=128))
    assert not covered(rules, config(f=0.88, graphs=128))  # lower fraction
    assert not covered(rules, config(f=0.95, graphs=32))  # smaller graphs
    assert not covered(rules, config(f=0.95))  # graphs off


def test_memory_rules_hold_other_flags_equal() -> None:
    rules = rules_from(ev(0, config(f=0.9, chunked_prefill_size=16384), Outcome.OOM, stage="load"))
    assert covered(rules, config(f=0.95, chunked_prefill_size=16384))
    assert not covered(rules, config(f=0.95, chunked_prefill_size=4096))
    assert covered(
        rules, config(f=0.95, pair=("fa3", "fa3"), chunked_prefill_size=16384)
    )  # backends: neutral
    assert not covered(rules, config(f=0.95, chunked_prefill_size=16384, dp_size=2))


def test_oom_under_load_is_monotone_in_fraction_chunk_size_and_running_requests() -> None:
    failed = config(f=0.86, graphs=64, chunked_prefill_size=8192, max_running_requests=128)
    (rule,) = rules_from(ev(0, failed, Outcome.OOM, stage="serving"))
    assert "chunked-prefill-size >= 8192" in rule.describe()
    for f, chunk, running in ((0.86, 8192, 128), (0.9, 16384, 128), (0.88, 8192, 256), (0.9, -1, 512)):
        inside = config(f=f, graphs=64, chunked_prefill_size=chunk, max_running_requests=running)
        assert covered((rule,), inside)
    for f, chunk, running in ((0.84, 16384, 256), (0.9, 4096, 128), (0.9, 16384, 64)):
        assert not covered(
            (rule,), config(f=f, graphs=64, chunked_prefill_size=chunk, max_running_requests=running)
        )
    assert not covered((rule,), config(f=0.9, chunked_prefill_size=16384, max_running_requests=128))  # graphs
    passed = ev(1, config(f=0.9, graphs=64, chunked_prefill_size=16384, max_running_requests=128), Outcome.OK)
    assert derive_rules([ev(0, failed, Outcome.OOM, stage="serving"), passed]) == ()  # contradicted: dropped


def test_oom_under_load_without_a_chunk_knob_holds_the_other_flags_equal() -> None:
    (rule,) = rules_from(ev(0, config(f=0.9, dp_size=2), Outcome.OOM, stage="serving"))
    assert rule.at_least == () and covered((rule,), config(f=0.95, dp_size=2))
    assert not covered((rule,), config(f=0.95, dp_size=4)) and not covered((rule,), config(f=0.95))


def test_capture_oom_holds_for_every_chunk_size() -> None:
    failed = config(f=0.9, graphs=64, chunked_prefill_size=16384)
    (rule,) = rules_from(ev(0, failed, Outcome.OOM, stage="capture"))
    for chunk in (2048, 8192, 16384, -1):
        assert covered((rule,), config(f=0.92, graphs=128, chunked_prefill_size=chunk))
    assert not covered((rule,), config(f=0.92, graphs=32, chunked_prefill_size=2048))  # smaller graphs
    assert not covered((rule,), config(f=0.92, graphs=128, chunked_prefill_size=2048, dp_size=2))
    assert not covered((rule,), config(f=0.92, graphs=128, kv="bfloat16"))  # KV dtype: held equal


def test_failures_that_prove_nothing_about_knobs_make_no_rule() -> None:
    for outcome in (Outcome.OK, Outcome.CRASHED, Outcome.INFRA_ERROR, Outcome.INTERRUPTED, Outcome.HANG):
        assert rules_from(ev(0, config(), outcome)) == ()


def test_a_launch_that_passes_where_a_rule_said_it_would_fail_drops_the_rule() -> None:
    oom = ev(0, config(f=0.9), Outcome.OOM, stage="load")
    ok = ev(1, config(f=0.95), Outcome.OK)
    assert contradicts(rules_from(oom)[0], ok)
    assert derive_rules([oom, ok]) == ()
    other = ev(2, config(f=0.85), Outcome.OK)  # not covered: the rule stands
    assert len(derive_rules([oom, other])) == 1


def test_identical_rules_are_kept_once_and_evidence_is_the_first() -> None:
    a = ev(3, config(pair=("x", "y")), Outcome.GARBAGE)
    b = ev(5, config(f=0.7, pair=("x", "y")), Outcome.NAN)
    (rule,) = derive_rules([b, a])
    assert rule.evidence == 3 and "trial 3" in rule.describe()


def test_an_unsupported_pair_is_blamed_on_the_half_not_proven_to_run() -> None:
    works = ev(0, config(pair=("trtllm", "trtllm")), Outcome.OK)
    fails = ev(1, config(pair=("trtllm", "fa3")), Outcome.UNSUPPORTED)  # the log names no backend
    (rule,) = derive_rules([works, fails])
    assert rule.kind is RuleKind.BACKEND and rule.backend == "fa3" and rule.role == "decode"
    assert covered((rule,), config(pair=("flashmla_kv", "fa3")))
    assert not covered((rule,), config(pair=("fa3", "trtllm")))  # fa3 as prefill is not proven bad


def test_an_unsupported_pair_of_one_backend_is_blamed_on_the_role_not_proven_to_run() -> None:
    # fa3/fa3 fails to start, the log names no backend: fa3 fails in at least one role, not in both
    (rule,) = derive_rules([ev(0, config(pair=("fa3", "fa3")), Outcome.UNSUPPORTED)])
    assert rule.kind is RuleKind.PAIR_UNSUPPORTED and not covered((rule,), config(pair=("fa3", "trtllm")))
    assert not covered((rule,), config(pair=("trtllm", "fa3")))
    # fa3 then runs as the prefill backend of another pair: its decode kernels are what fails
    runs = ev(1, config(pair=("fa3", "trtllm")), Outcome.OK)
    (rule,) = derive_rules([ev(0, config(pair=("fa3", "fa3")), Outcome.UNSUPPORTED), runs])
    assert rule.kind is RuleKind.BACKEND and rule.backend == "fa3" and rule.role == "decode"
    assert covered((rule,), config(pair=("trtllm", "fa3")))
    assert not covered((rule,), config(pair=("fa3", "x")))


def test_an_unsupported_launch_that_came_up_proves_neither_half_runs() -> None:
    works = ev(0, config(pair=("trtllm", "trtllm")), Outcome.OK)
    under_load = ev(1, config(pair=("fa3", "trtllm")), Outcome.UNSUPPORTED, stage="serving")
    assert under_load.got_ready
    rules = derive_rules([works, under_load, ev(2, config(pair=("fa3", "fa3")), Outcome.UNSUPPORTED)])
    blamed = {(r.backend, r.role) for r in rules if r.kind is RuleKind.BACKEND}
    assert blamed == {("fa3", "prefill")}  # not fa3 as decode of fa3/fa3: its prefill never ran
    assert any(r.kind is RuleKind.PAIR_UNSUPPORTED and r.pair == ("fa3", "fa3") for r in rules)


def test_a_blame_another_launch_disproves_falls_back_to_the_failing_pair() -> None:
    # blamed on fa3 as prefill (trtllm decodes fine), but fa3 prefilled an earlier launch that came up
    came_up = ev(0, config(pair=("fa3", "fa3")), Outcome.UNSUPPORTED, stage="serving")
    decodes = ev(1, config(pair=("trtllm", "trtllm")), Outcome.OK)
    fails = ev(2, config(pair=("fa3", "trtllm")), Outcome.UNSUPPORTED, stage="capture")
    rules = derive_rules([came_up, decodes, fails])
    assert covered(rules, config(f=0.7, pair=("fa3", "trtllm")))  # the pair its log names, at any fraction
    assert not covered(rules, config(pair=("fa3", "flashmla_kv")))
    # blamed on flashmla_kv as decode (fa3 prefills fine); a later launch decodes with it: the pair stays
    fails = ev(0, config(pair=("fa3", "flashmla_kv")), Outcome.UNSUPPORTED)
    prefills = ev(1, config(pair=("fa3", "fa3")), Outcome.OK)
    (blamed,) = derive_rules([fails, prefills])
    assert blamed.kind is RuleKind.BACKEND and blamed.backend == "flashmla_kv"
    later = ev(2, config(pair=("trtllm", "flashmla_kv")), Outcome.OK)
    (rule,) = derive_rules([fails, prefills, later])
    assert rule.kind is RuleKind.PAIR_UNSUPPORTED and rule.pair == ("fa3", "flashmla_kv")
    assert covered((rule,), config(f=0.9, pair=("fa3", "flashmla_kv")))


def test_without_evidence_about_either_half_the_rule_stays_on_the_pair() -> None:
    (rule,) = derive_rules([ev(0, config(pair=("a", "b")), Outcome.UNSUPPORTED)])
    assert rule.kind is RuleKind.PAIR_UNSUPPORTED


def test_a_pair_that_passed_with_graphs_off_is_ruled_out_with_graphs_on_only() -> None:
    pair = ("flashmla_sparse", "flashmla_kv")
    passed = ev(1, config(f=0.9, pair=pair, kv="fp8_e4m3"), Outcome.OK)  # eager decode: right answers
    nan = ev(2, config(f=0.85, graphs=128, pair=pair, kv="fp8_e4m3"), Outcome.NAN)  # NaN in captured graphs
    (rule,) = derive_rules([passed, nan])
    assert rule.kind is RuleKind.PAIR and rule.graphs is True and "graphs on" in rule.describe()
    assert covered((rule,), config(f=0.8, graphs=64, pair=pair, kv="fp8_e4m3"))
    assert not covered((rule,), config(f=0.9, pair=pair, kv="fp8_e4m3"))  # what passed is not pruned
    assert not covered((rule,), config(f=0.8, pair=pair, kv="fp8_e4m3"))
    (broad,) = derive_rules([nan])  # no launch says otherwise: every graph setting
    assert broad.graphs is None and covered((broad,), config(f=0.8, pair=pair, kv="fp8_e4m3"))


def test_a_failure_an_earlier_launch_contradicts_makes_no_rule() -> None:
    ok = ev(1, config(f=0.95), Outcome.OK)
    oom = ev(2, config(f=0.9), Outcome.OOM, stage="load")  # f >= 0.9 would cover the launch that passed
    assert derive_rules([ok, oom]) == ()
    both = ev(3, config(f=0.9, graphs=64, pair=("x", "y")), Outcome.NAN)
    passed_on = ev(1, config(f=0.9, graphs=64, pair=("x", "y")), Outcome.OK)
    passed_off = ev(2, config(f=0.9, pair=("x", "y")), Outcome.OK)
    assert derive_rules([passed_on, passed_off, both]) == ()  # it passed at the very graph size that failed


def test_nan_only_in_larger_graphs_is_ruled_out_from_the_failing_max_bs_up() -> None:
    pair, kv = ("flashmla_sparse", "flashmla_kv"), "fp8_e4m3"
    passed = ev(1, config(f=0.85, graphs=8, pair=pair, kv=kv), Outcome.OK)
    nan = ev(2, config(f=0.85, graphs=32, pair=pair, kv=kv), Outcome.NAN)
    (rule,) = derive_rules([passed, nan])
    assert (rule.graphs, rule.graph_max_bs) == (True, 32) and "max bs >= 32" in rule.describe()
    for bs in (32, 64, 256):
        assert covered((rule,), config(f=0.7, graphs=bs, pair=pair, kv=kv))
    for bs in (8, 16):
        assert not covered((rule,), config(f=0.7, graphs=bs, pair=pair, kv=kv))
    assert not covered((rule,), config(f=0.7, pair=pair, kv=kv))  # graphs off
    assert not covered((rule,), config(f=0.7, graphs=64, pair=pair, kv="bfloat16"))  # other KV dtype
    assert not covered((rule,), config(f=0.7, graphs=64, pair=("trtllm", "flashmla_kv"), kv=kv))


def test_a_pass_inside_a_pair_rule_narrows_it_instead_of_dropping_it() -> None:
    pair = ("x", "y")
    nan = ev(1, config(graphs=32, pair=pair), Outcome.NAN)
    off = ev(2, config(pair=pair), Outcome.OK)  # the pair is fine without graphs
    small = ev(3, config(graphs=8, pair=pair), Outcome.OK)  # and with small graphs
    (rule,) = derive_rules([nan, off])
    assert (rule.graphs, rule.graph_max_bs) == (True, None)
    (rule,) = derive_rules([nan, off, small])
    assert (rule.graphs, rule.graph_max_bs) == (True, 32) and rule.evidence == 1
    big = ev(4, config(graphs=64, pair=pair), Outcome.OK)  # a larger size passes: not monotone, dropped
    assert derive_rules([nan, off, small, big]) == ()


def test_nan_with_graphs_off_stays_on_the_graph_setting() -> None:
    pair = ("x", "y")
    on = ev(1, config(graphs=32, pair=pair), Outcome.OK)
    nan = ev(2, config(pair=pair), Outcome.NAN)
    (rule,) = derive_rules([on, nan])
    assert (rule.graphs, rule.graph_max_bs) == (False, None)
    assert covered((rule,), config(f=0.6, pair=pair)) and not covered((rule,), config(graphs=64, pair=pair))


def test_not_enough_memory_holds_for_any_chunk_a_larger_running_cap_and_a_wider_kv_dtype() -> None:
    failed = config(f=0.64, kv="fp8_e4m3", chunked_prefill_size=8192, max_running_requests=48)
    (rule,) = rules_from(ev(0, failed, Outcome.NOT_ENOUGH_MEMORY, stage="kv"))
    for f, kv, chunk, running in (
        (0.64, "fp8_e4m3", 2048, 64),
        (0.6, "bfloat16", 16384, 48),
        (0.62, "fp8_e4m3", -1, 128),
    ):
        assert covered((rule,), config(f=f, kv=kv, chunked_prefill_size=chunk, max_running_requests=running))
    assert not covered(
        (rule,), config(f=0.64, kv="fp8_e4m3", chunked_prefill_size=8192, max_running_requests=32)
    )
    assert not covered(
        (rule,), config(f=0.66, kv="fp8_e4m3", chunked_prefill_size=8192, max_running_requests=64)
    )
    narrow = rules_from(ev(0, config(f=0.64, kv="bfloat16"), Outcome.NOT_ENOUGH_MEMORY, stage="kv"))
    assert not covered(narrow, config(f=0.64, kv="fp8_e4m3"))  # a narrower KV dtype fits more tokens


def test_capture_oom_holds_for_a_larger_running_cap_but_not_a_smaller_one() -> None:
    failed = config(f=0.9, graphs=64, max_running_requests=64)
    (rule,) = rules_from(ev(0, failed, Outcome.OOM, stage="capture"))
    assert covered((rule,), config(f=0.92, graphs=64, max_running_requests=128))
    assert not covered((rule,), config(f=0.92, graphs=64, max_running_requests=32))  # fewer graphs captured


def test_every_rule_kind_reads_what_it_covers_and_what_disproves_it_from_its_table_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tuner.search import rules as rules_module

    assert set(rules_module.RULE_KINDS) == set(RuleKind)
    failed = config(f=0.9, graphs=None)
    (rule,) = rules_from(ev(0, failed, Outcome.OOM, stage="serving"))
    assert rule.kind is RuleKind.OOM_SERVING
    came_up_then_died = ev(1, failed, Outcome.CRASHED, stage="serving")
    assert came_up_then_died.got_ready and not contradicts(rule, came_up_then_died)  # measured disproves it
    row = rules_module.RULE_KINDS[RuleKind.OOM_SERVING]
    monkeypatch.setitem(
        rules_module.RULE_KINDS, RuleKind.OOM_SERVING, rules_module.KindSpec(row.region, "ready")
    )
    assert contradicts(rule, came_up_then_died)  # the row alone changed what disproves it


@pytest.fixture
def graph_nan_from_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """The measured option: a NaN in captured graphs rules out graphs from its max bs up only."""
    monkeypatch.setattr(rules, "GRAPH_NAN_FROM_SIZE", True)


@pytest.mark.usefixtures("graph_nan_from_size")
def test_with_the_option_nan_in_captured_graphs_spares_eager_decode_and_smaller_graphs() -> None:
    pair, kv = ("flashmla_sparse", "flashmla_kv"), "fp8_e4m3"
    (rule,) = derive_rules([ev(2, config(f=0.85, graphs=128, pair=pair, kv=kv), Outcome.NAN)])
    assert (rule.graphs, rule.graph_max_bs) == (True, 128) and "max bs >= 128" in rule.describe()
    assert covered((rule,), config(f=0.8, graphs=256, pair=pair, kv=kv))
    assert not covered((rule,), config(f=0.8, pair=pair, kv=kv))
    assert not covered((rule,), config(f=0.8, graphs=64, pair=pair, kv=kv))
    assert not covered((rule,), config(f=0.8, graphs=256, pair=pair, kv="bfloat16"))
    big = ev(3, config(f=0.8, graphs=256, pair=pair, kv=kv), Outcome.OK)  # a larger size passes: dropped
    assert derive_rules([ev(2, config(f=0.85, graphs=128, pair=pair, kv=kv), Outcome.NAN), big]) == ()


@pytest.mark.usefixtures("graph_nan_from_size")
def test_with_the_option_nan_in_eager_decode_still_covers_every_graph_setting_until_graphs_pass() -> None:
    pair = ("x", "y")
    eager_nan = ev(1, config(pair=pair), Outcome.NAN)
    (rule,) = derive_rules([eager_nan])
    assert rule.graphs is None
    for graphs in (None, 8, 256):
        assert covered((rule,), config(f=0.8, graphs=graphs, pair=pair))
    (rule,) = derive_rules([eager_nan, ev(2, config(graphs=32, pair=pair), Outcome.OK)])
    assert (rule.graphs, rule.graph_max_bs, rule.evidence) == (False, None, 1)


def test_proven_only_rules_are_no_wider_than_their_failures_show() -> None:
    pair, kv = ("fa3", "fa3"), "bfloat16"
    in_graphs = ev(0, config(f=0.8, graphs=64, pair=pair, kv=kv), Outcome.NAN)
    (wide,) = derive_rules([in_graphs])
    assert covered((wide,), config(f=0.8, pair=pair, kv=kv))  # inferred: eager decode fails too
    (proven,) = derive_rules([in_graphs], proven_only=True)
    assert (proven.graphs, proven.graph_max_bs) == (True, 64)
    assert covered((proven,), config(f=0.8, graphs=128, pair=pair, kv=kv))
    assert not covered((proven,), config(f=0.8, pair=pair, kv=kv))
    assert not covered((proven,), config(f=0.8, graphs=16, pair=pair, kv=kv))
    # an unsupported pair whose log names no backend stays on the pair: the blame is inferred
    works = ev(0, config(pair=("trtllm", "trtllm")), Outcome.OK)
    fails = ev(1, config(pair=("trtllm", "flashmla_kv")), Outcome.UNSUPPORTED)
    (blamed,) = derive_rules([works, fails])
    assert blamed.kind is RuleKind.BACKEND and covered((blamed,), config(pair=("fa3", "flashmla_kv")))
    (kept,) = derive_rules([works, fails], proven_only=True)
    assert kept.kind is RuleKind.PAIR_UNSUPPORTED
    assert not covered((kept,), config(pair=("fa3", "flashmla_kv")))
    # what a failure shows outright is kept whole: wrong numbers in eager decode, a named backend
    eager = ev(2, config(f=0.8, pair=pair, kv=kv), Outcome.NAN)
    (rule,) = derive_rules([eager], proven_only=True)
    assert covered((rule,), config(f=0.8, graphs=16, pair=pair, kv=kv))
