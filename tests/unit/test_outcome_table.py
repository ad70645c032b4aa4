"""Outcomes are one table (tuner.config.OUTCOMES): every reader (the verdict, the retry and the
backoff of the study, the live display, the reports) takes an outcome's properties from its row, and
the stored row's configuration is decoded by the store."""

from __future__ import annotations

import pytest
from support.fakes import FakeStore
from support.stored import make_result, record

from tuner.config import NOT_THE_CONFIGURATION, OUTCOMES, CudaGraph, Outcome, OutcomeKind, Verdict
from tuner.study.backoff import InfraBackoff


def _verdict(outcome: Outcome) -> Verdict:
    return Verdict(outcome=outcome, values=(), constraints={}, feasible=False, metrics={})


def test_every_outcome_has_one_row_and_the_properties_are_read_from_it() -> None:
    assert set(OUTCOMES) == set(Outcome)
    for outcome, kind in OUTCOMES.items():
        assert outcome.kind is kind
        assert outcome.measured is kind.measured and outcome.retryable is kind.retryable
        assert _verdict(outcome).retryable is kind.retryable
        assert outcome.blames_config is (outcome is not Outcome.OK and not kind.retryable)
    assert {o for o, k in OUTCOMES.items() if k.retryable} == NOT_THE_CONFIGURATION
    assert not Outcome.PRUNED.kind.launched and Outcome.OOM.kind.launched
    assert Outcome.SLO_VIOLATION.measured and not Outcome.OOM.measured


def test_a_row_changed_in_the_table_changes_every_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    """HANG made an infrastructure fault in the table alone: retried, not blamed, and counted by the
    backoff towards its cap (no reader keeps a list of its own)."""
    monkeypatch.setitem(OUTCOMES, Outcome.HANG, OutcomeKind(retryable=True, infra=True))
    assert _verdict(Outcome.HANG).retryable and not Outcome.HANG.blames_config
    waits: list[float] = []
    backoff = InfraBackoff(max_failures=5, base_s=1.0, max_s=8.0, sleep=waits.append)
    backoff.after(Outcome.HANG, "stuck")
    backoff.after(Outcome.HANG, "stuck")
    assert backoff.failures == 2 and waits == [1.0, 2.0]
    backoff.after(Outcome.OOM)
    assert backoff.failures == 0


def test_the_store_decodes_the_configuration_a_row_measured() -> None:
    store = FakeStore()
    result = make_result()
    config = result.config.__class__(mem_fraction_static=0.7, cuda_graph=CudaGraph(max_bs=16))
    from dataclasses import replace

    record(store, replace(result, config=config))  # type: ignore[arg-type]
    (row,) = store.trials("glm5-v1")
    assert row.trial_config() == config
