"""Optuna set-up of a study: sampler choice, the worker lock beside the database."""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path

import pytest

from tuner.errors import ConfigError, StoreError
from tuner.sglang.process import HOSTNAME_ENV, host_name
from tuner.space.loader import load_space
from tuner.space.sections import WorkerSettings
from tuner.store.lock import AdvisoryLock, advisory_key
from tuner.study.storage import lock_path, make_sampler, make_storage, worker_lock

ROOT = Path(__file__).resolve().parents[2]


def test_the_structured_sampler_is_the_default_and_tpe_is_multivariate_and_grouped() -> None:
    space = load_space(ROOT / "search_spaces" / "glm5-nvfp4-sm120-sim.yaml")
    assert make_sampler(space).__class__.__name__ == "StructuredSampler"
    tpe = replace(space, sampler=space.sampler.model_copy(update={"kind": "tpe"}))
    sampler = make_sampler(tpe)
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


def test_a_server_url_gets_a_lock_in_the_database_and_sqlite_a_lock_file(tmp_path: Path) -> None:
    assert worker_lock(f"sqlite:///{tmp_path}/exp.db", tmp_path, "s-v1") == tmp_path / "exp.db.tuner-lock"
    pytest.importorskip("psycopg")
    lock = worker_lock("postgresql+psycopg://u@h/db", tmp_path, "s-v1")  # nothing connects yet
    assert isinstance(lock, AdvisoryLock) and lock.key == advisory_key("s-v1")
    lock.close()


def test_advisory_keys_are_stable_signed_64_bit_and_per_study() -> None:
    key = advisory_key("glm5-v1")
    assert key == advisory_key("glm5-v1") != advisory_key("glm5-v2")
    assert -(2**63) <= key < 2**63


def test_the_host_identity_can_be_set_per_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(HOSTNAME_ENV, "node-7")
    assert host_name() == "node-7"
    monkeypatch.delenv(HOSTNAME_ENV)
    assert host_name() and host_name() != "node-7"


def test_heartbeat_settings_reach_optunas_storage(tmp_path: Path) -> None:
    workers = WorkerSettings.model_validate({"heartbeat": "2.5s", "grace": "1m", "retries": 2})
    storage = make_storage(f"sqlite:///{tmp_path}/exp.db", workers)
    assert (storage.heartbeat_interval, storage.grace_period) == (3, 60)
    callback = storage.heartbeat_stale_trial_callback
    assert callback is not None and callback._max_retry == 2  # noqa: SLF001
    storage.remove_session()
    default = WorkerSettings()
    assert (default.heartbeat_s, default.grace_s, default.retries) == (60.0, 900.0, 1)


def test_the_lock_file_is_gone_once_no_worker_holds_it(tmp_path: Path) -> None:
    from tuner.study.storage import ask_lock

    lock = tmp_path / "exp.db.tuner-lock"
    with ask_lock(lock):
        assert lock.exists()
    assert not lock.exists()
    with ask_lock(lock):  # and it is made again by the next ask
        assert lock.exists()
    assert list(tmp_path.iterdir()) == []


def _count_under_lock(lock: Path, counter: Path, times: int) -> None:
    from tuner.study.storage import ask_lock

    for _ in range(times):
        with ask_lock(lock):
            value = int(counter.read_text())
            counter.write_text(str(value + 1))


def test_workers_that_remove_the_lock_file_still_exclude_each_other(tmp_path: Path) -> None:
    import multiprocessing

    lock, counter = tmp_path / "exp.db.tuner-lock", tmp_path / "count"
    counter.write_text("0")
    ctx = multiprocessing.get_context("fork")
    workers = [ctx.Process(target=_count_under_lock, args=(lock, counter, 60)) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    assert [w.exitcode for w in workers] == [0, 0, 0, 0]
    assert int(counter.read_text()) == 240  # no read-modify-write was interleaved
    assert not lock.exists()
