"""A whole trial on each device platform the simulator speaks: the tuner reads each runtime's words.

The scenario is tiny-fast with its `platform` set; an over-committed fraction makes the serving
loop run out of device memory, a device fault after the first request crashes it, and weights
larger than the card make the load fail, a kernel with no code for the device makes it
unsupported: each must come back with the class the failure is, in CUDA's, HIP's, torch_npu's,
XPU's and MUSA's words alike. A port another process took since the tuner picked it is picked
again: parallel workers choose ports on their own.
"""

from __future__ import annotations

import socket
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from tuner import session
from tuner.config import LaunchSpec, Outcome, TrialConfig
from tuner.engine import engine_for, probe_for
from tuner.session import TrialContext
from tuner.sim.scenario import PLATFORMS
from tuner.space.loader import config_from_params, load_space
from tuner.trial import run_trial

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
WORDS = {"cuda": "CUDA", "rocm": "HIP", "ascend": "NPU", "xpu": "XPU", "musa": "MUSA"}


def _ctx(
    tmp: Path,
    platform: str,
    *,
    weights_mib: int | None = None,
    inject: tuple[str, ...] = (),
    backend: str = "ok",
) -> TrialContext:
    raw = yaml.safe_load((ROOT / "tuner" / "sim" / "scenarios" / "tiny-fast.yaml").read_text())
    raw["platform"] = platform
    raw["backends"] = {"default": backend}
    if weights_mib is not None:
        raw["model"]["weights_mib_per_gpu"] = weights_mib
    scenario = tmp / f"tiny-{platform}.yaml"
    scenario.write_text(yaml.safe_dump(raw))
    space = load_space(ROOT / "search_spaces" / "tiny-fast-sim.yaml")
    engine_spec = space.engine.model_copy(update={"scenario": str(scenario), "sim_inject": inject})
    space = replace(space, engine=engine_spec)
    engine = engine_for(space, state_root=tmp)
    return TrialContext(space=space, engine=engine, probe=probe_for(engine), log_dir=tmp / "logs")


def _config(ctx: TrialContext, **params: object) -> TrialConfig:
    """The space's first baseline, with `params` changed."""
    return config_from_params(ctx.space, {**dict(ctx.space.baselines[0]), **params})


def _trial(ctx: TrialContext, **params: object):  # type: ignore[no-untyped-def]
    return run_trial(_config(ctx, **params), ctx, label="platform")


@pytest.mark.parametrize("platform", PLATFORMS)
def test_weights_larger_than_the_card_are_oom_at_load(tmp_path: Path, platform: str) -> None:
    result = _trial(_ctx(tmp_path, platform, weights_mib=90_000))
    assert result.outcome is Outcome.OOM, result.failure
    assert result.failure is not None and f"{WORDS[platform]} out of memory" in result.failure.message
    assert result.failure.stage == "load"


@pytest.mark.parametrize("platform", PLATFORMS)
def test_a_device_fault_under_load_is_a_crash_in_any_runtimes_words(tmp_path: Path, platform: str) -> None:
    result = _trial(_ctx(tmp_path, platform, inject=("crash_after_requests=1",)))
    assert result.outcome in (Outcome.CRASHED, Outcome.CRASHED_DURING_BENCH), result.failure
    assert result.failure is not None and result.failure.stage == "serving"


@pytest.mark.parametrize("platform", ["cuda", "rocm", "musa"])
def test_a_kernel_with_no_code_for_the_device_is_unsupported(tmp_path: Path, platform: str) -> None:
    result = _trial(_ctx(tmp_path, platform, backend="unsupported"))
    assert result.outcome is Outcome.UNSUPPORTED, result.failure


def test_a_port_taken_between_the_pick_and_the_launch_is_picked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Parallel workers pick ports on their own: one taken since its pick is not the configuration's fault."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    taken = int(holder.getsockname()[1])
    picks = iter([taken])
    real_pick = session.free_port
    monkeypatch.setattr(session, "free_port", lambda host="127.0.0.1": next(picks, None) or real_pick(host))
    try:
        ctx = _ctx(tmp_path, "cuda")
        config = _config(ctx)
        prepared = session.prepare_launch(config, ctx, label="port")
        assert isinstance(prepared, LaunchSpec) and prepared.port == taken
        result = run_trial(config, ctx, label="port", prepared=prepared)
    finally:
        holder.close()
    assert result.outcome is Outcome.OK, result.failure
    assert result.launch is not None and result.launch.port != taken
    assert result.launch.key == prepared.key, "the port is not part of what the trial measures"
