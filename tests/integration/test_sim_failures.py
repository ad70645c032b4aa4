"""Every failure rule of the simulator, seen from outside: exit status, log lines, HTTP, state files."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest
from support.sim import REPO, pid_alive, poll

from tuner.config import Outcome, Phase
from tuner.sglang.log_classify import classify_failure

pytestmark = pytest.mark.integration

GLM5 = [
    "--model-path",
    "/models/GLM-5-NVFP4",
    "--tp-size",
    "8",
    "--sim-scenario",
    "glm5-nvfp4-sm120",
    "--sim-seed",
    "3",
]
TINY = ["--model-path", "/models/tiny", "--sim-seed", "1"]
SEED_BS = ["1", "2", "4", "8", "12", "16", "24", "32", "40", "48", "56", "64"]
CAPITAL = "What is the capital of France? Answer in one word."


def _run(*args: str, version: str = "0.5.9") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tuner.sim", "--sim-sglang-version", version, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.parametrize(
    ("version", "argv", "needle"),
    [
        ("0.5.23", ["--nsa-decode-backend", "trtllm"], "unrecognized arguments: --nsa-decode-backend trtllm"),
        ("0.5.23", ["--cuda-graph-bs", "1", "2"], "ambiguous option: --cuda-graph-bs could match"),
        ("0.5.9", ["--cuda-graph-bs", "1,2,4"], "argument --cuda-graph-bs: invalid int value: '1,2,4'"),
        ("0.5.9", ["--dsa-decode-backend", "trtllm"], "unrecognized arguments: --dsa-decode-backend"),
        ("0.5.13", ["--enable-nan-detection"], "unrecognized arguments: --enable-nan-detection"),
        ("0.5.9", ["--nsa-decode-backend", "bogus"], "invalid choice: 'bogus'"),
        ("0.5.9", ["--sim-inject", "nope=1"], "--sim-inject"),
    ],
)
def test_bad_flags_exit_2_before_anything(tmp_path, version, argv, needle):
    env_dir = tmp_path / "state"
    proc = subprocess.run(
        [sys.executable, "-m", "tuner.sim", "--sim-sglang-version", version, "--model-path", "/m", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "TUNER_SIM_STATE_DIR": str(env_dir)},
    )
    assert proc.returncode == 2
    assert needle in proc.stderr
    assert not env_dir.exists()  # nothing happened before the parse


def test_seed_command_on_0_5_23_names_the_unknown_flag():
    proc = _run(
        *GLM5,
        "--mem-fraction-static",
        "0.85",
        "--disable-cuda-graph",
        "--nsa-prefill-backend",
        "trtllm",
        "--nsa-decode-backend",
        "trtllm",
        "--port",
        "1",
        version="0.5.23",
    )
    assert proc.returncode == 2 and "--nsa-prefill-backend" in proc.stderr


def test_model_path_is_required():
    proc = _run("--port", "1")
    assert (
        proc.returncode == 2 and "the following arguments are required: --model-path/--model" in proc.stderr
    )


def test_deprecated_aliases_warn_and_work(sim_factory):
    sim = sim_factory(
        *TINY,
        "--sim-sglang-version",
        "0.5.16",
        "--nsa-decode-backend",
        "trtllm",
        "--cuda-graph-bs",
        "1",
        "2",
        "4",
    )
    sim.wait_ready()
    log = sim.log()
    assert (
        "\033[1;33m'--nsa-decode-backend' is deprecated and will be removed in a future release. "
        "Use '--dsa-decode-backend' instead.\033[0m"
        in log
    )
    assert "'--cuda-graph-bs' is deprecated" in log
    info = httpx.get(sim.url + "/server_info").json()
    assert info["cuda_graph_bs_decode"] == [1, 2, 4] and info["dsa_decode_backend"] == "trtllm"
    assert "Capture target decode CUDA graph begin. backend=full, bs=[1, 2, 4], num_tokens_per_req=1" in log


def _assert_startup_death(sim, *needles: str) -> str:
    code = sim.wait_exit()
    log = sim.log()
    assert code == -signal.SIGKILL, log[-2000:]
    for needle in needles:
        assert needle in log, f"{needle!r} not in log:\n{log[-2000:]}"
    assert "The server is fired up" not in log
    for pid in sim.child_pids():
        poll(lambda pid=pid: not pid_alive(pid), 5, f"child {pid} to die")
    return log


@pytest.mark.parametrize("backend", ["fa3", "flashmla_auto"])
def test_sm90_only_backends_crash_with_unsupported_architecture(sim_factory, backend):
    sim = sim_factory(
        *GLM5,
        "--mem-fraction-static",
        "0.85",
        "--nsa-prefill-backend",
        backend,
        "--nsa-decode-backend",
        "trtllm",
        "--cuda-graph-bs",
        *SEED_BS,
    )
    log = _assert_startup_death(
        sim,
        "Scheduler hit an exception: Traceback",
        "Unsupported architecture",
        "Received sigquit from a child process. It usually means the child failed.",
    )
    # the traceback runs through the backend's own code, as real SGLang's does, so the tuner's log
    # reading names the backend and its role, not only the pair
    verdict = classify_failure(log.splitlines(), exit_code=-signal.SIGKILL, phase=Phase.LAUNCH)
    assert (verdict.outcome, verdict.backend, verdict.role) == (Outcome.UNSUPPORTED, backend, "prefill")


def test_low_fraction_is_not_enough_memory(sim_factory):
    sim = sim_factory(
        *GLM5,
        "--mem-fraction-static",
        "0.6",
        "--disable-cuda-graph",
        "--nsa-decode-backend",
        "trtllm",
        "--nsa-prefill-backend",
        "trtllm",
    )
    _assert_startup_death(
        sim,
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
        "Current value: self.server_args.mem_fraction_static=0.6",
    )


def test_095_with_graphs_ooms_at_capture(sim_factory):
    sim = sim_factory(
        *GLM5,
        "--mem-fraction-static",
        "0.95",
        "--nsa-decode-backend",
        "trtllm",
        "--nsa-prefill-backend",
        "trtllm",
        "--cuda-graph-bs",
        *SEED_BS,
    )
    log = _assert_startup_death(
        sim,
        "Capture cuda graph begin.",
        "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate",
    )
    assert "Capture cuda graph end" not in log


def test_tp_larger_than_visible_gpus_fails(sim_factory):
    sim = sim_factory(*GLM5, "--disable-cuda-graph", env={"CUDA_VISIBLE_DEVICES": "0,1"})
    _assert_startup_death(sim, "CUDA error: invalid device ordinal", "Received sigquit from a child process")


async def _burst(url: str, n: int, max_tokens: int, prompt: str = CAPITAL) -> list[str]:
    async with httpx.AsyncClient(
        timeout=httpx.Timeout(30.0), limits=httpx.Limits(max_connections=n + 4)
    ) as client:

        async def one() -> str:
            try:
                r = await client.post(
                    url + "/v1/chat/completions",
                    json={
                        "messages": [{"role": "user", "content": prompt}],
                        "temperature": 0,
                        "max_tokens": max_tokens,
                    },
                )
                return r.json()["choices"][0]["message"]["content"]
            except (httpx.HTTPError, KeyError, ValueError):
                return "<failed>"

        return await asyncio.gather(*(one() for _ in range(n)))


def test_oom_under_load_without_graphs(sim_factory):
    sim = sim_factory(*TINY, "--mem-fraction-static", "0.95", "--disable-cuda-graph")
    sim.wait_ready()
    assert (
        asyncio.run(_burst(sim.url, 2, 16)) == ["The capital of France is Paris."] * 2
    )  # light load is fine
    outs = asyncio.run(_burst(sim.url, 16, 200, "Tell me a long story"))
    assert "<failed>" in outs
    assert sim.wait_exit() == -signal.SIGKILL
    log = sim.log()
    assert (
        "Scheduler hit an exception: Traceback" in log
        and "torch.OutOfMemoryError: CUDA out of memory." in log
    )
    assert "SIGQUIT received. signum=3, frame=None. It usually means one child failed." in log


def test_flashmla_kv_is_fine_alone_and_nan_in_a_batch(sim_factory):
    sim = sim_factory(
        *GLM5,
        "--mem-fraction-static",
        "0.85",
        "--disable-cuda-graph",
        "--nsa-prefill-backend",
        "trtllm",
        "--nsa-decode-backend",
        "flashmla_kv",
        "--enable-nan-detection",
    )
    sim.wait_ready()
    (single,) = asyncio.run(_burst(sim.url, 1, 16))
    assert "Paris" in single
    assert "Detected errors during sampling! NaN in the logits." not in sim.log()
    outs = asyncio.run(_burst(sim.url, 8, 16))
    assert all("!!!" in o and "Paris" not in o for o in outs)
    sim.wait_log("Detected errors during sampling! NaN in the logits.")


def test_flashmla_sparse_is_visibly_garbage(sim_factory):
    sim = sim_factory(
        *GLM5,
        "--mem-fraction-static",
        "0.85",
        "--disable-cuda-graph",
        "--nsa-prefill-backend",
        "flashmla_sparse",
        "--nsa-decode-backend",
        "flashmla_sparse",
    )
    sim.wait_ready()
    (single,) = asyncio.run(_burst(sim.url, 1, 16))
    assert set(single) == {"!"}


def test_tilelang_works_at_half_kv_capacity(sim_factory):
    sim = sim_factory(
        *GLM5,
        "--mem-fraction-static",
        "0.85",
        "--disable-cuda-graph",
        "--nsa-prefill-backend",
        "tilelang",
        "--nsa-decode-backend",
        "tilelang",
    )
    sim.wait_ready()
    assert httpx.get(sim.url + "/get_server_info").json()["max_total_num_tokens"] == pytest.approx(
        185_000, rel=0.02
    )
    assert "Paris" in asyncio.run(_burst(sim.url, 1, 16))[0]


@pytest.mark.parametrize(
    ("point", "version", "needle"),
    [
        ("load", "0.5.9", "Rank 0 scheduler is dead. Please check if there are relevant logs."),
        ("capture", "0.5.23", "Rank 0 scheduler died during initialization (exit code: -9)"),
    ],
)
def test_hang_makes_no_progress_until_the_scheduler_is_killed(sim_factory, point, version, needle):
    sim = sim_factory(*TINY, "--sim-sglang-version", version, "--sim-inject", f"hang_at={point}")
    last = "Load weight begin." if point == "load" else "Capture target decode CUDA graph begin."
    sim.wait_log(last)
    (child,) = poll(sim.child_pids, 5, "scheduler state file")
    time.sleep(1.0)  # several times the scenario's load+capture time: a healthy start would be ready
    assert sim.proc.poll() is None and "ready to roll" not in sim.log()
    assert last in sim.log().rstrip().splitlines()[-1]  # nothing after the hang point
    with pytest.raises(httpx.ConnectError):
        httpx.get(sim.url + "/health", timeout=1)
    os.kill(child, signal.SIGKILL)
    assert sim.wait_exit() == -signal.SIGKILL
    assert needle in sim.log()


def test_crash_after_ready(sim_factory):
    sim = sim_factory(*TINY, "--sim-sglang-version", "0.5.23", "--sim-inject", "crash_after_ready_s=0.3")
    sim.wait_ready()
    assert sim.wait_exit() == -signal.SIGKILL
    log = sim.log()
    assert "Scheduler hit an exception: Traceback" in log and "illegal memory access" in log
    assert "SIGQUIT received" in log


def test_crash_after_requests(sim_factory):
    sim = sim_factory(*TINY, "--skip-server-warmup", "--sim-inject", "crash_after_requests=2")
    poll(lambda: "ready to roll" in sim.log(), 10, "ready line")
    assert asyncio.run(_burst(sim.url, 1, 8)) == ["The capital of France is Paris."]
    asyncio.run(_burst(sim.url, 1, 8))
    assert sim.wait_exit() == -signal.SIGKILL


def test_scheduler_killed_while_serving_takes_the_tree_down(sim_factory):
    sim = sim_factory(*TINY, "--sim-sglang-version", "0.5.10")
    sim.wait_ready()
    (child,) = sim.child_pids()
    os.kill(child, signal.SIGKILL)
    assert sim.wait_exit() == -signal.SIGKILL
    assert (
        f"Subprocess scheduler_0 (pid={child}) crashed with exit code -9. Triggering SIGQUIT for cleanup..."
        in sim.log()
    )


def test_ignore_sigterm(sim_factory):
    sim = sim_factory(*TINY, "--sim-inject", "ignore_sigterm=1")
    sim.wait_ready()
    os.killpg(sim.proc.pid, signal.SIGTERM)
    os.killpg(sim.proc.pid, signal.SIGINT)
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:  # it keeps serving: every probe must succeed
        assert httpx.get(sim.url + "/health", timeout=2).status_code == 200
        time.sleep(0.1)
    assert sim.proc.poll() is None and "SIGTERM received" not in sim.log()
    os.killpg(sim.proc.pid, signal.SIGKILL)
    assert sim.wait_exit() == -signal.SIGKILL


def test_orphan_child_outlives_the_server_and_keeps_memory(sim_factory):
    sim = sim_factory(*TINY, "--sim-inject", "orphan_child=1")
    sim.wait_ready()
    pids = poll(lambda: len(sim.child_pids()) == 2 and sim.child_pids(), 5, "two memory holders")
    os.killpg(sim.proc.pid, signal.SIGKILL)
    sim.wait_exit()
    survivors = poll(
        lambda: [p for p in pids if pid_alive(p)] if sum(pid_alive(p) for p in pids) == 1 else None,
        5,
        "scheduler to die",
    )
    (orphan,) = survivors
    assert os.getsid(orphan) == orphan  # its own session: a group kill of the server misses it
    assert sim.procs()[orphan]["used_mib"]["0"] > 0
    os.kill(orphan, signal.SIGTERM)  # a clean exit removes its own file
    poll(lambda: orphan not in sim.procs(), 5, "orphan file removed")


@pytest.mark.parametrize(("version", "expected_exit"), [("0.5.23", 0), ("0.5.9", -signal.SIGKILL)])
def test_sigterm_drains_in_flight_requests_then_exits(sim_factory, version, expected_exit):
    sim = sim_factory(*TINY, "--sim-sglang-version", version)
    sim.wait_ready()
    (child,) = sim.child_pids()
    body = {"prompt": "Tell me a story", "max_tokens": 150, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", sim.url + "/v1/completions", json=body, timeout=30) as resp:
        lines = resp.iter_lines()
        assert next(line for line in lines if line.startswith("data: "))
        os.killpg(sim.proc.pid, signal.SIGTERM)
        poll(
            lambda: httpx.get(sim.url + "/health", timeout=2).status_code == 503,
            5,
            "/health 503 while draining",
        )
        rest = [line for line in lines if line.startswith("data: ")]
    assert rest[-1] == "data: [DONE]" and len(rest) >= 100
    assert sim.wait_exit() == expected_exit
    assert "SIGTERM received. signum=15 frame=None. Draining requests and shutting down..." in sim.log()
    poll(lambda: not pid_alive(child), 5, "scheduler exit")
    assert child not in sim.procs()  # a clean exit removes the file
