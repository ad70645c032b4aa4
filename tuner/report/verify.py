"""The "verify with" lines of an export: the study's objective load point as a `tuner bench --url`
command and as SGLang's own `python -m sglang.bench_serving` command (pure).

The workload and load point are read from the space file stored with the study. The SGLang form
uses the spelling README documents for 0.5.23 (`--dataset-name random-ids --tokenize-prompt`,
fixed lengths with `--random-range-ratio`, `--max-concurrency`, `--request-rate`); a ShareGPT
workload uses `--dataset-name sharegpt --dataset-path`. A study with TTFT/TPOT/E2E constraints
adds `--goodput` with the per-request bounds they set (tuner.objectives.latency_bounds), so both
commands print the goodput and SLO attainment the study stored. The model path and port are the
export's (port 30000, the launch script's default).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from tuner.bench.goodput import goodput_flag
from tuner.objectives import latency_bounds
from tuner.report.why import slos_of

__all__ = ["verify_lines"]

DEFAULT_URL = "http://127.0.0.1:30000"


def _space(space_text: str | None) -> Mapping[str, Any]:
    try:
        loaded = yaml.safe_load(space_text or "")
    except yaml.YAMLError:
        return {}
    return loaded if isinstance(loaded, Mapping) else {}


def _point(bench: Mapping[str, Any]) -> Mapping[str, Any]:
    points = bench.get("load_points") or [{}]
    points = points if isinstance(points, list) and points else [{}]
    index = bench.get("objective_point", -1)
    index = index if isinstance(index, int) and -len(points) <= index < len(points) else -1
    found = points[index]
    return found if isinstance(found, Mapping) else {}


def _model(argv: Sequence[str]) -> str | None:
    for flag in ("--model-path", "--model"):
        if flag in argv and argv.index(flag) + 1 < len(argv):
            return argv[argv.index(flag) + 1]
    return None


def verify_lines(space_text: str | None, argv: Sequence[str] = ()) -> tuple[str, ...]:
    """`verify with: tuner bench --url ...` and `... or: python -m sglang.bench_serving ...` for the
    study's objective load point; a line saying why when the workload was not stored with the study."""
    bench = _space(space_text).get("bench")
    if not isinstance(bench, Mapping):
        return ("verify with: the workload was not stored with this study; run `python -m tuner bench --url "
                f"{DEFAULT_URL} --space FILE` with its space file",)  # fmt: skip
    found = bench.get("workload")
    wl: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    point = _point(bench)
    ilen, olen = int(wl.get("input_len", 1024)), int(wl.get("output_len", 1024))
    ratio = float(wl.get("range_ratio", 1.0))
    conc = point.get("concurrency", 64)
    rate = point.get("request_rate")
    prompts = point.get("num_prompts") or max(32, 5 * (conc or 32))
    kind = str(wl.get("kind", "random"))
    ours = ["python", "-m", "tuner", "bench", "--url", DEFAULT_URL]
    if kind == "random":
        ours += ["--input-len", str(ilen), "--output-len", str(olen), "--range-ratio", f"{ratio:g}"]
    else:
        ours += ["--dataset-kind", kind, "--dataset", str(wl.get("path", "DATASET"))]
    if conc:
        ours += ["--concurrency", str(conc)]
    if rate:
        ours += ["--request-rate", f"{rate:g}"]
    ours += ["--num-prompts", str(prompts)]
    theirs = ["python", "-m", "sglang.bench_serving", "--backend", "sglang", "--base-url", DEFAULT_URL]
    if kind == "sharegpt":
        theirs += ["--dataset-name", "sharegpt", "--dataset-path", str(wl.get("path", "DATASET"))]
    else:
        theirs += ["--dataset-name", "random-ids", "--tokenize-prompt"]
        theirs += ["--random-input-len", str(ilen), "--random-output-len", str(olen)]
        theirs += ["--random-range-ratio", f"{ratio:g}"]
    theirs += ["--num-prompts", str(prompts)]
    if conc:
        theirs += ["--max-concurrency", str(conc)]
    theirs += ["--request-rate", f"{rate:g}" if rate else "inf", "--flush-cache"]
    bounds = latency_bounds(slos_of(space_text))  # the study's latency constraints, per request
    if bounds:
        ours += ["--goodput", *goodput_flag(bounds).split()]
        theirs += ["--goodput", *goodput_flag(bounds).split()]
    model = _model(argv)
    if model:
        theirs += ["--tokenizer", model]
    return (f"verify with: {shlex.join(ours)}", f"  or SGLang's own client: {shlex.join(theirs)}")
