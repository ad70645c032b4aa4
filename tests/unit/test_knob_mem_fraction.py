"""mem-fraction-static is a knob like the others: its field spelled, restored and read through the
knob object, its direction in the rules its own, and the views find its param by its flag."""

from __future__ import annotations

import json

from tuner.config import CudaGraph, Outcome, TrialConfig
from tuner.knobs.registry import knob_of, knob_with_role
from tuner.report.knobs import fraction_param
from tuner.search.evidence import Evidence, knobs_of
from tuner.search.rules import rules_from
from tuner.sglang.flags import render_flags
from tuner.sglang.options import builtin_table
from tuner.sglang.structured import STRUCTURED, restore_config
from tuner.store.codec import to_jsonable

RENAMED = "params:\n  - {name: mem, flag: mem-fraction-static, kind: float, low: 0.7, high: 0.9}\n"


def test_the_views_find_the_fraction_s_param_by_its_flag() -> None:
    assert fraction_param(["cuda_graph", "mem-fraction-static"]) == "mem-fraction-static"
    assert fraction_param(["mem", "cuda_graph"], RENAMED) == "mem"
    assert fraction_param(["mem", "cuda_graph"]) is None and fraction_param([], "{unreadable") is None


def test_its_field_is_spelled_first_and_restored_by_its_knob_with_the_others() -> None:
    fraction = knob_with_role("fraction")
    assert fraction is knob_of("mem_fraction") and fraction in STRUCTURED
    config = TrialConfig(
        mem_fraction_static=0.85, cuda_graph=CudaGraph(max_bs=64),
        sparse_prefill_backend="flashmla_sparse", sparse_decode_backend="fa3",
        flags=(("chunked-prefill-size", 4096),),
    )  # fmt: skip
    argv = render_flags(config, builtin_table("0.5.23"), port=1)
    assert argv[:2] == ("--mem-fraction-static", "0.85")  # TrialConfig's field order: the launch keys'
    assert (
        argv.index("--cuda-graph-max-bs-decode")
        < argv.index("--dsa-prefill-backend")
        < argv.index("--chunked-prefill-size")
    )
    assert restore_config(json.loads(json.dumps(to_jsonable(config)))) == config


def test_the_rules_take_its_direction_and_name_from_the_knob() -> None:
    config = TrialConfig(mem_fraction_static=0.6, cuda_graph=CudaGraph(enabled=False))
    ev = Evidence(
        trial=3, knobs=knobs_of(config), outcome=Outcome.NOT_ENOUGH_MEMORY, stage="load", message="x"
    )
    (rule,) = rules_from(ev)
    assert knob_of("mem_fraction").scopes["not_enough_memory"] == "down"
    assert rule.describe().startswith("mem-fraction-static <= 0.6")
    assert rule.covers(knobs_of(TrialConfig(mem_fraction_static=0.5, cuda_graph=CudaGraph(enabled=False))))
