"""Calibrate the noisy mark: does it predict a measurement that a repeat does not reproduce?

Launches one configuration on the simulator once and runs the study's benchmark stage `--reps`
times back to back against the same server (so the server and its configuration are constant
and what varies is the machine), recording per run: output throughput, the client's event-loop
lag p99, its run-queue wait share and CPU share. A run "does not reproduce" when its throughput
is more than `--dev` % from the median of all runs. For each candidate lag threshold (the
run-queue wait share kept at its setting) it prints how many runs the mark would flag, and of
those how many did not reproduce (precision), and of the runs that did not reproduce how many
were flagged (recall), next to the mark as configured today.

    .venv/bin/python benchmarks/noisy_mark.py [--space search_spaces/glm5-nvfp4-sm120-sim.yaml]
        [--reps 20] [--dev 3] [--json out.jsonl]    (≈ 10 s per rep on the demo space)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from tuner.bench.settings import BenchSettings
from tuner.bench.types import BenchResult
from tuner.session import trial_session
from tuner.space.loader import config_from_params, load_space
from tuner.trial import run_trial

LAG_STEPS_MS = (5.0, 10.0, 20.0, 40.0, 80.0)
RELATIVE_STEPS = (0.1, 0.25, 0.5, 1.0)


def measure(space_path: Path, reps: int) -> list[dict[str, Any]]:
    """`reps` benchmark runs against one launch of the space's first baseline."""
    space = load_space(space_path)
    params = dict(space.baselines[0]) if space.baselines else {}
    config = config_from_params(space, params)
    runs: list[dict[str, Any]] = []
    with trial_session(space) as ctx:
        inner = ctx.bench

        def repeated(base_url: str, settings: BenchSettings, **kw: Any) -> BenchResult:
            result = None
            for i in range(reps):
                result = inner(base_url, settings, **kw)
                m = result.objective_metrics
                runs.append(
                    {
                        "rep": i,
                        "output_throughput": None if m is None else m.output_throughput,
                        "itl_p50_ms": None if m is None or not m.itl.count else m.itl.median_ms,
                        "tpot_p50_ms": None if m is None or not m.tpot.count else m.tpot.median_ms,
                        "lag_p99_ms": result.loop_lag_p99_ms,
                        "wait_share": result.run_queue_wait_share,
                        "cpu_share": result.client_cpu_share,
                        "starved": result.starved,
                        "client_bound": result.client_bound,
                    }
                )
                print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
            assert result is not None
            return result

        run_trial(config, replace(ctx, bench=repeated), label="noisy-mark")
    return runs


def _rule_rows(runs: list[dict[str, Any]], off: int, wait_share: float) -> list[str]:
    rows = []
    rules: list[tuple[str, Any]] = [
        (f"lag p99 > {step:g} ms", lambda r, s=step: (r["lag_p99_ms"] or 0) > s) for step in LAG_STEPS_MS
    ]
    rules += [
        (f"lag p99 > {k:g} x ITL p50", lambda r, k=k: (r["lag_p99_ms"] or 0) > k * (r["itl_p50_ms"] or 1e9))
        for k in RELATIVE_STEPS
    ]
    for name, rule in rules:
        flagged = [r for r in runs if rule(r) and (r["wait_share"] or 0) > wait_share]
        hits = sum(r["off"] for r in flagged)
        precision = f"{100 * hits / len(flagged):.0f}%" if flagged else "-"
        recall = f"{100 * hits / off:.0f}%" if off else "-"
        rows.append(f"{name:>22} | {len(flagged):>7} | {hits:>17} | {precision:>9} | {recall:>6}")
    return rows


def table(runs: list[dict[str, Any]], dev_pct: float, wait_share: float, metric: str) -> list[str]:
    """Precision and recall of candidate marks against 'did not reproduce' (|deviation| > dev_pct)."""
    values = [r[metric] for r in runs if r.get(metric) is not None]
    median = statistics.median(values)
    for r in runs:
        value = r.get(metric)
        r["dev_pct"] = None if value is None else 100.0 * (value - median) / median
        r["off"] = r["dev_pct"] is not None and abs(r["dev_pct"]) > dev_pct
    off = sum(r["off"] for r in runs)
    devs = sorted(abs(r["dev_pct"]) for r in runs if r["dev_pct"] is not None)
    itl = [r["itl_p50_ms"] for r in runs if r.get("itl_p50_ms") is not None]
    lags = sorted(r["lag_p99_ms"] for r in runs if r["lag_p99_ms"] is not None)
    return [
        f"{len(runs)} runs; {metric} median {median:,.2f}, |deviation| median {statistics.median(devs):.1f}% "
        f"(max {devs[-1]:.1f}%); {off} runs beyond ±{dev_pct:g}%",
        f"event-loop lag p99: median {statistics.median(lags):.1f} ms ({lags[0]:.1f}-{lags[-1]:.1f}); "
        f"ITL p50 median {statistics.median(itl) if itl else float('nan'):.2f} ms",
        f"today's mark (starved): flags {sum(r['starved'] for r in runs)}, of which "
        f"{sum(r['starved'] and r['off'] for r in runs)} did not reproduce",
        "                  mark | flagged | did not reproduce | precision | recall",
        *_rule_rows(runs, off, wait_share),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--space", type=Path, default=Path("search_spaces/glm5-nvfp4-sm120-sim.yaml"))
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--dev", type=float, default=3.0, help="deviation from the median that counts (%%)")
    parser.add_argument("--wait-share", type=float, default=0.2, help="run-queue wait share of the mark")
    parser.add_argument("--metric", default="output_throughput", help="what must reproduce (a run's key)")
    parser.add_argument("--json", type=Path, default=None, help="also write every run as JSON lines")
    parser.add_argument("--from-json", type=Path, default=None, help="analyse runs written before")
    args = parser.parse_args()
    if args.from_json is not None:
        runs = [json.loads(line) for line in args.from_json.read_text().splitlines() if line.strip()]
    else:
        runs = measure(args.space, args.reps)
    if args.json is not None:
        args.json.write_text("".join(json.dumps(r) + "\n" for r in runs))
    print("\n".join(table(runs, args.dev, args.wait_share, args.metric)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
