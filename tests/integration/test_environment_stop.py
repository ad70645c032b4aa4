"""A study whose every launch fails for the machine's reason stops and says so, and learns nothing.

The simulator's warmup request is answered by a "proxy" (HTTP 502, no body), as when http_proxy
covers 127.0.0.1: SGLang logs the failed warmup and kills its own tree. No knob causes it, so the
trials are `environment` (retried, never a rule), and once the same error has failed a second,
different configuration (the study's second baseline, asked while the first one's retry waits)
the run stops with exit 3 and one line naming it.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from support.cli import tiny_space, tuner_in

pytestmark = pytest.mark.integration


def test_the_same_environment_error_on_two_configurations_stops_the_run(tmp_path: Path) -> None:
    space = tiny_space(tmp_path)
    inject = "  scenario: tiny-fast\n  sim_inject: [warmup_status=502]\n"
    text = space.read_text().replace("  scenario: tiny-fast\n", inject)
    budget = "budget:\n  n_trials: 6\n  max_infra_failures: 10\n  infra_backoff: 0.01s\n"
    text = text.replace("budget:\n  n_trials: 6\n", budget)
    second = "  - {mem-fraction-static: 0.7, cuda_graph: 8, chunked-prefill-size: 2048}\n"
    text = text.replace(
        "baselines:\n  - {mem-fraction-static: 0.8, cuda_graph: off, chunked-prefill-size: null}\n",
        "baselines:\n  - {mem-fraction-static: 0.8, cuda_graph: off, chunked-prefill-size: null}\n" + second,
    )
    space.write_text(text)
    db = tmp_path / "exp.db"
    done = tuner_in(tmp_path, "run", "--space", str(space), "--db", str(db), "--plain", timeout_s=300)
    assert done.returncode == 3, done.stderr
    stopped = [line for line in done.stderr.splitlines() if "same environment error" in line]
    assert len(stopped) == 1 and "Response [502]" in stopped[0], done.stderr
    with sqlite3.connect(db) as con:
        outcomes = {row[0] for row in con.execute("SELECT outcome FROM tuner_trials")}
    assert outcomes == {"environment"}, outcomes
    assert "infrastructure failures in a row" not in done.stderr  # stopped by the recurrence, not the cap
