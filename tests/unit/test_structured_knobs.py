"""The structured-knob registry: each entry names real TrialConfig fields, kinds and option dests."""

from __future__ import annotations

import json
from dataclasses import fields

from tuner.config import CudaGraph, TrialConfig
from tuner.knobs.registry import knob_of
from tuner.report.rerender import config_from_dict
from tuner.sglang.knobs import owner_of
from tuner.sglang.options import builtin_table, known_versions
from tuner.sglang.structured import STRUCTURED, knob_owning
from tuner.store.codec import to_jsonable


def test_every_entry_names_a_param_kind_a_target_and_trial_config_fields() -> None:
    config_fields = {f.name for f in fields(TrialConfig)}
    for knob in STRUCTURED:
        assert knob_of(knob.kind) is knob and knob.fields
        assert set(knob.fields) <= config_fields
        assert all(set(dests) <= knob.owned for dests in knob.dests.values())
    owned = [d for knob in STRUCTURED for d in knob.owned]
    assert len(owned) == len(set(owned)), "a dest owned by two knobs"


def test_every_release_holds_each_part_of_each_knob_under_one_of_its_dests() -> None:
    newest = builtin_table(known_versions()[-1])
    dests = {spec.dest for spec in newest.options}
    for knob in STRUCTURED:
        for part, candidates in knob.dests.items():
            assert set(candidates) & dests, f"{knob.name}.{part}: none of {candidates} in {newest.version}"


def test_an_owned_option_is_reported_as_its_knob() -> None:
    newest = builtin_table(known_versions()[-1])
    for spec in newest.options:
        knob = knob_owning(spec.dest)
        if knob is not None:
            assert owner_of(spec) == knob.kind


def test_a_stored_config_comes_back_with_every_knob() -> None:
    config = TrialConfig(
        mem_fraction_static=0.8,
        cuda_graph=CudaGraph(enabled=True, max_bs=None, bs=(1, 2, 4)),
        sparse_prefill_backend="flashmla_sparse",
        sparse_decode_backend="fa3",
        flags=(("chunked-prefill-size", 4096), ("enable-foo", True)),
    )
    stored = json.loads(json.dumps(to_jsonable(config)))
    assert config_from_dict(stored) == config
    assert config_from_dict({}) == TrialConfig()
