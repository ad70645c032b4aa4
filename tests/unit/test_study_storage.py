"""Optuna set-up of a study: sampler choice, the worker lock beside the database."""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path

import pytest

from tuner.errors import ConfigError, StoreError
from tuner.space.loader import load_space
from tuner.study.storage import lock_path, make_sampler

ROOT = Path(__file__).resolve().parents[2]


def test_tpe_is_multivariate_and_grouped_by_default() -> None:
    space = load_space(ROOT / "search_spaces" / "glm5-nvfp4-sm120-sim.yaml")
    sampler = make_sampler(space)
    assert sampler.__class__.__name__ == "TPESampler"
    assert sampler._multivariate and sampler._group  # noqa: SLF001 - the settings the reference calls for


def test_gp_sampler_without_its_dependencies_is_a_config_error() -> None:
    space = load_space(ROOT / "search_spaces" / "tiny-fast-sim.yaml")
    gp = replace(space, sampler=space.sampler.model_copy(update={"kind": "gp"}))
    if importlib.util.find_spec("torch") and importlib.util.find_spec("scipy"):
        assert make_sampler(gp).__class__.__name__ == "GPSampler"
    else:
        with pytest.raises(ConfigError, match="sampler: gp needs"):
            make_sampler(gp)


def test_the_lock_lives_beside_a_sqlite_file_and_refuses_a_missing_directory(tmp_path: Path) -> None:
    assert lock_path(f"sqlite:///{tmp_path}/exp.db", tmp_path / "runs") == tmp_path / "exp.db.tuner-lock"
    assert lock_path("postgresql://u@h/db", tmp_path / "runs") == tmp_path / "runs" / ".ask.lock"
    with pytest.raises(StoreError, match="does not exist"):
        lock_path(f"sqlite:///{tmp_path}/missing/exp.db", tmp_path)


def test_the_state_attribute_says_what_complete_hides() -> None:
    from tuner.study.storage import state_label

    assert state_label("ok", True, False) == "ok"
    assert state_label("oom", False, False) == "FAILED: oom"
    assert state_label("slo_violation", False, False).startswith("INFEASIBLE: slo_violation")
    assert state_label("interrupted", False, True).startswith("FAILED: interrupted (not the configuration")
