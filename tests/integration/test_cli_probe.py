"""`tuner bench --url` and `tuner gate --url` against a simulator that is already running."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.cli import tuner_in
from support.sim import REPO

pytestmark = pytest.mark.integration

TINY = ["--model-path", "/models/tiny", "--sim-seed", "1", "--cuda-graph-max-bs", "8"]




@pytest.fixture
def server(sim_factory):  # type: ignore[no-untyped-def]
    sim = sim_factory(*TINY)
    sim.wait_ready()
    return sim


def test_bench_url_with_flags_prints_bench_serving_figures_and_json(server) -> None:  # type: ignore[no-untyped-def]
    flags = ["--input-len", "64", "--output-len", "8", "--concurrency", "4", "--num-prompts", "12"]
    done = tuner_in(REPO, "bench", "--url", server.url, *flags, "--settle", "0")
    assert "Output token throughput (tok/s)" in done.stdout, done.stderr
    assert "Successful requests                    12" in done.stdout
    assert "self-check: client CPU" in done.stdout
    as_json = tuner_in(REPO, "bench", "--url", server.url, *flags, "--settle", "0", "--json")
    data = json.loads(as_json.stdout)
    point = data["points"][0]
    assert point["metrics"]["completed"] == 12
    assert point["metrics"]["total_output_tokens"] == 12 * 8
    assert point["warmup_requests"] == 4 and point["flushed"] is True
    assert {"client_bound", "client_cpu_share", "loop_lag_p99_ms"} <= set(data)


def test_bench_goodput_counts_the_requests_within_every_bound(server) -> None:  # type: ignore[no-untyped-def]
    flags = ["--input-len", "64", "--output-len", "8", "--concurrency", "4", "--num-prompts", "12"]
    flags += ["--settle", "0"]
    bounds = ["ttft:1e9", "tpot:1e9", "e2el:1e9"]
    loose = tuner_in(REPO, "bench", "--url", server.url, *flags, "--goodput", *bounds)
    assert loose.returncode == 0, loose.stderr
    assert "Request goodput (req/s)" in loose.stdout
    assert "100.0% (12 of 12 requests) within --goodput ttft:1e+09 tpot:1e+09 e2el:1e+09" in loose.stdout
    tight = tuner_in(REPO, "bench", "--url", server.url, *flags, "--goodput", "ttft:0.001", "--json",
                     "--json-format", "bench_serving")  # fmt: skip
    (record,) = [json.loads(line) for line in tight.stdout.splitlines()]
    assert record["request_goodput"] == 0.0 and record["slo_attainment"] == 0.0 and record["completed"] == 12
    everyone = tuner_in(REPO, "bench", "--url", server.url, *flags, "--goodput", "e2el:1e9", "--json",
                        "--json-format", "bench_serving")  # fmt: skip
    (record,) = [json.loads(line) for line in everyone.stdout.splitlines()]
    assert record["request_goodput"] == pytest.approx(record["request_throughput"])  # all 12 good
    bad = tuner_in(REPO, "bench", "--url", server.url, *flags, "--goodput", "ttft300")
    assert bad.returncode == 2 and "--goodput 'ttft300': expected KEY:MS" in bad.stderr


def test_bench_url_with_a_space_uses_its_bench_section(server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    text = (REPO / "search_spaces" / "tiny-fast-sim.yaml").read_text()
    space = tmp_path / "space.yaml"
    space.write_text(text)
    done = tuner_in(REPO, "bench", "--url", server.url, "--space", str(space), "--json")
    data = json.loads(done.stdout)
    assert data["points"] and data["points"][0]["metrics"]["completed"] > 0
    both = tuner_in(REPO, "bench", "--url", server.url, "--space", str(space), "--concurrency", "2")
    assert both.returncode == 2 and "expected one or the other" in both.stderr


def test_gate_url_passes_a_healthy_server_with_a_burst_from_its_graphs(server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    space = tmp_path / "space.yaml"
    text = (REPO / "search_spaces" / "tiny-fast-sim.yaml").read_text()
    space.write_text(text.replace("  burst_size: 2\n", ""))
    done = tuner_in(REPO, "gate", "--url", server.url, "--space", str(space))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("gate passed") and "burst of 8" in done.stdout  # the server's max graph
    data = json.loads(tuner_in(REPO, "gate", "--url", server.url, "--space", str(space), "--json").stdout)
    assert data["verdict"] == "passed" and len(data["answers"]) == 1 + 8


def test_an_unreachable_server_is_one_line() -> None:
    done = tuner_in(REPO, "bench", "--url", "http://127.0.0.1:9", "--concurrency", "1", "--num-prompts", "1")
    assert done.returncode != 0
    lines = [ln for ln in done.stderr.splitlines() if ln.strip() and "━" not in ln]
    assert lines[-1].startswith("error: ") and "v1/models" in lines[-1], done.stderr
