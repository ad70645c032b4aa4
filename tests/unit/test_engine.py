"""engine_for: the one place that picks launcher, target release and option table."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tuner.engine import SIM_STATE_ENV, engine_for
from tuner.errors import ConfigError
from tuner.space.loader import load_space

ROOT = Path(__file__).resolve().parents[2]


def _fake_sglang(tmp: Path, version: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make `importlib.metadata.version('sglang')` answer `version` in subprocesses."""
    dist = tmp / "site" / f"sglang-{version}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp / "site"))


def test_sim_engine_launches_the_stand_in_with_its_scenario_and_release(tmp_path: Path) -> None:
    space = load_space(ROOT / "search_spaces" / "glm5-nvfp4-sm120-sim.yaml")
    engine = engine_for(space, state_root=tmp_path)
    assert engine.launcher[1:] == ("-m", "tuner.sim", "--sim-scenario", "glm5-nvfp4-sm120",
                                   "--sim-sglang-version", "0.5.9")
    assert dict(engine.env)[SIM_STATE_ENV] == str((tmp_path / "gpu-state").resolve())
    assert engine.table.find("--nsa-decode-backend") is not None
    checked = engine_for(space, state_root=None, sglang_version="0.5.23")
    assert checked.env == () and checked.sglang_version == "0.5.23"
    assert checked.table.find("--nsa-decode-backend") is None


def test_real_engine_needs_sglang_installed_to_launch_but_not_to_validate(tmp_path: Path) -> None:
    space = load_space(ROOT / "search_spaces" / "glm5-nvfp4-sm120.yaml")
    with pytest.raises(ConfigError, match="SGLang is not installed"):
        engine_for(space, state_root=tmp_path)
    engine = engine_for(space, state_root=None)
    assert engine.launcher[1:] == ("-m", "sglang.launch_server") and engine.sglang_version == "0.5.9"


def test_installed_release_must_match_the_pinned_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_sglang(tmp_path, "0.5.23", monkeypatch)
    space = load_space(ROOT / "search_spaces" / "glm5-nvfp4-sm120.yaml")
    with pytest.raises(ConfigError, match=r"targets SGLang 0\.5\.9 but .* has SGLang 0\.5\.23"):
        engine_for(space, state_root=tmp_path)
    auto = engine_for(replace(space, sglang_version="auto"), state_root=tmp_path)
    assert auto.sglang_version == "0.5.23"

