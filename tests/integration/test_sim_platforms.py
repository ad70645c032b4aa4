"""A whole trial on each device platform the simulator speaks: the tuner reads each runtime's words.

The scenario is tiny-fast with its `platform` set; an over-committed fraction makes the serving
loop run out of device memory, a device fault after the first request crashes it, and weights
larger than the card make the load fail, a kernel with no code for the device makes it
unsupported: each must come back with the class the failure is, in CUDA's, HIP's, torch_npu's,
XPU's and MUSA's words alike.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from tuner.config import Outcome
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


def _trial(ctx: TrialContext, **params: object):  # type: ignore[no-untyped-def]
    base = dict(ctx.space.baselines[0])
    return run_trial(config_from_params(ctx.space, {**base, **params}), ctx, label="platform")


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
