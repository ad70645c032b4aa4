"""SqlStore on real SQLite files: URLs, pragmas, Optuna in the same file, schema versions, secrets, errors."""

from __future__ import annotations

import multiprocessing
import pickle
import sqlite3
import time
from dataclasses import replace
from multiprocessing.queues import Queue
from pathlib import Path

import optuna
import pandas as pd
import pytest
from test_store_contract import make_bench, make_launch, make_result, record

from tuner.config import Failure, Outcome, Phase, TrialConfig
from tuner.errors import ConfigError, StoreError
from tuner.store import schema as store_schema
from tuner.store import sql as store_module
from tuner.store.codec import redact_argv, redact_env
from tuner.store.connect import database_url, make_engine, mask_url, optuna_storage_kwargs
from tuner.store.sql import SqlStore


def file_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'experiments.db'}"


def pragma(path: Path, name: str) -> object:
    con = sqlite3.connect(path)
    try:
        return con.execute(f"PRAGMA {name}").fetchone()[0]
    finally:
        con.close()


# --- pure functions -------------------------------------------------------------------------------------


def test_database_url_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert database_url(None) == f"sqlite:///{tmp_path}/experiments.db"
    assert database_url("runs/x.db") == f"sqlite:///{tmp_path}/runs/x.db"
    assert database_url("/data/x.db") == "sqlite:////data/x.db"
    assert database_url("sqlite:///rel.db") == f"sqlite:///{tmp_path}/rel.db"  # same file from any cwd
    assert database_url("sqlite:////abs/x.db") == "sqlite:////abs/x.db"
    assert database_url("sqlite://") == "sqlite://"
    assert database_url("postgresql+psycopg://u:pw@db/tuner") == "postgresql+psycopg://u:pw@db/tuner"
    assert database_url("postgresql://u:pw@db/tuner") == "postgresql+psycopg://u:pw@db/tuner"  # psycopg 3


def test_mask_url_hides_the_password() -> None:
    masked = mask_url("postgresql+psycopg://tuner:hunter2@db.internal:5432/exp")
    assert "hunter2" not in masked and "db.internal" in masked


def test_redact_argv_hides_values_of_secret_flags_only() -> None:
    argv = (
        "--api-key",
        "a1",
        "--admin-api-key=a2",
        "--hf-token",
        "a3",
        "--ssl-keyfile-password",
        "a4",
        "--max-total-tokens",
        "9000",
        "--speculative-token-map",
        "/m.json",
        "--port",
        "1",
        "--api-key",
    )
    assert redact_argv(argv) == (
        "--api-key",
        "***",
        "--admin-api-key=***",
        "--hf-token",
        "***",
        "--ssl-keyfile-password",
        "***",
        "--max-total-tokens",
        "9000",
        "--speculative-token-map",
        "/m.json",
        "--port",
        "1",
        "--api-key",
    )


def test_redact_env_hides_secret_named_variables_only() -> None:
    env = {
        "HF_TOKEN": "x",
        "OPENAI_API_KEY": "x",
        "AWS_SECRET_ACCESS_KEY": "x",
        "DB_PASSWORD": "x",
        "TOKENIZERS_PARALLELISM": "false",
        "CUDA_VISIBLE_DEVICES": "0",
        "SGLANG_MAX_TOKENS": "8",
    }
    assert redact_env(env) == {
        "HF_TOKEN": "***",
        "OPENAI_API_KEY": "***",
        "AWS_SECRET_ACCESS_KEY": "***",
        "DB_PASSWORD": "***",
        "TOKENIZERS_PARALLELISM": "false",
        "CUDA_VISIBLE_DEVICES": "0",
        "SGLANG_MAX_TOKENS": "8",
    }
    assert redact_env([("HF_TOKEN", "x")]) == {"HF_TOKEN": "***"}


def test_optuna_kwargs_are_picklable_and_per_backend(tmp_path: Path) -> None:
    kwargs = optuna_storage_kwargs(file_url(tmp_path))
    con = pickle.loads(pickle.dumps(kwargs))["creator"]()  # workers pickle RDBStorage
    try:
        assert con.execute("PRAGMA busy_timeout").fetchone()[0] == 60_000
        assert con.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    finally:
        con.close()
    assert optuna_storage_kwargs("postgresql+psycopg://u:p@h/db")["connect_args"]["keepalives"] == 1


# --- SQLite files ---------------------------------------------------------------------------------------


def test_engine_sets_wal_busy_timeout_and_synchronous(tmp_path: Path) -> None:
    engine = make_engine(file_url(tmp_path))
    try:
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 60_000
            assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1
    finally:
        engine.dispose()
    assert pragma(tmp_path / "experiments.db", "journal_mode") == "wal"  # persistent in the file


@pytest.mark.parametrize("store_first", [True, False])
def test_optuna_and_tuner_tables_share_one_file(tmp_path: Path, store_first: bool) -> None:
    url = file_url(tmp_path)
    if store_first:
        SqlStore(url).close()
    storage = optuna.storages.RDBStorage(url, engine_kwargs=optuna_storage_kwargs(url))
    study = optuna.create_study(
        study_name="glm5-v1",
        storage=storage,
        directions=["maximize", "maximize"],
        sampler=optuna.samplers.RandomSampler(seed=0),
    )
    study.optimize(lambda t: (t.suggest_float("mem", 0.7, 0.9), 1.0), n_trials=3)

    with SqlStore(url) as store:
        for trial in study.trials:
            record(store, trial_number=trial.number, params=trial.params)
        assert [t.trial_number for t in store.trials("glm5-v1")] == [0, 1, 2]

    study.optimize(lambda t: (t.suggest_float("mem", 0.7, 0.9), 1.0), n_trials=1)
    reloaded = optuna.load_study(study_name="glm5-v1", storage=url)
    assert len(reloaded.trials) == 4
    path = tmp_path / "experiments.db"
    con = sqlite3.connect(path)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert con.execute("SELECT version_num FROM alembic_version").fetchall() == [("v3.2.0.a",)]
    finally:
        con.close()
    assert {"trials", "alembic_version", "tuner_trials", "tuner_requests", "tuner_schema"} <= tables
    assert pragma(path, "journal_mode") == "wal"


def test_reopened_file_keeps_trials_and_attempts(tmp_path: Path) -> None:
    with SqlStore(file_url(tmp_path)) as store:
        record(store)
    with SqlStore(file_url(tmp_path)) as store:
        record(store)
        assert [t.attempt for t in store.trials("glm5-v1")] == [1, 2]


def set_schema_version(tmp_path: Path, version: int) -> None:
    con = sqlite3.connect(tmp_path / "experiments.db")
    with con:
        con.execute("UPDATE tuner_schema SET version = ?", (version,))
    con.close()


def test_newer_schema_is_refused_by_name(tmp_path: Path) -> None:
    SqlStore(file_url(tmp_path)).close()
    newer = store_schema.SCHEMA_VERSION + 1
    set_schema_version(tmp_path, newer)

    with pytest.raises(StoreError, match=rf"experiments\.db: tuner schema version {newer} is newer"):
        SqlStore(file_url(tmp_path))


def test_older_schema_is_migrated_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    SqlStore(file_url(tmp_path)).close()
    set_schema_version(tmp_path, 0)
    calls: list[int] = []
    monkeypatch.setitem(store_schema.MIGRATIONS, 0, lambda conn: calls.append(0))

    SqlStore(file_url(tmp_path)).close()
    SqlStore(file_url(tmp_path)).close()

    assert calls == [0]
    con = sqlite3.connect(tmp_path / "experiments.db")
    assert con.execute("SELECT version FROM tuner_schema").fetchall() == [(store_schema.SCHEMA_VERSION,)]
    con.close()


def test_version_1_attempts_shared_by_racing_writers_are_renumbered(tmp_path: Path) -> None:
    with SqlStore(file_url(tmp_path)) as store:
        for _ in range(3):
            record(store, config_hash="h1")
        record(store, config_hash="h2")
    con = sqlite3.connect(tmp_path / "experiments.db")
    with con:  # what version 1 allowed: two rows of one configuration with the same attempt
        con.execute(f"DROP INDEX {store_schema.ATTEMPT_UNIQUE}")
        con.execute("UPDATE tuner_trials SET attempt = 1")
        con.execute("UPDATE tuner_schema SET version = 1")
    con.close()

    with SqlStore(file_url(tmp_path)) as store:
        assert [(t.config_hash, t.attempt) for t in store.trials("glm5-v1")] == [
            ("h1", 1), ("h1", 2), ("h1", 3), ("h2", 1)
        ]
        record(store, config_hash="h1")
        assert store.trials("glm5-v1")[-1].attempt == 4
    con = sqlite3.connect(tmp_path / "experiments.db")
    indexes = {row[1] for row in con.execute("PRAGMA index_list(tuner_trials)")}
    con.close()
    assert store_schema.ATTEMPT_UNIQUE in indexes


def test_secrets_never_reach_the_file(tmp_path: Path) -> None:
    api_key, hf_token = "sk-live-7f3a9c2e", "hf_Zq81LmNoPq"
    launch = make_launch(api_key=api_key, hf_token=hf_token)
    echoed = f"server_args=ServerArgs(api_key='{api_key}', ...) token {hf_token}"
    result = make_result(
        launch=replace(launch, argv=(*launch.argv, f"--admin-api-key={api_key}x")),
        config=TrialConfig(flags=(("api-key", api_key),)),
        log_excerpt=echoed,
        failure=Failure(outcome=Outcome.CRASHED, phase=Phase.BENCH, message=echoed, excerpt=echoed),
    )
    with SqlStore(file_url(tmp_path)) as store:
        record(store, result, params={"api_key": api_key})
        (got,) = store.trials("glm5-v1")

    blob = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("experiments.db"))
    assert api_key.encode() not in blob and hf_token.encode() not in blob
    assert got.argv is not None and got.argv[-1] == "--admin-api-key=***"
    assert "***" in got.log_excerpt and got.env is not None and got.env["HF_TOKEN"] == "***"


def test_bulk_request_rows(tmp_path: Path) -> None:
    bench = make_bench(n_records=10_000, fail_every=10)
    with SqlStore(file_url(tmp_path)) as store:
        start = time.perf_counter()
        trial_id = record(store, make_result(bench=bench))
        elapsed = time.perf_counter() - start
        frame = store.requests(trial_id)
    print(f"\nrecorded a trial with {len(frame)} request rows in {elapsed * 1000:.0f} ms")

    assert len(frame) == 10_002
    con = sqlite3.connect(tmp_path / "experiments.db")
    rows = con.execute(
        "SELECT count(*), sum(success), count(ttft_ms), max(seq) FROM tuner_requests "
        "WHERE point_label = 'c64'"
    ).fetchone()
    con.close()
    assert rows == (10_000, 9_000, 9_000, 9_999)


def _record_many(url: str, n: int, errors: Queue[str]) -> None:
    try:
        with SqlStore(url) as store:
            for i in range(n):
                record(store, make_result(bench=make_bench(n_records=50)), trial_number=i)
    except Exception as exc:
        errors.put(repr(exc))
        raise


def test_workers_starting_together_share_one_new_file(tmp_path: Path) -> None:
    url = file_url(tmp_path)
    context = multiprocessing.get_context("fork")
    errors: Queue[str] = context.Queue()
    workers = [context.Process(target=_record_many, args=(url, 5, errors)) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)

    failures = [errors.get(timeout=5) for w in workers if w.exitcode != 0]
    assert failures == []  # nobody lost the race to create the tables or to take the write lock
    with SqlStore(url) as store:
        assert sorted(t.attempt for t in store.trials("glm5-v1")) == list(range(1, 21))


def test_real_gate_and_bench_types_fill_the_columns(tmp_path: Path) -> None:
    from tuner.bench.settings import LoadPoint
    from tuner.bench.types import (
        BenchMetrics,
        BenchResult,
        ErrorClass,
        LatencyStats,
        LoadPointResult,
        OutputSource,
        RequestRecord,
    )
    from tuner.gate.run import GateAnswer, GateResult, GateRound, GateVerdict

    def stats(median_ms: float, p99_ms: float, count: int = 10) -> LatencyStats:
        return LatencyStats(mean_ms=median_ms, median_ms=median_ms, p99_ms=p99_ms, count=count)

    metrics = BenchMetrics(
        duration_s=10.0,
        completed=10,
        failed=1,
        errors=(("idle_timeout", 1),),
        total_input_tokens=1000,
        total_input_tokens_server=None,
        total_output_tokens=2560,
        request_throughput=1.0,
        input_throughput=100.0,
        input_throughput_server=None,
        output_throughput=256.0,
        total_throughput=356.0,
        ttft=stats(40.0, 90.0),
        tpot=stats(12.0, 20.0),
        itl=stats(0.0, 0.0, count=0),
        e2e=stats(3000.0, 3500.0),
        max_itl_ms=0.0,
        queue=stats(1.0, 2.0),
        concurrency=3.0,
        max_output_tokens_per_s=300.0,
        max_concurrent_requests=4,
        steady_output_throughput=None,
        steady_window_s=None,
        tokens_per_content_event=1.0,
        zero_gap_fraction=None,
        output_tokens_source="usage",
    )
    ok = RequestRecord(
        load_point="c4",
        index=0,
        input_tokens_declared=100,
        input_tokens_server=101,
        output_tokens_requested=256,
        output_tokens=256,
        output_source=OutputSource.USAGE,
        success=True,
        t_queued_s=1.0,
        t_sent_s=1.0,
        t_first_s=1.04,
        t_end_s=4.0,
        itl_gaps_s=(0.01, 0.012),
    )
    failed = replace(ok, index=1, success=False, error=ErrorClass.IDLE_TIMEOUT, t_first_s=None, t_end_s=None)
    bench = BenchResult(
        points=(
            LoadPointResult(
                point=LoadPoint(concurrency=4),
                metrics=metrics,
                records=(ok, failed),
                warmup_requests=4,
                flushed=True,
            ),
        ),
        client_cpu_share=0.2,
        loop_lag_p99_ms=None,
        duration_s=12.0,
    )
    answer = GateAnswer(
        prompt_name="capital", round=GateRound.SEQUENTIAL, index=0, text="Paris", verdict=GateVerdict.PASSED
    )
    gate = GateResult(verdict=GateVerdict.PASSED, reason=None, answers=(answer,), duration_s=3.0)

    with SqlStore(file_url(tmp_path)) as store:
        trial_id = record(store, make_result(gate=gate, bench=bench))
        (got,) = store.trials("glm5-v1")
        frame = store.requests(trial_id)

    assert got.metrics["output_throughput"] == 256.0 and got.metrics["concurrency"] == 3.0
    assert (got.metrics["ttft_p50_ms"], got.metrics["ttft_p99_ms"]) == (40.0, 90.0)
    assert (got.metrics["e2e_p50_ms"], got.metrics["tpot_p99_ms"]) == (3000.0, 20.0)
    assert got.metrics["itl_p50_ms"] is None  # statistics over no gaps are missing, not 0 ms
    assert got.objective_point == "c4" and got.gate_verdict == "passed"
    assert got.gate_answers is not None and got.gate_answers[0]["round"] == "sequential"
    assert pd.isna(frame["error"].iloc[0]) and frame["error"].iloc[1] == "idle_timeout"
    assert frame["itl_gaps_s"].iloc[0] == [0.01, 0.012]
    con = sqlite3.connect(tmp_path / "experiments.db")
    columns = con.execute(
        "SELECT success, ttft_ms, e2e_ms, input_tokens, error FROM tuner_requests ORDER BY seq"
    ).fetchall()
    con.close()
    assert (
        columns[0][0] == 1 and columns[0][1] == pytest.approx(40.0) and columns[0][2] == pytest.approx(3000.0)
    )
    assert columns[0][3] == 100 and columns[1] == (0, None, None, 100, "idle_timeout")


# --- errors ---------------------------------------------------------------------------------------------


def test_missing_directory_is_a_usage_error_naming_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/no/such/dir/experiments.db"
    with pytest.raises(ConfigError, match=r"no/such/dir does not exist"):
        SqlStore(url)
    assert not (tmp_path / "no").exists()


def test_parent_that_is_a_file_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("")
    with pytest.raises(ConfigError, match="plain is not a folder"):
        SqlStore(f"sqlite:///{tmp_path}/plain/experiments.db")


def test_unreachable_server_is_a_store_error_without_the_password() -> None:
    url = "postgresql+psycopg://tuner:hunter2@127.0.0.1:9/exp?connect_timeout=2"
    with pytest.raises(StoreError, match="experiments database postgresql") as info:
        SqlStore(url)
    assert "hunter2" not in str(info.value)


def test_lock_held_too_long_is_a_store_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with SqlStore(file_url(tmp_path)):
        pass
    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_S", 0.1)
    holder = sqlite3.connect(tmp_path / "experiments.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with SqlStore(file_url(tmp_path)) as store:  # opening an existing store needs no write lock
            assert store.studies() == ()
            with pytest.raises(StoreError, match=r"experiments\.db: cannot record .* database is locked"):
                record(store)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
