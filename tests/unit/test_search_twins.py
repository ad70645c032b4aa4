"""Twins: configurations a launch has measured already, because the knobs they differ in could not
have mattered to its benchmark (tuner.search.twins)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import optuna
import pytest

from tuner.search import twins as twins_module
from tuner.search.sampler import _twins, space_candidates
from tuner.search.strategy import Seen
from tuner.search.twins import USAGE_BOUND, Loaded, twins_of, unbound
from tuner.space.loader import load_space

ROLES = {"fraction": "fraction", "graphs": "graphs", "pair": "backends", "cap": "running"}
CLIENTS = 32
PARAMS = [
    {"fraction": f, "graphs": g, "pair": p, "cap": c}
    for f in (0.7, 0.8, 0.9)
    for g in ("off", "max:16", "max:32", "max:64")
    for p in ("fa3/fa3", "triton/triton")
    for c in (16, 32, 64, None)
]
POOL = {0.7: 40_000, 0.8: 60_000, 0.9: 80_000}  # KV tokens per fraction, as the memory model predicts


def at(**params: object) -> int:
    return PARAMS.index({**PARAMS[0], **params})


def twins(launch: Loaded) -> set[int]:
    pools = [POOL[float(p["fraction"])] for p in PARAMS]  # type: ignore[arg-type]
    got = twins_of(PARAMS, ROLES, CLIENTS, [launch], pools)  # type: ignore[arg-type]
    return {i for i in range(len(PARAMS)) if got[i] == launch.index}


def launched(
    usage: float = 0.5, running: int = CLIENTS, retractions: int | None = 0, **params: object
) -> Loaded:
    index = at(**{"fraction": 0.8, "graphs": "max:64", "pair": "fa3/fa3", "cap": 64, **params})
    return Loaded(index=index, peak_running=running, peak_kv_usage=usage, retractions=retractions,
                  kv_pool=POOL[float(PARAMS[index]["fraction"])])  # type: ignore[arg-type]  # fmt: skip


def test_a_batch_no_limit_held_back_is_measured_for_every_limit_that_still_holds_it() -> None:
    launch = launched(usage=0.5)  # 30,000 of 60,000 tokens at the peak: 0.7's 40,000 hold it within 0.9
    got = twins(launch)
    same = {"pair": "fa3/fa3"}
    assert at(fraction=0.7, graphs="max:32", cap=32, **same) in got  # every limit still admits 32 clients
    assert at(fraction=0.9, graphs="max:64", cap=64, **same) in got
    assert at(fraction=0.8, graphs="max:16", cap=64, **same) not in got  # graphs no longer cover the batch
    assert at(fraction=0.8, graphs="off", cap=64, **same) not in got
    assert at(fraction=0.8, graphs="max:64", cap=16, **same) not in got  # the cap would hold it back
    assert at(fraction=0.8, graphs="max:64", cap=None, **same) not in got  # SGLang's own cap: unknown here
    assert at(fraction=0.8, graphs="max:64", cap=64, pair="triton/triton") not in got  # another kernel
    assert launch.index not in got


def test_a_fuller_pool_keeps_its_twins_to_fractions_whose_pool_holds_the_peak() -> None:
    got = twins(launched(usage=0.7))  # 42,000 tokens: 0.7's pool of 40,000 would fill past the bound
    assert at(fraction=0.7, graphs="max:64", pair="fa3/fa3", cap=64) not in got
    assert at(fraction=0.9, graphs="max:64", pair="fa3/fa3", cap=64) in got


def test_a_launch_something_held_back_has_no_twins() -> None:
    for launch in (
        launched(running=24),  # never ran all 32 clients at once
        launched(retractions=3),  # ran out of KV cache
        launched(retractions=None),  # retractions not known (log lines lost)
        launched(usage=USAGE_BOUND + 0.05),  # the pool nearly full: admission may have waited
        launched(cap=16, running=16),  # its own cap held the batch
    ):
        assert not unbound(launch, CLIENTS) and not twins(launch)
    assert not np.any(twins_of(PARAMS, ROLES, CLIENTS, [], [None] * len(PARAMS)) >= 0)


def test_with_the_option_a_batch_its_own_cap_held_is_measured_for_that_cap_with_other_limits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(twins_module, "CAPPED", True)
    launch = launched(cap=16, running=16, graphs="max:16")  # 16 of 32 clients: its cap held the batch
    got = twins(launch)
    same = {"pair": "fa3/fa3", "cap": 16}
    assert at(fraction=0.9, graphs="max:64", **same) in got  # graphs of 64 replay a batch of 16 alike
    assert at(fraction=0.8, graphs="off", **same) not in got
    assert at(fraction=0.8, graphs="max:16", pair="fa3/fa3", cap=32) not in got  # a larger batch would run
    assert not twins(launched(cap=16, running=12, graphs="max:16"))  # the cap was never reached


def test_a_study_reads_twins_from_its_trials_unless_its_objective_is_a_capacity_search() -> None:
    root = Path(__file__).resolve().parents[2] / "search_spaces"
    got = {}
    for name in ("glm5-nvfp4-sm120-sim.yaml", "glm5-nvfp4-sm120-capacity-sim.yaml"):
        space = load_space(root / name)
        found, _ = space_candidates(space)
        clients = max(lp.concurrency or 0 for lp in space.bench.load_points)
        attrs = {"bench_peak_running": clients, "bench_peak_kv_usage": 0.1, "bench_retractions": 0}
        attrs["kv_tokens"] = 10**6
        trial = optuna.trial.create_trial(value=100.0, user_attrs=attrs)
        seen = [Seen(index=0, log_first=4.6, second=None, feasible=True, trial=trial.number)]
        got[name] = _twins(space, found, [trial], seen, [10.0**6] * len(found.params))
    plain = got["glm5-nvfp4-sm120-sim.yaml"]
    assert plain is not None and np.any(plain == 0)  # the launch's fraction and graph twins
    assert got["glm5-nvfp4-sm120-capacity-sim.yaml"] is None  # its loads go past the clients
