"""The environment outcome: retried, never a rule, never the configuration's fault; a stop when it recurs."""

from __future__ import annotations

import io

import pytest

from tuner.config import NOT_THE_CONFIGURATION, CudaGraph, Outcome, TrialConfig
from tuner.errors import InfrastructureError
from tuner.search.evidence import Evidence, knobs_of
from tuner.search.rules import rules_from
from tuner.space.sections import Budget
from tuner.study.backoff import InfraBackoff

PROXY = (
    "the environment, not the configuration: a proxy answered instead of the server (set no_proxy for "
    "127.0.0.1) at warmup: AssertionError: res=<Response [502]>, res.text=''"
)


def test_the_environment_is_never_the_configurations_fault_nor_a_rule() -> None:
    assert not Outcome.ENVIRONMENT.blames_config
    assert Outcome.ENVIRONMENT in NOT_THE_CONFIGURATION
    cfg = TrialConfig(
        mem_fraction_static=0.9, cuda_graph=CudaGraph(max_bs=64), sparse_prefill_backend="fa3",
        sparse_decode_backend="fa3",
    )  # fmt: skip
    for stage in ("load", "capture", "serving", None):
        evidence = Evidence(trial=0, knobs=knobs_of(cfg), outcome=Outcome.ENVIRONMENT, stage=stage,
                            message=PROXY, backend="fa3", backend_role=None)  # fmt: skip
        assert rules_from(evidence) == ()


def test_the_same_environment_error_on_a_second_configuration_stops_the_run() -> None:
    slept: list[float] = []
    backoff = InfraBackoff.from_budget(Budget(max_infra_failures=10), slept.append)
    backoff.after(Outcome.ENVIRONMENT, PROXY, "cfg-a")
    backoff.after(Outcome.ENVIRONMENT, PROXY, "cfg-a")  # its retry: the same configuration
    assert len(slept) == 2  # paced like any infrastructure fault
    again = r"same environment error on 2 different configurations"
    with pytest.raises(InfrastructureError, match=again) as err:
        backoff.after(Outcome.ENVIRONMENT, PROXY.replace("at warmup", "at load"), "cfg-b")
    assert "\n" not in str(err.value) and "Response [502]" in str(err.value)


def test_different_environment_errors_or_other_outcomes_do_not_stop_it() -> None:
    backoff = InfraBackoff.from_budget(Budget(max_infra_failures=10), lambda s: None)
    backoff.after(Outcome.ENVIRONMENT, PROXY, "cfg-a")
    disk = "the environment, not the configuration: a disk or /dev/shm is full"
    backoff.after(Outcome.ENVIRONMENT, disk, "cfg-b")
    backoff.after(Outcome.CRASHED, PROXY, "cfg-c")  # a crash is the configuration's: not counted
    assert backoff.failures == 0


def test_the_live_display_counts_an_environment_failure_as_retried_not_done() -> None:
    from rich.console import Console

    from tuner.cli.display import RunDisplay
    from tuner.study.events import TrialEvent

    display = RunDisplay(budget=4, metric_names=("output_throughput",), console=Console(file=io.StringIO()))
    for n, outcome in enumerate((Outcome.ENVIRONMENT, Outcome.CRASHED)):
        event = TrialEvent(
            number=n,
            outcome=outcome,
            values=(),
            feasible=False,
            reused_from=None,
            message=PROXY,
            duration_s=1.0,
        )
        display.on_trial(event)
    assert display.done == 1
    assert "environment" in [e.outcome.value for e in display.history]
