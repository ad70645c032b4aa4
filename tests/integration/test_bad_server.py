"""Verdicts a misbehaving server must not fool, on whole trials of the simulator with injected faults.

HTTP 500 on half the benchmark requests, implausible usage counts, a server frozen (SIGSTOP) in the
benchmark, `bench --url` against such a server, and GPU indices the node does not have.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tuner.cli import main
from tuner.config import Outcome
from tuner.session import trial_session
from tuner.space.loader import config_from_params, load_space
from tuner.trial import run_trial

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TINY = (ROOT / "search_spaces" / "tiny-fast-sim.yaml").read_text()


def _space(tmp: Path, inject: str, **edits: str) -> Path:
    text = TINY.replace("  scenario: tiny-fast\n", f'  scenario: tiny-fast\n  sim_inject: ["{inject}"]\n')
    for old, new in edits.items():
        assert old in text, old
        text = text.replace(old, new)
    path = tmp / "space.yaml"
    path.write_text(text.replace("log_dir", "x") + f"log_dir: {tmp / 'runs'}\n")
    return path


def _trial(path: Path):
    space = load_space(path)
    with trial_session(space) as ctx:
        return run_trial(config_from_params(space, dict(space.baselines[0])), ctx, label="t")


def test_half_the_requests_failing_is_bench_errors_not_a_fast_server(tmp_path: Path) -> None:
    result = _trial(_space(tmp_path, "http_error_rate=0.5"))
    assert result.outcome is Outcome.BENCH_ERRORS, result.failure
    assert result.failure is not None and "4 of 8 requests failed at load point c4 (http_status 4" in (
        result.failure.message
    )


def test_implausible_usage_fails_the_request_with_a_reason(tmp_path: Path) -> None:
    """Every kind (negative, huge, text) is in the unit tests; one whole trial here."""
    kind, shown = "text", "'four'"
    result = _trial(_space(tmp_path, f"bad_usage={kind}"))
    assert result.outcome is Outcome.BENCH_FAILED, result.failure
    assert result.failure is not None
    assert f"bad_usage 8; first: usage.completion_tokens {shown} is not a plausible" in result.failure.message


def test_a_server_frozen_in_the_benchmark_is_a_hang(tmp_path: Path) -> None:
    fast = {
        "idle_read: 5s": "idle_read: 0.5s",
        "first_byte: 5s": "first_byte: 0.5s",
        "sigint_grace: 2s": "sigint_grace: 0.3s",
        "sigterm_grace: 2s": "sigterm_grace: 0.3s",
    }
    result = _trial(_space(tmp_path, "freeze_at=bench", **fast))
    assert result.outcome is Outcome.HANG, result.failure
    assert result.failure is not None and "no progress on any open request for 1 s" in result.failure.message
    assert result.bench is not None and result.bench.hung


def test_bench_url_says_failed_and_exits_1(tmp_path: Path, sim_factory) -> None:  # type: ignore[no-untyped-def]
    sim = sim_factory("--model-path", "/models/tiny", "--sim-inject", "http_error_rate=0.5")
    sim.wait_ready()
    done = subprocess.run(
        [sys.executable, "-m", "tuner", "bench", "--url", sim.url, "--num-prompts", "8",
         "--concurrency", "4", "--input-len", "16", "--output-len", "4", "--warmup-requests", "0",
         "--no-flush", "--settle", "0", "--json"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "FAILED: 4 of 8 requests failed (http_status 4" in done.stderr
    assert json.loads(done.stdout)["points"]


def test_gpus_the_node_does_not_have_are_one_line_before_any_launch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "space.yaml").write_text(TINY)
    code = main(["trial", "--space", "space.yaml", "--gpus", "5"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
    assert code == 2 and err == [
        "error: gpus: GPU 5 is not on this node (its GPUs: 0); "
        "expected --gpus or the space's gpus: among them"
    ]
    assert not list((tmp_path / "runs").glob("*/logs/*.log")), "a server was launched"
