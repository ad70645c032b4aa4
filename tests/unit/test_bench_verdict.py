"""Verdicts a misbehaving server must not fool (pure): failed shares, bad usage, the changed-space diff."""

from __future__ import annotations

import pytest
from support.results import make_bench

from tuner.bench.accumulate import StreamAccumulator, usage_problem
from tuner.bench.settings import Api
from tuner.bench.types import ErrorClass
from tuner.bench.verdict import failed_line, failed_problem
from tuner.bench.workload import RequestSpec
from tuner.metrics import METRICS, bench_values
from tuner.study.resume import space_changes


def _record(usage: bytes):
    acc = StreamAccumulator(Api.COMPLETIONS)
    acc.add(b'{"choices":[{"text":"x"}]}', 1.0)
    acc.add(b'{"choices":[],"usage":' + usage + b"}", 1.1)
    acc.add(b"[DONE]", 1.2)
    spec = RequestSpec(index=0, prompt=(1, 2), input_tokens=2, output_tokens=8)
    return acc.record(spec, label="c1", t_queued=0.0, t_sent=0.5, status=200, error=None)


@pytest.mark.parametrize(
    ("usage", "shown"),
    [
        (b'{"completion_tokens": -5}', "-5"),
        (b'{"completion_tokens": 1e30}', "1e+30"),
        (b'{"completion_tokens": "four"}', "'four'"),
        (b'{"completion_tokens": true}', "True"),
        (b'{"completion_tokens": 4, "prompt_tokens": -1}', "-1"),
    ],
)
def test_implausible_usage_fails_the_request_with_a_reason(usage: bytes, shown: str) -> None:
    rec = _record(usage)
    assert not rec.success and rec.error is ErrorClass.BAD_USAGE
    assert f" {shown} is not a plausible token count" in rec.error_text
    assert isinstance(rec.output_tokens, int) and 0 <= rec.output_tokens <= 8  # the bad count is not used


def test_plausible_usage_is_taken() -> None:
    rec = _record(b'{"completion_tokens": 7, "prompt_tokens": 2}')
    assert rec.success and rec.output_tokens == 7
    assert usage_problem("completion_tokens", 0) is None and usage_problem("x", 10_000_001)


def test_any_failed_request_fails_a_point_by_default_and_a_tolerated_share_passes() -> None:
    bench = make_bench(n_records=8, fail_every=4)  # 2 of 8 fail at c64
    problem = failed_problem(bench, 0.0)
    assert problem is not None and problem.startswith("2 of 8 requests failed at load point c64 (")
    assert failed_problem(bench, 0.25) is None and failed_problem(bench, 0.2) is not None
    line = failed_line(bench)
    assert line is not None and line.startswith("FAILED: 2 of 10 requests failed (")
    assert failed_line(make_bench(n_records=8)) is None


def test_failed_requests_are_metrics() -> None:
    values = bench_values(make_bench(n_records=8, fail_every=4).objective_metrics)
    assert values["failed_requests"] == 2.0 and values["failed_fraction"] == pytest.approx(0.25)
    assert METRICS["failed_requests"].direction is not None  # an SLO may bound it


def test_a_changed_space_shows_the_change_not_two_equal_truncations() -> None:
    prompts = ", ".join(f"p{i}" for i in range(40))
    before = f"gate: {{prompts: [{prompts}]}}\nparams:\n  - {{name: a, choices: [1, 2, 3]}}\n"
    after = before.replace("p37", "CHANGED").replace("[1, 2, 3]", "[1, 2, 4]")
    changes = space_changes(before, after)
    assert "params[0].choices[2]: 3 -> 4" in changes
    (prompt_change,) = [c for c in changes if c.startswith("gate.prompts")]
    assert "CHANGED" in prompt_change and "p37" in prompt_change


def test_an_older_database_gains_the_failed_request_columns(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import sqlite3

    from tuner.store.schema import SCHEMA_VERSION
    from tuner.store.sql import SqlStore

    url = f"sqlite:///{tmp_path / 'exp.db'}"
    SqlStore(url).close()
    con = sqlite3.connect(tmp_path / "exp.db")
    for column in ("failed_requests", "failed_fraction"):
        con.execute(f"ALTER TABLE tuner_trials DROP COLUMN {column}")
    con.execute("UPDATE tuner_schema SET version = 2")
    con.commit()
    con.close()
    SqlStore(url).close()  # opening migrates
    con = sqlite3.connect(tmp_path / "exp.db")
    columns = {row[1] for row in con.execute("PRAGMA table_info(tuner_trials)")}
    version = con.execute("SELECT version FROM tuner_schema").fetchone()[0]
    con.close()
    assert {"failed_requests", "failed_fraction"} <= columns and version == SCHEMA_VERSION
