"""Real SGLang on one GPU: the tuner's benchmark against SGLang's own bench_serving, and the GPU checks.

    python benchmarks/gpu_real_sglang.py all --tokenizer DIR --out OUT      # model + tests + bench + report
    python benchmarks/gpu_real_sglang.py model --tokenizer DIR --out MODEL  # the 8B-class dummy model folder
    python benchmarks/gpu_real_sglang.py bench --model MODEL --out OUT [--rounds 3]
    python benchmarks/gpu_real_sglang.py report --out OUT                   # report.md again from OUT's files

Needs one NVIDIA GPU with ~40 GiB free, SGLang importable in this Python (`pip install sglang`, or the
recipe's site on PYTHONPATH), nvidia-ml-py, and the project (run it from the repository root). The
model is an 8B-class Llama config launched with `--load-format dummy` (SGLang initialises ~15 GiB of
weights itself; nothing is downloaded); its tokenizer is taken from `--tokenizer DIR` (any folder with
a Llama-style tokenizer.json: the recipe's `make_tiny.py` writes one offline).

`bench` starts one server (triton attention, decode graphs up to 32, prefill graphs off, fraction 0.85)
and measures each of `--workloads` (random token ids, cache flushed; WORKLOADS below) in turns with the
tuner's benchmark over SGLang's native /generate and with `python -m sglang.bench_serving --backend
sglang --dataset-name random-ids --tokenize-prompt` (the only way bench_serving sends token ids
unchanged): output throughput and the TTFT / TPOT medians, the median of `--rounds` runs each, must
agree within 2%; the per-request medians pooled over the rounds come with a 95% interval from
resampling whole rounds. The default, long1 (7,680 in / 16 out, one at a time), compares the two
definitions; the short-prompt workloads (closed16, single, poisson8) measure mostly the server's own
schedule and jitter, which move either tool's TTFT median by more than 2% from run to run. The tuner
over /v1/completions (the same ids through SGLang's OpenAI front end) is measured beside them unless
`--no-completions`. `all` also runs tests/gpu/test_real_sglang.py (each launch's outcome, KV tokens,
free VRAM, teardown and classification go to OUT/trials.jsonl) and writes OUT/report.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from real_sglang_space import gpu_used_mib, sglang_pids, sglang_version, write_model  # noqa: E402

TOLERANCE = 0.02


@dataclass(frozen=True)
class Workload:
    """One workload both tools run on the same server: random token ids of fixed lengths, a closed
    loop of `concurrency` requests or Poisson arrivals at `request_rate` (or both)."""

    input_len: int
    output_len: int
    prompts: int
    concurrency: int | None = None
    request_rate: float | None = None

    @property
    def warmup(self) -> int:
        return min(self.concurrency or 4, 16)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


WORKLOADS = {
    # every request of one length in a closed loop: the 16 finish together and return as a wave, which
    # SGLang prefills as 1 + 15, so a request's TTFT depends on where in the wave it lands
    "closed16": Workload(512, 128, 160, concurrency=16),
    # one request at a time: TTFT is one 512-token prefill, the definition with no schedule in it
    "single": Workload(512, 32, 48, concurrency=1),
    # one long prompt at a time: a 7,680-token prefill (~0.3 s) dwarfs the server's own per-request
    # jitter (22-50 ms TTFTs for one 512-token prefill at concurrency 1, either tool), so the medians
    # test the two definitions rather than the schedule
    "long1": Workload(7680, 16, 32, concurrency=1),
    # open loop, Poisson arrivals at about half the closed loop's request rate: no waves
    "poisson8": Workload(512, 128, 128, request_rate=8.0),
}
METRICS = (
    ("output_throughput", "output_throughput"),
    ("ttft_median_ms", "median_ttft_ms"),
    ("tpot_median_ms", "median_tpot_ms"),
)
SERVER_FLAGS = (
    "--load-format",
    "dummy",
    "--attention-backend",
    "triton",
    "--sampling-backend",
    "pytorch",
    "--grammar-backend",
    "none",
    "--dtype",
    "bfloat16",
    "--mem-fraction-static",
    "0.85",
    "--cuda-graph-max-bs-decode",
    "32",
    "--disable-prefill-cuda-graph",
    "--log-level",
    "info",
)
# bench_serving imports these at module load for datasets this comparison does not use (MMMU, images,
# tables); where one is not installed it gets a stand-in that fails only if it is used
OPTIONAL_IMPORTS = ("datasets", "PIL", "tabulate")
BENCH_SERVING = f"""
import importlib, runpy, sys, types
class _Missing:
    def __init__(self, name): self._name = name
    def __getattr__(self, attr):
        if attr.startswith("__"): raise AttributeError(attr)  # inspect, pickle: no such attribute
        return _Missing(self._name + "." + attr)
    def __call__(self, *a, **k): raise ImportError(self._name + " is not installed")
def _lookup(attr, name):
    if attr.startswith("__"): raise AttributeError(attr)
    return _Missing(name + "." + attr)
for name in {OPTIONAL_IMPORTS!r}:
    try:
        importlib.import_module(name)
    except ImportError:
        stub = types.ModuleType(name); stub.__getattr__ = lambda attr, n=name: _lookup(attr, n)
        sys.modules[name] = stub
sys.argv[0] = "bench_serving"
runpy.run_module("sglang.bench_serving", run_name="__main__")
"""


def start_server(model: Path, port: int, log: Any) -> Any:
    """SGLang in its own session (the tuner's ProcessGroup), its output into `log`."""
    from tuner.sglang.process import ProcessGroup

    argv = [
        sys.executable,
        "-m",
        "sglang.launch_server",
        "--model-path",
        str(model),
        *SERVER_FLAGS,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    return ProcessGroup(argv, env=dict(os.environ), on_line=lambda line: log.write(line + "\n"))


def wait_ready(url: str, group: Any, timeout_s: float) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not group.alive():
            raise SystemExit("the server exited before it was ready (see server.log)")
        try:
            if httpx.get(url + "/health", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"not ready after {timeout_s:.0f} s")


def tuner_bench(url: str, w: Workload, index: int, api: str = "generate") -> dict[str, Any]:
    from tuner.bench.runner import benchmark
    from tuner.bench.settings import BenchSettings

    settings = BenchSettings.model_validate(
        {
            "workload": {
                "kind": "random",
                "input_len": w.input_len,
                "output_len": w.output_len,
                "range_ratio": 1.0,
                "api": api,
                "seed": 7 + index,
            },
            "load_points": [
                {"concurrency": w.concurrency, "request_rate": w.request_rate, "num_prompts": w.prompts}
            ],
            "warmup_requests": w.warmup,
            "flush_cache": True,
        }
    )
    result = benchmark(url, settings)
    m = result.objective_metrics
    assert m is not None and m.completed == w.prompts, f"tuner benchmark: {m}"
    records = [r for r in result.points[0].records if r.success]
    return {
        "output_throughput": m.output_throughput,
        "ttft_median_ms": m.ttft.median_ms,
        "tpot_median_ms": m.tpot.median_ms,
        "duration_s": m.duration_s,
        "completed": m.completed,
        "ttfts_ms": [r.ttft_s * 1000 for r in records if r.ttft_s is not None],
        "tpots_ms": [r.tpot_s * 1000 for r in records if r.tpot_s is not None],
    }


def bench_serving(url: str, model: Path, out: Path, w: Workload, name: str, index: int) -> dict[str, Any]:
    path = out / f"bench_serving-{name}-{index}.jsonl"
    load = ["--max-concurrency", str(w.concurrency)] if w.concurrency is not None else []
    load += ["--request-rate", str(w.request_rate if w.request_rate is not None else "inf")]
    argv = [
        sys.executable,
        "-c",
        BENCH_SERVING,
        # token ids reach the server unchanged only through --tokenize-prompt, which bench_serving allows
        # with its native backend alone (/generate with input_ids)
        "--backend",
        "sglang",
        "--base-url",
        url,
        "--model",
        str(model),
        "--tokenizer",
        str(model),
        "--dataset-name",
        "random-ids",
        "--tokenize-prompt",
        "--random-input-len",
        str(w.input_len),
        "--random-output-len",
        str(w.output_len),
        "--random-range-ratio",
        "1.0",
        "--num-prompts",
        str(w.prompts),
        *load,
        "--warmup-requests",
        str(w.warmup),
        "--flush-cache",
        "--seed",
        str(7 + index),
        "--disable-tqdm",
        "--output-file",
        str(path),
        "--output-details",  # per-request TTFTs and ITLs: the pooled medians below
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=180)
    (out / f"bench_serving-{name}-{index}.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0 or not path.exists():
        raise SystemExit(f"bench_serving failed (rc {done.returncode}): {done.stderr[-800:]}")
    row = json.loads(path.read_text().strip().splitlines()[-1])
    ok = [i for i, err in enumerate(row.get("errors") or []) if not err]
    return {name: float(row[key]) for name, key in METRICS} | {
        "duration_s": float(row.get("duration", 0)),
        "completed": row.get("completed"),
        "ttfts_ms": [row["ttfts"][i] * 1000 for i in ok],
        # bench_serving's TPOT: (latency - ttft) / (output_len - 1), the decode gaps' sum over the same
        "tpots_ms": [
            sum(row["itls"][i]) * 1000 / (row["output_lens"][i] - 1) for i in ok if row["output_lens"][i] > 1
        ],
    }


def pooled(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Per-request medians over every round: 5 x 160 requests settle where 5 run medians do not."""
    return {
        "ttft_median_ms": statistics.median(v for r in runs for v in r.get("ttfts_ms", ())),
        "tpot_median_ms": statistics.median(v for r in runs for v in r.get("tpots_ms", ())),
    }


def round_interval(a: list[dict[str, Any]], b: list[dict[str, Any]], key: str) -> tuple[float, float]:
    """A 95% bootstrap interval of pooled-median(a) / pooled-median(b) - 1, resampling whole rounds
    (the requests of one round share its server state, so rounds are the independent unit)."""
    import random

    rng = random.Random(0)
    ratios = []
    for _ in range(2000):
        pa = [rng.choice(a) for _ in a]
        pb = [rng.choice(b) for _ in b]
        ratios.append(pooled(pa)[key] / pooled(pb)[key] - 1)
    ratios.sort()
    return ratios[49], ratios[1949]


def compare(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """One workload's figures: the medians of the rounds' medians, the per-request medians pooled over
    the rounds with a round-bootstrap interval, and whether each agrees within TOLERANCE."""
    medians = {
        who: {name: statistics.median(x[name] for x in rows) for name, _ in METRICS}
        for who, rows in runs.items()
        if rows
    }
    diffs = {name: medians["tuner"][name] / medians["bench_serving"][name] - 1 for name, _ in METRICS}
    both = all(r.get("ttfts_ms") for who in ("tuner", "bench_serving") for r in runs[who])
    pooled_medians = {who: pooled(runs[who]) for who in ("tuner", "bench_serving")} if both else {}
    pooled_diff = {
        k: {
            "diff": pooled_medians["tuner"][k] / pooled_medians["bench_serving"][k] - 1,
            "interval95": round_interval(runs["tuner"], runs["bench_serving"], k),
        }
        for k in (pooled_medians.get("tuner") or {})
    }
    return {
        "runs": runs,
        "medians": medians,
        "diff": diffs,
        "pooled_medians": pooled_medians,
        "pooled_diff": pooled_diff,
        "within": {k: abs(v) <= TOLERANCE for k, v in diffs.items()},
    }


def measure_all(
    url: str,
    model: Path,
    out: Path,
    runs: dict[str, dict[str, list[dict[str, Any]]]],
    rounds: int,
    *,
    completions: bool,
) -> None:
    for name in runs:
        w = WORKLOADS[name]
        for r in range(rounds):  # in turns, the order swapped every round
            order = ("tuner", "bench_serving") if r % 2 == 0 else ("bench_serving", "tuner")
            for who in (*order, "tuner_completions") if completions else order:
                if who == "bench_serving":
                    got = bench_serving(url, model, out, w, name, r)
                else:
                    got = tuner_bench(url, w, r, "generate" if who == "tuner" else "completions")
                runs[name][who].append(got)
                figures = ", ".join(f"{k} {v:.2f}" for k, v in got.items() if not isinstance(v, list))
                print(f"{name} round {r} {who}: {figures}", flush=True)


def cmd_bench(
    model: Path,
    out: Path,
    rounds: int,
    port: int = 31000,
    *,
    workloads: tuple[str, ...] = ("long1",),
    completions: bool = True,
) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    url = f"http://127.0.0.1:{port}"
    baseline, total = gpu_used_mib()
    log = (out / "server.log").open("w")
    group = start_server(model, port, log)
    # the tuner over /generate is compared with bench_serving over /generate; the tuner over
    # /v1/completions (the same token ids through SGLang's OpenAI front end) is shown beside them
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        name: {"tuner": [], "bench_serving": [], "tuner_completions": []} for name in workloads
    }
    try:
        t0 = time.monotonic()
        wait_ready(url, group, 600)
        ready_s = time.monotonic() - t0
        group.remember_descendants()
        try:
            measure_all(url, model, out, runs, rounds, completions=completions)
        except KeyboardInterrupt:  # the caller's deadline: what was measured is still reported
            print("interrupted: reporting the rounds measured so far", flush=True)
    finally:
        report = group.stop(sigint_grace_s=10.0, sigterm_grace_s=10.0)
        log.close()
    after, _ = gpu_used_mib()
    results = {
        name: {"workload": WORKLOADS[name].as_dict()} | compare(runs[name])
        for name in workloads
        if runs[name]["tuner"] and runs[name]["bench_serving"]
    }
    result = {
        "sglang": sglang_version(),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "gpu_total_mib": total,
        "server_flags": SERVER_FLAGS,
        "ready_s": ready_s,
        "rounds": rounds,
        "workloads": results,
        "within": {f"{name} {k}": v for name, r in results.items() for k, v in r["within"].items()},
        "teardown_signals": list(report.signals_sent),
        "gpu_used_before_mib": baseline,
        "gpu_used_after_mib": after,
        "sglang_left": sglang_pids(),
    }
    (out / "bench.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def cmd_all(
    tokenizer: Path,
    out: Path,
    rounds: int,
    *,
    tests: str | None,
    bench: bool,
    workloads: tuple[str, ...] = ("long1",),
    completions: bool = True,
) -> int:
    """The model, the bench comparison, then the GPU checks (`tests`: a pytest -k expression; "" for none)."""
    out.mkdir(parents=True, exist_ok=True)
    model = write_model(tokenizer, out / "llama-8b-dummy")
    ok = True
    if bench:
        try:
            got = cmd_bench(model, out, rounds, workloads=workloads, completions=completions)
            ok = all(got["within"].values())
        except (SystemExit, Exception) as exc:  # the GPU checks still run; the failure is in the report
            (out / "bench-error.txt").write_text(f"{type(exc).__name__}: {exc}\n")
            print(f"bench failed: {exc}", flush=True)
            ok = False
        write_report(out)
    if tests != "":
        env = dict(os.environ, TUNER_REAL_MODEL=str(model), TUNER_REAL_REPORT=str(out / "trials.jsonl"))
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "benchmarks"), env.get("PYTHONPATH", "")])
        select = ["-k", tests] if tests else []
        with (out / "pytest.log").open("a") as log:
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    "-v",
                    "-s",
                    "-m",
                    "gpu",
                    "-p",
                    "no:cacheprovider",
                    "-o",
                    "timeout=1200",  # a launch of an 8B model is a minute, not 120 s
                    *select,
                    str(REPO / "tests" / "gpu" / "test_real_sglang.py"),
                ],
                env=env,
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=1800,
            )
        ok = ok and done.returncode == 0
    write_report(out)
    print((out / "report.md").read_text())
    return 0 if ok else 1


def _dash(value: object) -> str:
    return "-" if value is None else str(value)


def write_report(out: Path) -> None:
    lines = [f"# Real SGLang on one GPU ({datetime.now(timezone.utc):%Y-%m-%d})", ""]
    trials = (
        [json.loads(x) for x in (out / "trials.jsonl").read_text().splitlines()]
        if (out / "trials.jsonl").exists()
        else []
    )
    if trials:
        lines += [
            "| check | launch | outcome | stage | KV tokens | free VRAM MiB | teardown s | GPU back | note |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for t in trials:
            lines.append(
                f"| {t['check']} | {t.get('knobs', '')} | {t.get('outcome')} | {t.get('stage') or '-'} | "
                f"{t.get('kv_tokens') or '-'} | {t.get('min_free_mib') or '-'} | "
                f"{_dash(t.get('teardown_s'))} | {t.get('gpu_back', '-')} | "
                f"{(t.get('note') or '')[:160]} |"
            )
        lines.append("")
    bench_path = out / "bench.json"
    if bench_path.exists():
        b = json.loads(bench_path.read_text())
        # a file written before there were several workloads holds one, at its top level
        per_workload = b.get("workloads") or {"closed16": b}
        lines += [
            f"SGLang {b['sglang']}, {b['date']}; server {' '.join(b['server_flags'])}",
        ]
        for name, w in per_workload.items():
            lines += [
                "",
                f"### {name}: {w['workload']}",
                "",
                f"| metric (median of {b['rounds']}) | tuner /generate | bench_serving /generate | diff | "
                "within 2% | tuner /v1/completions |",
                "|---|---|---|---|---|---|",
            ]
            for metric, _ in METRICS:
                t, s = w["medians"]["tuner"][metric], w["medians"]["bench_serving"][metric]
                c = w["medians"].get("tuner_completions", {}).get(metric)
                lines.append(
                    f"| {metric} | {t:.2f} | {s:.2f} | {100 * w['diff'][metric]:+.2f}% | "
                    f"{w['within'][metric]} | {_dash(None if c is None else f'{c:.2f}')} |"
                )
            for k, d in (w.get("pooled_diff") or {}).items():
                t, s = w["pooled_medians"]["tuner"][k], w["pooled_medians"]["bench_serving"][k]
                lo, hi = d["interval95"]
                lines.append(
                    f"| {k}, per request over all rounds | {t:.2f} | {s:.2f} | {100 * d['diff']:+.2f}% "
                    f"[95%: {100 * lo:+.1f}..{100 * hi:+.1f}] | {abs(d['diff']) <= TOLERANCE} | - |"
                )
            for who in [x for x in ("tuner", "bench_serving", "tuner_completions") if w["runs"].get(x)]:
                each = "; ".join(", ".join(f"{r[n]:.1f}" for n, _ in METRICS) for r in w["runs"][who])
                lines.append(f"\n{who} runs (output tok/s, TTFT ms, TPOT ms): {each}")
        lines.append(
            f"\nteardown {b['teardown_signals']}; GPU used {b['gpu_used_before_mib']} -> "
            f"{b['gpu_used_after_mib']} MiB; SGLang processes left: {b['sglang_left'] or 'none'}"
        )
    (out / "report.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("all", "model", "bench", "report"):
        p = sub.add_parser(name)
        p.add_argument("--out", type=Path, required=True)
        if name in ("all", "model"):
            p.add_argument("--tokenizer", type=Path, required=True)
        if name == "bench":
            p.add_argument("--model", type=Path, required=True)
        if name in ("all", "bench"):
            p.add_argument("--rounds", type=int, default=3)
            p.add_argument(
                "--no-completions", action="store_true", help="not the tuner over /v1/completions beside"
            )
            p.add_argument(
                "--workloads",
                default="long1",
                help=f"comma-separated, in order, of {', '.join(WORKLOADS)} (default long1)",
            )
        if name == "all":
            p.add_argument(
                "--tests", default=None, help="a pytest -k expression of the GPU checks ('' for none)"
            )
            p.add_argument("--no-bench", action="store_true", help="the GPU checks only")
    args = ap.parse_args(argv)
    workloads = tuple(x for x in getattr(args, "workloads", "").split(",") if x)
    unknown = [x for x in workloads if x not in WORKLOADS]
    if unknown:
        ap.error(f"unknown workload {', '.join(unknown)}: choose from {', '.join(WORKLOADS)}")
    if args.cmd == "model":
        print(write_model(args.tokenizer, args.out))
        return 0
    if args.cmd == "bench":
        result = cmd_bench(
            args.model, args.out, args.rounds, workloads=workloads, completions=not args.no_completions
        )
        write_report(args.out)
        return 0 if all(result["within"].values()) else 1
    if args.cmd == "report":
        write_report(args.out)
        return 0
    return cmd_all(
        args.tokenizer,
        args.out,
        args.rounds,
        tests=args.tests,
        bench=not args.no_bench,
        workloads=workloads,
        completions=not args.no_completions,
    )


if __name__ == "__main__":
    sys.exit(main())
