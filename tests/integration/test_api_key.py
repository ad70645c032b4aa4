"""`--api-key` end to end: the simulator refuses requests without it, a trial sends it, nothing prints it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from support.sim import Sim

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-apikey-7f3e1c"
ADMIN = "sk-admin-a91b2d"
TINY = ["--model-path", "/models/tiny", "--sim-seed", "1"]


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_simulator_answers_401_without_the_key_and_wants_the_admin_key_for_flush(
    sim_factory: Callable[..., Sim],
) -> None:
    sim = sim_factory(*TINY, "--api-key", KEY, "--admin-api-key", ADMIN)
    sim.wait_ready()
    with httpx.Client(base_url=sim.url, timeout=10) as client:
        assert client.get("/health").status_code == 200  # probes stay open
        assert client.get("/v1/models").status_code == 401
        assert client.get("/v1/models", headers=_bearer("wrong")).status_code == 401
        assert client.get("/v1/models", headers=_bearer(KEY)).status_code == 200
        assert client.get("/server_info", headers=_bearer(KEY)).status_code == 200
        denied = client.post("/flush_cache", headers=_bearer(KEY))
        assert denied.status_code == 401 and denied.json() == {"error": "Unauthorized"}
        assert client.post("/flush_cache", headers=_bearer(ADMIN)).status_code == 200


def test_a_space_with_an_api_key_runs_a_whole_trial_and_the_key_is_nowhere(tmp_path: Path) -> None:
    text = (ROOT / "search_spaces" / "tiny-fast-sim.yaml").read_text()
    space = tmp_path / "space.yaml"
    space.write_text(
        text.replace("  tp-size: 1\n", f"  tp-size: 1\n  api-key: {KEY}\n").replace(
            "  flush_cache: false\n", "  flush_cache: true\n"
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "tuner", "trial", "--space", str(space), "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["outcome"] == "ok", result.get("failure")
    assert result["bench"]["points"][0]["flushed"] is True  # /flush_cache took the key too
    assert KEY not in done.stdout + done.stderr
    leaks = [p for p in tmp_path.rglob("*") if p.is_file() and p != space and KEY.encode() in p.read_bytes()]
    assert not leaks, f"the key was written to {leaks}"


def _tuner(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tuner", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def test_bench_and_gate_urls_take_the_key_and_bench_writes_bench_serving_records(
    sim_factory: Callable[..., Sim],
) -> None:
    sim = sim_factory(*TINY, "--api-key", KEY)
    sim.wait_ready()
    flags = [
        "--concurrency",
        "2",
        "--num-prompts",
        "4",
        "--input-len",
        "8",
        "--output-len",
        "4",
        "--settle",
        "0",
    ]
    refused = _tuner("bench", "--url", sim.url, *flags)
    assert refused.returncode != 0
    done = _tuner(
        "bench",
        "--url",
        sim.url,
        *flags,
        "--json",
        "--json-format",
        "bench_serving",
        env={"SGLANG_API_KEY": KEY},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (record,) = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert record["completed"] == 4 and record["max_concurrency"] == 2 and "p99_ttft_ms" in record
    gate = _tuner("gate", "--url", sim.url, "--api-key", KEY)
    assert gate.returncode == 0, gate.stdout + gate.stderr
    for run in (refused, done, gate):
        assert KEY not in run.stdout + run.stderr
