"""ServerProcess against the simulator as a real subprocess: every way a launch can end.

Each case is classified right, and afterwards no process of the launch
survives and its port is free.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import psutil
import pytest

from tuner.config import (
    CudaGraph,
    Failure,
    LaunchSpec,
    LaunchTimeouts,
    Outcome,
    Phase,
    ServerFacts,
    TrialConfig,
)
from tuner.errors import FlagError, PortInUseError
from tuner.gpu.sampler import FileGpuProbe, wait_for_release
from tuner.host import CpuPressure
from tuner.sglang.flags import render_flags, validate_flags
from tuner.sglang.options import builtin_table
from tuner.sglang.process import free_port, port_is_free
from tuner.sglang.server import ServerProcess

pytestmark = pytest.mark.integration

FAST = LaunchTimeouts(
    startup_s=20, idle_log_s=3, ready_poll_s=0.05, sigint_grace_s=2, sigterm_grace_s=2, release_s=5
)
TINY = ["--model-path", "/models/tiny", "--tp-size", "1"]


def _spec(tmp: Path, flags: list[str], *, scenario: str = "tiny-fast", version: str = "0.5.9",
          inject: tuple[str, ...] = (), timeouts: LaunchTimeouts = FAST,
          port: int | None = None) -> LaunchSpec:
    port = port or free_port()
    argv = [sys.executable, "-m", "tuner.sim", "--sim-scenario", scenario,
            "--sim-sglang-version", version]  # fmt: skip
    for item in inject:
        argv += ["--sim-inject", item]
    argv += [*flags, "--host", "127.0.0.1", "--port", str(port)]
    return LaunchSpec(
        argv=tuple(argv),
        env=(("TUNER_SIM_STATE_DIR", str(tmp / "gpu")),),
        port=port,
        log_path=tmp / "server.log",
        sglang_version=version,
        timeouts=timeouts,
    )


def _launch(spec: LaunchSpec) -> tuple[ServerProcess, ServerFacts | Failure]:
    server = ServerProcess(spec)
    server.start()
    return server, server.wait_ready()


def _assert_clean(server: ServerProcess, spec: LaunchSpec, tmp: Path) -> None:
    pids = server.our_pids()
    server.stop()
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            assert psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, f"pid {pid} survived"
    assert port_is_free("127.0.0.1", spec.port)
    probe = FileGpuProbe(tmp / "gpu")
    wait_for_release(probe, tuple(d.index for d in probe.devices()), baseline_used_mib=None, our_pids=pids,
                     timeout_s=5)


def test_ready_reports_kv_tokens_from_endpoint_and_log(tmp_path: Path) -> None:
    spec = _spec(tmp_path, [*TINY, "--mem-fraction-static", "0.8"])
    server, facts = _launch(spec)
    assert isinstance(facts, ServerFacts), facts
    assert facts.kv_tokens and facts.kv_tokens == facts.kv_tokens_log
    assert facts.startup_s < 20
    _assert_clean(server, spec, tmp_path)


def test_bad_flag_is_classified_from_argparse_exit_2(tmp_path: Path) -> None:
    spec = _spec(tmp_path, [*TINY, "--no-such-flag", "1"])
    server, failure = _launch(spec)
    assert isinstance(failure, Failure)
    assert failure.outcome is Outcome.BAD_FLAG and failure.exit_code == 2
    assert "--no-such-flag" in failure.excerpt
    _assert_clean(server, spec, tmp_path)


def test_renamed_flag_is_caught_before_launch_with_the_replacement_named() -> None:
    table = builtin_table("0.5.23")
    config = TrialConfig(sparse_prefill_backend="trtllm", sparse_decode_backend="trtllm")
    rendered = render_flags(config, table, fixed={"model-path": "/m"}, port=1)
    assert "--dsa-decode-backend" in rendered  # knobs render in the new spelling
    with pytest.raises(FlagError, match=r"--nsa-decode-backend.*0\.5\.23.*--dsa-decode-backend"):
        validate_flags(["--model-path", "/m", "--nsa-decode-backend", "trtllm"], table)


def test_oom_at_capture(tmp_path: Path) -> None:
    flags = ["--model-path", "/m", "--tp-size", "8", "--mem-fraction-static", "0.95",
             "--nsa-prefill-backend", "trtllm", "--nsa-decode-backend", "trtllm",
             "--cuda-graph-bs", "1", "2", "4", "8", "12", "16", "24", "32", "40", "48", "56", "64"]
    spec = _spec(tmp_path, flags, scenario="glm5-nvfp4-sm120")
    server, failure = _launch(spec)
    assert isinstance(failure, Failure), failure
    assert failure.outcome is Outcome.OOM and "capture" in failure.message
    _assert_clean(server, spec, tmp_path)


def test_not_enough_memory(tmp_path: Path) -> None:
    flags = ["--model-path", "/m", "--tp-size", "8", "--mem-fraction-static", "0.6", "--disable-cuda-graph",
             "--nsa-prefill-backend", "trtllm", "--nsa-decode-backend", "trtllm"]
    spec = _spec(tmp_path, flags, scenario="glm5-nvfp4-sm120")
    server, failure = _launch(spec)
    assert isinstance(failure, Failure), failure
    assert failure.outcome is Outcome.NOT_ENOUGH_MEMORY
    assert "Not enough memory" in failure.excerpt
    _assert_clean(server, spec, tmp_path)


def test_unsupported_backend_on_sm120(tmp_path: Path) -> None:
    flags = ["--model-path", "/m", "--tp-size", "8", "--mem-fraction-static", "0.85", "--disable-cuda-graph",
             "--nsa-prefill-backend", "fa3", "--nsa-decode-backend", "fa3"]
    spec = _spec(tmp_path, flags, scenario="glm5-nvfp4-sm120")
    server, failure = _launch(spec)
    assert isinstance(failure, Failure), failure
    assert failure.outcome is Outcome.UNSUPPORTED
    _assert_clean(server, spec, tmp_path)


def test_crash_after_ready_is_seen_within_a_second(tmp_path: Path) -> None:
    spec = _spec(tmp_path, [*TINY, "--mem-fraction-static", "0.8"], inject=("crash_after_ready_s=0.5",))
    server, facts = _launch(spec)
    assert isinstance(facts, ServerFacts), facts
    assert server.died.wait(10), "the crash was not noticed"
    noticed = time.monotonic()
    failure = server.classify(Phase.BENCH)
    assert failure.outcome is Outcome.CRASHED
    assert "Scheduler hit an exception" in failure.excerpt
    first_sign = min(t for t in (server.fatal_at, server.exit_time) if t is not None)
    assert noticed - first_sign < 1.0
    _assert_clean(server, spec, tmp_path)


def test_hang_without_a_ready_line_is_cut_off_by_the_watchdog(tmp_path: Path) -> None:
    timeouts = FAST.model_copy(update={"idle_log_s": 1.0})
    flags = [*TINY, "--mem-fraction-static", "0.8"]
    spec = _spec(tmp_path, flags, inject=("hang_at=load",), timeouts=timeouts)
    server, failure = _launch(spec)
    assert isinstance(failure, Failure), failure
    assert failure.outcome is Outcome.HANG
    assert server.alive(), "a hung server is still alive until we stop it"
    _assert_clean(server, spec, tmp_path)


def test_server_that_ignores_sigint_and_sigterm_is_killed(tmp_path: Path) -> None:
    spec = _spec(tmp_path, [*TINY, "--mem-fraction-static", "0.8"], inject=("ignore_sigterm=1",))
    server, facts = _launch(spec)
    assert isinstance(facts, ServerFacts), facts
    report = server.stop()
    assert report is not None and report.signals_sent[-1] == "SIGKILL"
    _assert_clean(server, spec, tmp_path)


def test_child_that_left_the_group_is_swept_and_its_memory_released(tmp_path: Path) -> None:
    spec = _spec(tmp_path, [*TINY, "--mem-fraction-static", "0.8"], inject=("orphan_child=1",))
    server, facts = _launch(spec)
    assert isinstance(facts, ServerFacts), facts
    server.our_pids()
    report = server.stop()
    assert report is not None and report.swept_pids, "the stray grandchild was not swept"
    _assert_clean(server, spec, tmp_path)


def test_port_already_taken_is_refused_before_launch(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        spec = _spec(tmp_path, [*TINY], port=port)
        server = ServerProcess(spec)
        with pytest.raises(PortInUseError, match=str(port)):
            server.start()
        assert server.pid is None


def test_ready_with_cuda_graphs_reports_captured_batch_sizes(tmp_path: Path) -> None:
    table = builtin_table("0.5.23")
    config = TrialConfig(mem_fraction_static=0.8, cuda_graph=CudaGraph(bs=(1, 2, 4, 8)))
    flags = [f for f in render_flags(config, table, fixed={"model-path": "/m", "tp-size": 1}, port=1)]
    flags = flags[: flags.index("--host")]
    spec = _spec(tmp_path, flags, version="0.5.23")
    server, facts = _launch(spec)
    assert isinstance(facts, ServerFacts), facts
    assert facts.captured_bs == (1, 2, 4, 8)
    _assert_clean(server, spec, tmp_path)


class _Crowded:
    """A CPU watch that reports the given share of waiting (a stand-in for a host full of CPU hogs)."""

    def __init__(self, wait_share: float, pids: Callable[[], Sequence[int]]) -> None:
        self.wait_share, self.pids = wait_share, pids
        self.asked: list[tuple[int, ...]] = []

    def sample(self, now: float) -> None:
        pass

    def pressure(self, now: float) -> CpuPressure:
        self.asked.append(tuple(self.pids()))
        return CpuPressure(wait_share=self.wait_share, load_per_cpu=3.0)


@pytest.mark.parametrize(
    ("wait_share", "outcome"),
    [(0.75, Outcome.INFRA_ERROR), (0.02, Outcome.TIMEOUT)],
)
def test_a_launch_not_ready_in_time_is_the_host_s_fault_only_when_the_host_starved_it(
    tmp_path: Path, wait_share: float, outcome: Outcome
) -> None:
    timeouts = FAST.model_copy(update={"startup_s": 1.5, "idle_log_s": 60.0})
    flags = [*TINY, "--mem-fraction-static", "0.8"]
    spec = _spec(tmp_path, flags, inject=("hang_at=load",), timeouts=timeouts)
    watches: list[_Crowded] = []

    def watch(pids: Callable[[], Sequence[int]]) -> _Crowded:
        watches.append(_Crowded(wait_share, pids))
        return watches[-1]

    server = ServerProcess(spec, cpu_watch=watch)  # type: ignore[arg-type]
    server.start()
    failure = server.wait_ready()
    assert isinstance(failure, Failure), failure
    assert failure.outcome is outcome
    assert failure.message.startswith("not ready after 2 s")
    assert ("starved the server" in failure.message) is (outcome is Outcome.INFRA_ERROR)
    assert watches[0].asked and server.pid in watches[0].asked[-1], "not judged on the server's own processes"
    _assert_clean(server, spec, tmp_path)
