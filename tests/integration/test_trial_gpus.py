"""No trial starts while a foreign process holds the GPUs it needs (policy fail / wait)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from tuner.config import Outcome
from tuner.engine import engine_for, probe_for
from tuner.session import TrialContext
from tuner.space.loader import config_from_params, load_space
from tuner.trial import run_trial

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _ctx(tmp: Path, policy: str) -> TrialContext:
    space = replace(load_space(ROOT / "search_spaces" / "tiny-fast-sim.yaml"), gpu_busy_policy=policy)
    engine = engine_for(space, state_root=tmp)
    return TrialContext(space=space, engine=engine, probe=probe_for(engine), log_dir=tmp / "logs")


def _foreign_holder(ctx: TrialContext) -> subprocess.Popen[bytes]:
    """A process that is not ours, published as holding 30 GiB on GPU 0."""
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    state = ctx.engine.gpu_state_dir
    assert state is not None
    (state / "procs").mkdir(parents=True, exist_ok=True)
    (state / "gpus.json").write_text(json.dumps({"gpus": [{"index": 0, "uuid": "GPU-x", "name": "sim",
                                                            "compute_capability": "9.0", "total_mib": 81559,
                                                            "driver": "sim"}]}))
    record = {"pid": holder.pid, "used_mib": {"0": 30720}}
    (state / "procs" / f"{holder.pid}.json").write_text(json.dumps(record))
    return holder


def test_policy_fail_refuses_to_launch_and_names_the_holder(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, "fail")
    holder = _foreign_holder(ctx)
    try:
        config = config_from_params(ctx.space, dict(ctx.space.baselines[0]))
        result = run_trial(config, ctx, label="busy")
    finally:
        holder.kill()
        holder.wait()
    assert result.outcome is Outcome.INFRA_ERROR
    assert result.server is None, "nothing may be launched onto busy GPUs"
    assert result.failure is not None and str(holder.pid) in result.failure.message


def test_policy_wait_launches_once_the_holder_is_gone(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, "wait")
    holder = _foreign_holder(ctx)
    timer = threading.Timer(1.0, holder.kill)
    timer.start()
    try:
        config = config_from_params(ctx.space, dict(ctx.space.baselines[0]))
        result = run_trial(config, ctx, label="wait")
    finally:
        timer.cancel()
        holder.kill()
        holder.wait()
    assert result.outcome is Outcome.OK, result.failure
    assert result.timings.wait_gpus_s >= 0.5


def test_a_client_bound_benchmark_is_not_trusted(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, "ignore")
    real = ctx.bench

    def saturated_client(*args, **kwargs):  # type: ignore[no-untyped-def]
        return replace(real(*args, **kwargs), client_bound=True, client_cpu_share=0.93)

    ctx = replace(ctx, bench=saturated_client)
    result = run_trial(config_from_params(ctx.space, dict(ctx.space.baselines[0])), ctx, label="bound")
    assert result.outcome is Outcome.INFRA_ERROR and not result.outcome.blames_config
    assert result.failure is not None and "93%" in result.failure.message
    assert result.bench is not None, "the measurement is kept for the record"


def test_a_launch_needing_more_gpus_than_given_is_refused_before_launch(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, "ignore")
    ctx = TrialContext(
        space=replace(ctx.space, gpus=(0,), fixed_flags=(("model-path", "/m"), ("tp-size", 2))),
        engine=ctx.engine,
        probe=ctx.probe,
        log_dir=ctx.log_dir,
    )
    result = run_trial(config_from_params(ctx.space, dict(ctx.space.baselines[0])), ctx, label="tp2")
    assert result.outcome is Outcome.BAD_FLAG and result.server is None
    assert result.failure is not None and "at least 2 GPUs" in result.failure.message
