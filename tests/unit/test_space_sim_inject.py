"""The space's table of `sim_inject` faults is the simulator's own (tuner.space may not import
tuner.sim): every key, every value one accepts the other accepts, every value one refuses the other
refuses."""

from __future__ import annotations

import pytest

import tuner.sim.args as simargs
from tuner.space.sim_inject import SIM_INJECT, sim_inject_problem

SAMPLES = [
    "0",
    "1",
    "2",
    "0.5",
    "1.5",
    "-1",
    "abc",
    "",
    "load",
    "capture",
    "later",
    "bench",
    "negative",
    "huge",
    "text",
    "1e3",
    "nan",
]


def test_the_same_keys() -> None:
    assert set(SIM_INJECT) == set(simargs._INJECT_TYPES)


@pytest.mark.parametrize("key", sorted(SIM_INJECT))
def test_what_the_space_accepts_the_simulator_accepts(key: str) -> None:
    for value in SAMPLES:
        item = f"{key}={value}"
        if sim_inject_problem(item) is None:
            simargs.split_sim_flags(["--sim-inject", item])  # raises SimFlagError if it disagrees


def test_unknown_keys_and_values_are_named() -> None:
    assert "unknown sim_inject key 'nope'" in (sim_inject_problem("nope=1") or "")
    assert "hang_at must be one of load, capture" in (sim_inject_problem("hang_at=later") or "")
    assert "http_error_rate must be a number 0..1" in (sim_inject_problem("http_error_rate=7") or "")
