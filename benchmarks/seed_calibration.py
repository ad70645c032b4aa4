"""The seed deployment's measurements, reproduced through the whole tuner on the simulator.

Runs `run_trial` (launch, gate, benchmark, teardown) on the glm5-nvfp4-sm120
scenario with the seed's benchmark shape (64 concurrent streams, fixed
lengths: 331 input / 256 output tokens, 128 requests) for the two hand-tuned
configurations of the seeds, and prints what the tuner measured next to what
the seeds reported:

  0.85, no CUDA graphs, trtllm/trtllm:  370K KV tokens, ~16.5 GB free, 225 output / 516 total tok/s
  0.92, graphs [1..64] (12 sizes):      498K KV tokens, ~5.2 GB free, 194 output tok/s

Takes about 5 minutes (the pace is real time).

    python benchmarks/seed_calibration.py [--prompts 128]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tuner.bench.settings import LoadPoint, Workload  # noqa: E402
from tuner.engine import engine_for, probe_for  # noqa: E402
from tuner.session import TrialContext  # noqa: E402
from tuner.space.loader import config_from_params, load_space  # noqa: E402
from tuner.trial import run_trial  # noqa: E402

SEED_BS = [1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64]
CASES = (
    ("0.85, graphs off", {"mem-fraction-static": 0.85, "cuda_graph": "off"}, (370_000, 16_574, 225, 516)),
    ("0.92, graphs [1..64]", {"mem-fraction-static": 0.92, "cuda_graph": SEED_BS}, (498_000, 5_325, 194, None)),
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=128)
    args = parser.parse_args()
    space = load_space(ROOT / "search_spaces" / "glm5-nvfp4-sm120-sim.yaml")
    bench = space.bench.model_copy(
        update={
            "workload": Workload(input_len=331, output_len=256, range_ratio=1.0),
            "load_points": (LoadPoint(concurrency=64, num_prompts=args.prompts),),
            "warmup_requests": 8,
            "timeouts": space.bench.timeouts.model_copy(update={"stage_deadline_s": 900.0}),
        }
    )
    space = replace(space, bench=bench)
    print(f"{'config':<22} {'KV tokens':>10} {'seed':>8} {'min free MiB':>13} {'idle free (seed)':>17} "
          f"{'out tok/s':>10} {'seed':>6} {'total tok/s':>12} {'seed':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        engine = engine_for(space, state_root=Path(tmp))
        ctx = TrialContext(space=space, engine=engine, probe=probe_for(engine), log_dir=Path(tmp) / "logs")
        for name, knobs, (kv_seed, free_seed, out_seed, total_seed) in CASES:
            params = {**knobs, "sparse_backends": "trtllm/trtllm"}
            result = run_trial(config_from_params(space, params), ctx, label=name.replace(" ", "_"))
            metrics = result.bench.objective_metrics if result.bench else None
            if metrics is None or result.server is None:
                print(f"{name:<22} failed: {result.failure}")
                continue
            print(
                f"{name:<22} {result.server.kv_tokens:>10,} {kv_seed:>8,} {min(result.min_free_mib or (0,)):>13,} "
                f"{free_seed:>17,} {metrics.output_throughput:>10.1f} {out_seed:>6} "
                f"{metrics.total_throughput:>12.1f} {total_seed or '-':>6}"
            )
            print(f"{'':<22} steady-state output {metrics.steady_output_throughput or 0:.1f} tok/s, "
                  f"TTFT p99 {metrics.ttft.p99_ms:.0f} ms, TPOT median {metrics.tpot.median_ms:.0f} ms, "
                  f"completed {metrics.completed}/{metrics.completed + metrics.failed}, "
                  f"client bound: {result.bench.client_bound if result.bench else '-'}")
    print("min free MiB is the lowest free memory seen during gate and benchmark (activations included);")
    print("the seeds' free figures were read on an idle server.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
