"""How fast the lifecycle code reacts, measured over real simulator processes.

Prints, over N runs each (median and spread):
  * crash -> recorded status: from the moment the server process exits (or
    prints its fatal line) to the moment `wait_ready` / the trial has the
    classified Failure in hand, for a crash at startup (OOM at capture) and
    a crash after ready (scheduler dies while serving);
  * orchestration overhead per launch: wall time of start + wait_ready +
    stop minus the time the server itself needed (its own startup, read
    from the first to the ready log line, and its exit after the signal).

    python benchmarks/lifecycle.py [--runs 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tuner.config import Failure, LaunchSpec, LaunchTimeouts, Phase, ServerFacts  # noqa: E402
from tuner.sglang.process import free_port  # noqa: E402
from tuner.sglang.server import ServerProcess  # noqa: E402

TIMEOUTS = LaunchTimeouts(startup_s=30, idle_log_s=10, ready_poll_s=0.05, sigint_grace_s=5, sigterm_grace_s=5)
GLM5_OOM = ["--model-path", "/m", "--tp-size", "8", "--mem-fraction-static", "0.95",
            "--nsa-prefill-backend", "trtllm", "--nsa-decode-backend", "trtllm",
            "--cuda-graph-bs", *["1", "2", "4", "8", "12", "16", "24", "32", "40", "48", "56", "64"]]
TINY = ["--model-path", "/m", "--tp-size", "1", "--mem-fraction-static", "0.8"]


def _spec(tmp: Path, scenario: str, flags: list[str], inject: tuple[str, ...] = ()) -> LaunchSpec:
    port = free_port()
    argv = [sys.executable, "-m", "tuner.sim", "--sim-scenario", scenario]
    for item in inject:
        argv += ["--sim-inject", item]
    argv += [*flags, "--host", "127.0.0.1", "--port", str(port)]
    return LaunchSpec(argv=tuple(argv), env=(("TUNER_SIM_STATE_DIR", str(tmp / "gpu")),), port=port,
                      log_path=tmp / f"{port}.log", sglang_version="0.5.9", timeouts=TIMEOUTS)


def crash_at_startup(tmp: Path) -> float:
    """Seconds from the fatal log line's arrival to the classified Failure."""
    server = ServerProcess(_spec(tmp, "glm5-nvfp4-sm120", GLM5_OOM))
    server.start()
    result = server.wait_ready()
    done = time.monotonic()
    assert isinstance(result, Failure), result
    server.stop()
    first = min(t for t in (server.fatal_at, server.exit_time) if t is not None)
    return done - first


def crash_after_ready(tmp: Path) -> float:
    """Seconds from the process exit to the classified Failure (scheduler dies while serving)."""
    server = ServerProcess(_spec(tmp, "tiny-fast", TINY, ("crash_after_ready_s=0.3",)))
    server.start()
    ready = server.wait_ready()
    assert isinstance(ready, ServerFacts), ready
    server.died.wait(30)
    failure = server.classify(Phase.BENCH)
    done = time.monotonic()
    assert failure.outcome.value == "crashed", failure
    first = min(t for t in (server.fatal_at, server.exit_time) if t is not None)
    server.stop()
    return done - first


def overhead_per_launch(tmp: Path) -> tuple[float, float]:
    """(orchestration overhead s, server's own time s) for one ready launch + stop."""
    server = ServerProcess(_spec(tmp, "tiny-fast", TINY))
    t0 = time.monotonic()
    server.start()
    facts = server.wait_ready()
    t_ready = time.monotonic()
    assert isinstance(facts, ServerFacts), facts
    ready_line_at = server.ready_line_at
    t_stop = time.monotonic()
    report = server.stop()
    t_end = time.monotonic()
    assert report is not None
    own_startup = (ready_line_at or t_ready) - t0  # process start until it printed the ready line
    own_exit = report.duration_s  # signals until the whole group was gone
    total = (t_ready - t0) + (t_end - t_stop)
    return total - own_startup - own_exit, own_startup + own_exit


def _summary(name: str, values: list[float], unit: str = "ms") -> str:
    scale = 1000.0 if unit == "ms" else 1.0
    vals = sorted(v * scale for v in values)
    return (f"{name:<44} n={len(vals):<3} median {statistics.median(vals):8.1f} {unit}   "
            f"min {vals[0]:8.1f}   max {vals[-1]:8.1f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        startup = [crash_at_startup(tmp) for _ in range(args.runs)]
        serving = [crash_after_ready(tmp) for _ in range(args.runs)]
        pairs = [overhead_per_launch(tmp) for _ in range(args.runs)]
    print(_summary("crash at startup -> classified failure", startup))
    print(_summary("crash while serving -> classified failure", serving))
    print(_summary("orchestration overhead per launch", [p[0] for p in pairs]))
    print(_summary("server's own startup + exit (for scale)", [p[1] for p in pairs]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
