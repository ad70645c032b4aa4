"""The store's contract, run against SqlStore on a SQLite file, on in-memory SQLite and the FakeStore.

Gate and benchmark results are the real types, their metrics computed by `compute_metrics`
from request records (tests/support/results.py), so a change of their shape shows here.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import timedelta, timezone
from pathlib import Path

import pandas as pd
import pytest
from support.fakes import FakeStore
from support.stored import (
    T0,
    make_bench,
    make_result,
    record,
    verdict,
)

from tuner.config import (
    Outcome,
    Phase,
)
from tuner.errors import ConfigError, StoreError
from tuner.store.capacity import CapacityRecord
from tuner.store.capacity_points import SearchKey, StoredPoint
from tuner.store.sql import SqlStore


@pytest.fixture(params=["file", "memory", "fake"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlStore]:
    if request.param == "fake":
        yield FakeStore(hostname="node-1", pid=4242)  # type: ignore[misc]  # a ResultStore, not a SqlStore
        return
    url = f"sqlite:///{tmp_path / 'experiments.db'}" if request.param == "file" else "sqlite://"
    with SqlStore(url, hostname="node-1", pid=4242) as opened:
        yield opened


class TestResultStoreContract:
    def test_full_result_round_trips(self, store: SqlStore) -> None:
        trial_id = record(store, trial_number=3)

        (got,) = store.trials("glm5-v1")
        assert got.id == trial_id
        assert (got.study, got.trial_number, got.attempt) == ("glm5-v1", 3, 1)
        assert got.outcome is Outcome.OK and got.failure_phase is None and got.exit_code is None
        assert got.feasible is True and got.config_hash == "h1" and got.params == {"mem": 0.85}
        assert got.config["cuda_graph"] == {"enabled": True, "max_bs": None, "bs": [1, 2, 4, 8]}
        assert got.config["flags"] == [["chunked-prefill-size", 8192], ["enable-metrics", True]]
        assert got.argv is not None and got.argv[-2:] == ("--api-key", "***")
        assert got.env == {"CUDA_VISIBLE_DEVICES": "0,1", "HF_TOKEN": "***"}
        assert got.launch is not None and got.launch["gpus"] == [0, 1] and got.launch["port"] == 30001
        assert [g["uuid"] for g in got.gpus] == ["GPU-aaa", "GPU-bbb"] and got.gpus[0]["driver"] == "580.65"
        assert (got.startup_s, got.kv_tokens, got.kv_tokens_log) == (212.5, 412_000, 411_904)
        assert got.captured_bs == (1, 2, 4, 8)
        assert got.min_free_mib_per_gpu == (2100, 1900) and got.min_free_mib == 1900
        assert (got.gate_verdict, got.gate_reason) == ("passed", None)
        assert got.gate_answers is not None and len(got.gate_answers) == 2
        assert {k: got.gate_answers[1][k] for k in ("prompt_name", "round", "text", "verdict")} == {
            "prompt_name": "arithmetic",
            "round": "sequential",
            "text": "42",
            "verdict": "passed",
        }
        assert got.gate == {
            "nan_log_lines": [],
            "burst_size": 16,
            "duration_s": 4.2,
            "model": None,
            "reference": None,
            "load": None,  # the burst's real concurrency (none ran in this result)
        }
        assert got.log_path == "/runs/t1/server.log" and got.log_excerpt == "server ready"
        assert got.timings["launch_s"] == 212.5
        assert got.started_at == T0 and got.started_at.tzinfo == timezone.utc
        assert got.finished_at == T0 + timedelta(minutes=5)
        assert (got.hostname, got.pid, got.confirm_of) == ("node-1", 4242, None)

    def test_objective_metrics_come_from_the_chosen_point(self, store: SqlStore) -> None:
        record(store)
        record(store, objective_point=0)
        default, first = store.trials("glm5-v1")

        assert default.objective_point == "c64" and first.objective_point == "c8"
        # c64: 4 requests x 256 tokens in 10 s; c8: 2 x 256 in 40 s
        assert default.metrics["output_throughput"] == pytest.approx(102.4)
        assert first.metrics["output_throughput"] == pytest.approx(12.8)
        assert default.metrics["ttft_p99_ms"] == pytest.approx(50.0)
        assert default.metrics["e2e_p99_ms"] == pytest.approx(900.0)
        assert default.client_bound is False
        assert default.bench is not None
        points = default.bench["points"]
        assert [p["point"]["concurrency"] for p in points] == [8, 64]
        assert [p["n_records"] for p in points] == [2, 4]
        assert points[0]["metrics"]["output_throughput"] == pytest.approx(12.8)

    def test_a_latency_over_no_request_is_missing_not_zero(self, store: SqlStore) -> None:
        record(store, make_result(bench=make_bench(n_records=3, fail_every=1)))
        (got,) = store.trials("glm5-v1")
        assert got.metrics["ttft_p99_ms"] is None and got.metrics["tpot_p50_ms"] is None
        assert got.metrics["output_throughput"] == 0.0

    def test_failed_trial_round_trips(self, store: SqlStore) -> None:
        record(store, make_result(Outcome.OOM))

        (got,) = store.trials("glm5-v1")
        assert got.outcome is Outcome.OOM and got.failure_phase is Phase.LAUNCH
        assert got.failure_message == "oom at start" and got.exit_code == 1
        assert got.log_excerpt == "CUDA out of memory"  # the failure's excerpt when the result has none
        assert got.feasible is False
        assert got.server is None and got.kv_tokens is None and got.captured_bs is None
        assert got.gate is None and got.gate_verdict is None and got.bench is None
        assert set(got.metrics.values()) == {None}

    def test_request_records_come_back_per_point(self, store: SqlStore) -> None:
        trial_id = record(store)

        frame = store.requests(trial_id)
        assert len(frame) == 6
        assert list(frame["point_label"]) == ["c8"] * 2 + ["c64"] * 4
        assert list(frame["index"]) == [0, 1, 0, 1, 2, 3]
        assert frame["itl_gaps_s"].iloc[0] == [0.010, 0.011, 0.012]
        assert frame["t_sent_s"].iloc[3] == pytest.approx(100.01)
        assert store.requests(trial_id + 1).empty

    def test_failed_requests_keep_their_error(self, store: SqlStore) -> None:
        bench = make_bench(n_records=10, fail_every=10)
        trial_id = record(store, make_result(bench=bench))

        frame = store.requests(trial_id)
        failed = frame[~frame["success"]]
        assert len(failed) == 1
        assert failed["error"].iloc[0] == "idle_timeout" and failed["error_text"].iloc[0] == "read timeout"
        assert pd.isna(failed["t_first_s"].iloc[0])

    def test_attempt_counts_runs_of_the_same_config(self, store: SqlStore) -> None:
        record(store)
        record(store)
        record(store, config_hash="h2")
        record(store, study="other")

        assert [t.attempt for t in store.trials("glm5-v1")] == [1, 2, 1]
        assert [t.attempt for t in store.trials("other")] == [1]

    def test_confirm_links(self, store: SqlStore) -> None:
        first = record(store)
        confirm = record(store, confirm_of=first, trial_number=None)

        by_id = {t.id: t for t in store.trials("glm5-v1")}
        assert by_id[confirm].confirm_of == first and by_id[first].confirm_of is None

    def test_the_row_says_what_the_verdict_says(self, store: SqlStore) -> None:
        record(store, verdict=verdict(Outcome.SLO_VIOLATION, feasible=False))
        (got,) = store.trials("glm5-v1")
        assert got.outcome is Outcome.SLO_VIOLATION and got.feasible is False

    def test_link_to_missing_trial_is_a_store_error(self, store: SqlStore) -> None:
        with pytest.raises(StoreError, match=f"experiments database {store.url[:8]}"):
            record(store, confirm_of=999)
        assert store.trials("glm5-v1") == ()  # the failed transaction left nothing behind

    def test_studies_are_listed_once_sorted(self, store: SqlStore) -> None:
        assert store.studies() == ()
        record(store, study="b")
        record(store, study="a")
        record(store, study="b")

        assert store.studies() == ("a", "b")

    def test_a_space_whose_study_is_not_stored_is_refused_never_replaced(self, store: SqlStore) -> None:
        record(store, study="a")
        assert store.resolve_study(None) == "a"  # no --space: the only study
        assert store.resolve_study(None, preferred="a") == "a"
        with pytest.raises(ConfigError, match=r"its study 'b-v1' is not in .*\(studies there: a;"):
            store.resolve_study(None, preferred="b-v1")

    def test_usable_from_another_thread(self, store: SqlStore) -> None:
        record(store)
        with ThreadPoolExecutor(max_workers=1) as pool:
            assert pool.submit(store.studies).result() == ("glm5-v1",)

    def test_capacity_runs_round_trip_per_study_oldest_first(self, store: SqlStore) -> None:
        run = CapacityRecord(
            study="glm5-v1", trial_number=3, row_id=7, config_hash="h", knob="request_rate",
            slos=("ttft_p99_ms<=2000",), capacity=4.5, outcome="ok",
            points=({"load": 4.5, "passed": True, "runs": 2, "medians": {"ttft_p99_ms": 900.0}},),
        )  # fmt: skip
        store.save_capacity(run)
        store.save_capacity(replace(run, capacity=None, outcome="oom", message="CUDA out of memory"))
        store.save_capacity(replace(run, study="other"))
        got = store.capacity("glm5-v1")
        assert [(r.capacity, r.outcome, r.message) for r in got] == [
            (4.5, "ok", None),
            (None, "oom", "CUDA out of memory"),
        ]
        assert got[0].points == run.points and got[0].slos == run.slos and got[0].created_at is not None
        assert store.capacity("absent") == ()

    def test_capacity_points_come_back_per_search_in_order(self, store: SqlStore) -> None:
        key = SearchKey(study="s", config_hash="h", run_key="first", search_key="request_rate|ttft")
        for load in (2.0, 8.0, 4.0):
            store.add_capacity_point(
                key, StoredPoint(load=load, values={"ttft_p99_ms": load}, completed=9, failed=0)
            )
        store.add_capacity_point(
            replace(key, run_key="repeat-1"),
            StoredPoint(load=1.0, values={}, completed=1, failed=1, died="oom"),
        )
        assert [p.load for p in store.capacity_points(key)] == [2.0, 8.0, 4.0]
        (died,) = store.capacity_points(replace(key, run_key="repeat-1"))
        assert died.died == "oom" and died.failed == 1
