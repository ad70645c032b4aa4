"""Commands against a server that is already running: bench (the benchmark stage) and gate.

Both run exactly the stage a trial runs (same client, metrics, self-check and JSON), only
without launching anything: to compare with a deployment, or with SGLang's own bench_serving.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path

from pydantic import ValidationError

from tuner.bench.goodput import goodput_flag, parse_goodput, point_goodput
from tuner.bench.serving_json import bench_serving_records
from tuner.bench.settings import Api, BenchSettings, LoadPoint, Workload, WorkloadKind
from tuner.bench.types import BenchResult, LoadPointResult
from tuner.cli.output import bounded_int, database_arg, server_url, stores_of
from tuner.errors import ConfigError
from tuner.gate.checks import GateResult
from tuner.gate.reference import ReferenceBook, write_reference
from tuner.gate.settings import MAX_BURST, GateSettings, ReferenceSource
from tuner.interrupts import INTERRUPTS
from tuner.names import one_line
from tuner.sglang.auth import API_KEY_ENV, auth_for_url

# the workload and load-point flags, by dest (they build a BenchSettings when --space is not given)
_WORKLOAD_FLAGS = (
    "input_len",
    "output_len",
    "range_ratio",
    "dataset",
    "dataset_kind",
    "api",
    "seed",
    "concurrency",
    "request_rate",
    "num_prompts",
    "warmup_requests",
    "no_flush",
    "settle",
)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add bench, gate and reference to the command line."""
    _register_bench(sub)
    _register_gate(sub)
    ref = sub.add_parser("reference", help="write a reference file from a recorded trial's greedy outputs")
    ref.add_argument("--db", type=database_arg, default=None)
    ref.add_argument("--study", default=None)
    ref.add_argument("--trial", type=bounded_int(0, 1_000_000), required=True, metavar="N")
    ref.add_argument("-o", "--output", type=Path, required=True, metavar="FILE")
    ref.set_defaults(handler=cmd_reference)


def _register_bench(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    bench = sub.add_parser(
        "bench", help="run the benchmark stage against a running server (no launch); bench_serving figures"
    )
    bench.add_argument(
        "--url", required=True, type=server_url, help="the server, e.g. http://127.0.0.1:30000"
    )
    bench.add_argument("--space", type=Path, default=None, help="take workload and load points from here")
    bench.add_argument("--model", default=None, help="model name to send (default: /v1/models' first)")
    bench.add_argument("--json", action="store_true", help="print the whole result as JSON (as `trial`)")
    bench.add_argument(
        "--json-format",
        choices=("tuner", "bench_serving"),
        default="tuner",
        help="with --json: the tuner's result, or one line per load point with sglang.bench_serving's keys",
    )
    bench.add_argument(
        "--goodput",
        nargs="+",
        metavar="KEY:MS",
        default=None,
        help="per-request bounds as bench_serving's --goodput (ttft:300 tpot:40 e2el:2000): print each load "
        "point's request goodput and SLO attainment (default with --space: its TTFT/TPOT/E2E constraints)",
    )
    _add_api_key(bench)
    group = bench.add_argument_group("workload and load points (without --space)")
    group.add_argument("--input-len", type=int, default=None, help="prompt tokens (default 1024)")
    group.add_argument("--output-len", type=int, default=None, help="output tokens (default 1024)")
    group.add_argument("--range-ratio", type=float, default=None, help="lengths uniform on [L*r, L] (1.0)")
    group.add_argument("--dataset-kind", choices=[k.value for k in WorkloadKind], default=None)
    group.add_argument("--dataset", type=Path, default=None, help="sharegpt JSON or JSONL file")
    group.add_argument("--api", choices=[a.value for a in Api], default=None, help="default completions")
    group.add_argument("--seed", type=int, default=None, help="workload seed (default 1)")
    group.add_argument(
        "--concurrency", type=int, action="append", default=None, help="a load point; repeat for several"
    )
    group.add_argument("--request-rate", type=float, default=None, help="requests/s (default: all at once)")
    group.add_argument("--num-prompts", type=int, default=None, help="per load point (default 5 x C, ≥ 32)")
    group.add_argument("--warmup-requests", type=int, default=None, help="default: one per concurrency slot")
    group.add_argument("--no-flush", action="store_true", help="no /flush_cache after the warmup")
    group.add_argument("--settle", type=float, default=None, help="pause before the measured window (1 s)")
    bench.set_defaults(handler=cmd_bench)


def _register_gate(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    gate = sub.add_parser("gate", help="run the correctness / NaN gate against a running server (no launch)")
    gate.add_argument("--url", required=True, type=server_url, help="the server, e.g. http://127.0.0.1:30000")
    gate.add_argument("--space", type=Path, default=None, help="take the gate settings from here")
    gate.add_argument("--model", default=None)
    gate.add_argument(
        "--burst-size",
        type=bounded_int(1, MAX_BURST),
        default=None,
        help="default: the server's largest graph, ≥ 8",
    )
    gate.add_argument("--reference", type=Path, default=None, help="greedy outputs must agree with this file")
    gate.add_argument("--record", type=Path, default=None, help="write this server's greedy outputs here")
    gate.add_argument("--json", action="store_true", help="print the whole result as JSON (as `trial`)")
    _add_api_key(gate)
    gate.set_defaults(handler=cmd_gate)


def _add_api_key(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--api-key",
        default=None,
        help=f"the server's --api-key (default: ${API_KEY_ENV}); sent as a bearer token, never printed",
    )


def stop_requested() -> bool:
    """A stop signal arrived (the handler only records it; the stage acts on it)."""
    return INTERRUPTS.requested


def bench_settings(args: argparse.Namespace) -> BenchSettings:
    """The benchmark settings of the command: the space's, or built from the workload flags."""
    given = [
        f"--{d.replace('_', '-')}" for d in _WORKLOAD_FLAGS if getattr(args, d, None) not in (None, False)
    ]
    if args.space is not None:
        if given:
            raise ConfigError(
                f"bench: {', '.join(given)} given with --space {args.space}; expected one or the other "
                f"(the space's bench section, or the flags)"
            )
        from tuner.space.loader import load_space

        return load_space(args.space).bench
    workload: dict[str, object] = {
        "kind": WorkloadKind(args.dataset_kind) if args.dataset_kind else None,
        "input_len": args.input_len,
        "output_len": args.output_len,
        "range_ratio": args.range_ratio,
        "path": args.dataset,
        "api": Api(args.api) if args.api else None,
        "seed": args.seed,
    }
    if workload["path"] is not None and workload["kind"] is None:
        workload["kind"] = (
            WorkloadKind.JSONL if str(args.dataset).endswith(".jsonl") else WorkloadKind.SHAREGPT
        )
    try:
        return _built_settings(args, workload)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = first.get("loc") or ()
        flag = f"--{str(loc[-1]).replace('_', '-')}: " if loc and loc[-1] != "load_points" else ""
        given = first.get("input")
        got = f" (got {given!r})" if given is not None and not isinstance(given, (dict, list, tuple)) else ""
        raise ConfigError(f"bench: {flag}{first['msg']}{got}") from None


def _built_settings(args: argparse.Namespace, workload: dict[str, object]) -> BenchSettings:
    extra = {"request_rate": args.request_rate, "num_prompts": args.num_prompts}
    points = tuple(
        LoadPoint.model_validate({"concurrency": c, **{k: v for k, v in extra.items() if v is not None}})
        for c in (args.concurrency or [LoadPoint().concurrency])
    )
    settings: dict[str, object] = {
        "workload": Workload.model_validate({k: v for k, v in workload.items() if v is not None}),
        "load_points": points,
        "warmup_requests": args.warmup_requests,
        "flush_cache": not args.no_flush,
    }
    if args.settle is not None:
        settings["settle_s"] = args.settle
    return BenchSettings.model_validate(settings)


def cmd_bench(args: argparse.Namespace) -> int:
    from tuner.bench.runner import benchmark
    from tuner.bench.verdict import failed_line, hang_message
    from tuner.cli.output import print_json

    settings = bench_settings(args)
    bounds = goodput_bounds_of(args)
    auth = auth_for_url(args.api_key)
    stop = stop_requested  # Ctrl-C, SIGTERM, SIGHUP...: every request is cancelled, whatever the server does
    result = benchmark(
        args.url.rstrip("/"), settings, model=args.model, progress=not args.json, auth=auth, stop=stop
    )
    if args.json and args.json_format == "bench_serving":
        for record in bench_serving_records(result, settings, bounds):
            print(json.dumps(record))  # json, as bench_serving writes it (a rate of inf is Infinity)
    elif args.json:
        print_json(result)
    else:
        print("\n".join(bench_lines(result, bounds)))
    metrics = result.objective_metrics
    failed = failed_line(result)
    if failed is not None:
        print(failed, file=sys.stderr)
    if result.hung:
        timeouts = settings.timeouts
        print(f"FAILED: {hang_message(timeouts.first_byte_s, timeouts.idle_read_s)}", file=sys.stderr)
    ok = metrics is not None and metrics.completed and not result.client_bound and not result.hung
    return 0 if ok and failed is None else 1


def goodput_bounds_of(args: argparse.Namespace) -> dict[str, float]:
    """`--goodput`'s bounds; without it, those the space's latency constraints set (else none)."""
    if args.goodput:
        return parse_goodput(args.goodput)
    if args.space is not None:
        from tuner.objectives import latency_bounds
        from tuner.space.loader import load_space

        return latency_bounds(load_space(args.space).constraints)
    return {}


def bench_lines(result: BenchResult, goodput: Mapping[str, float] | None = None) -> list[str]:
    """The result in SGLang bench_serving's words, one block per load point, then the self-check."""
    lines = [f"model {result.model}; {len(result.points)} load point(s); stage {result.duration_s:.1f} s"]
    for point in result.points:
        lines.extend(_point_lines(point))
        if goodput:
            lines.extend(_goodput_lines(point, goodput))
    lag = "-" if result.loop_lag_p99_ms is None else f"{result.loop_lag_p99_ms:.1f} ms"
    verdict = "NOT TRUSTED: the client may have been the bottleneck" if result.client_bound else "ok"
    lines.append(
        f"self-check: client CPU {100 * result.client_cpu_share:.0f}%, event-loop lag p99 {lag}: {verdict}"
    )
    if result.crashed:
        lines.append("the server died during the benchmark: results are partial")
    if result.deadline_hit:
        lines.append("the stage deadline ended the benchmark: results are partial")
    return [one_line(line) for line in lines]  # a server's text (model id, errors) escaped


def _goodput_lines(point: LoadPointResult, bounds: Mapping[str, float]) -> list[str]:
    """bench_serving's goodput line and the SLO attainment of one load point ("-": nothing sent)."""
    found = point_goodput(point.records, bounds, point.metrics.duration_s)
    goodput = f"{found.request_goodput:.2f}" if found else "-"
    attained = f"{found.slo_attainment:.1%} ({found.good} of {found.sent} requests)" if found else "-"
    return [
        f"  {'Request goodput (req/s)':<38} {goodput}",
        f"  {'SLO attainment':<38} {attained} within --goodput {goodput_flag(bounds)}",
    ]


def _point_lines(point: LoadPointResult) -> list[str]:
    m = point.metrics
    errors = ", ".join(f"{name} {count}" for name, count in m.errors) or "none"
    warm = f"{point.warmup_requests} warmup request(s)" if point.warmup_requests else "no warmup"
    flush = "cache flushed" if point.flushed else "no flush"
    rows = [
        ("Successful requests", f"{m.completed}"),
        ("Failed requests", f"{m.failed} ({errors})"),
        ("Benchmark duration (s)", f"{m.duration_s:.2f}"),
        ("Total input tokens", f"{m.total_input_tokens}"),
        ("Total generated tokens", f"{m.total_output_tokens} (from {m.output_tokens_source or '-'})"),
        ("Request throughput (req/s)", f"{m.request_throughput:.2f}"),
        ("Input token throughput (tok/s)", f"{m.input_throughput:.2f}"),
        ("Output token throughput (tok/s)", f"{m.output_throughput:.2f}"),
        ("Total token throughput (tok/s)", f"{m.total_throughput:.2f}"),
        ("Concurrency", f"{m.concurrency:.2f}"),
    ]
    for name, stats in (("TTFT", m.ttft), ("TPOT", m.tpot), ("ITL", m.itl), ("E2E latency", m.e2e)):
        rows.append(
            (
                f"{name} mean / median / p99 (ms)",
                f"{stats.mean_ms:.2f} / {stats.median_ms:.2f} / {stats.p99_ms:.2f}",
            )
        )
    sent = point.metrics.completed + point.metrics.failed
    head = f"== load point {point.point.label}: {sent} requests, {warm}, {flush}"
    return [head, *(f"  {k:<38} {v}" for k, v in rows)]


def gate_settings(args: argparse.Namespace) -> GateSettings:
    """The gate settings of the command: the space's, else the built-in known-answer prompts."""
    settings = GateSettings()
    if args.space is not None:
        from tuner.space.loader import load_space

        settings = load_space(args.space).gate
    if args.burst_size is not None:
        settings = settings.model_copy(update={"burst_size": args.burst_size})
    if args.reference is not None or args.record is not None:
        source = ReferenceSource.FILE if args.reference is not None else ReferenceSource.FIRST
        wanted = settings.reference.model_copy(
            update={"enabled": True, "source": source, "path": args.reference}
        )
        settings = settings.model_copy(update={"reference": wanted})
    return settings


def cmd_gate(args: argparse.Namespace) -> int:
    from tuner.cli.output import check_writable, print_json
    from tuner.gate.run import gate
    from tuner.sglang.server import captured_sizes

    settings = gate_settings(args)
    if args.record is not None:  # a path that cannot be written is refused before the gate runs
        check_writable(args.record, "--record")
    url = args.url.rstrip("/")
    book = ReferenceBook(settings.reference, None) if settings.reference.enabled else None
    auth = auth_for_url(args.api_key)
    result = gate(
        url,
        settings,
        captured_bs=captured_sizes(url, auth),
        model=args.model,
        reference=book,
        auth=auth,
        stop=stop_requested,
    )
    if args.record is not None and result.reference is not None:
        try:
            write_reference(args.record, result.reference.outputs, source=f"server {url}", model=result.model)
        except OSError as exc:
            raise ConfigError(f"--record {args.record}: cannot write: {exc.strerror or exc}") from None
        print(f"wrote {len(result.reference.outputs)} greedy outputs to {args.record}", file=sys.stderr)
    if args.json:
        print_json(result)
    else:
        print("\n".join(gate_lines(result)))
    return 0 if result.passed else 1


def gate_lines(result: GateResult) -> list[str]:
    """The verdict, then one line per answer."""
    burst = f", burst of {result.burst_size}" if result.burst_size else ", no burst"
    why = result.reason or "all answers passed"
    lines = [f"gate {result.verdict.value} in {result.duration_s:.1f} s{burst}: {why}"]
    for a in result.answers:
        why = f" - {a.reason}" if a.reason else ""
        text = " ".join(a.text.split())[:60]
        lines.append(
            f"  {a.round.value:<10} #{a.index:<3} {a.prompt_name:<12} {a.verdict.value:<12} {text!r}{why}"
        )
    for line in result.nan_log_lines[:3]:
        lines.append(f"  NaN log line: {line}")
    check = result.reference
    if check is not None:
        for agreement in check.agreements:
            where = (
                "agrees" if agreement.agrees else f"differs at {agreement.unit} {agreement.first_mismatch}"
            )
            lines.append(f"  reference  {agreement.prompt[:40]!r}: {where} of {agreement.compared}")
    return [one_line(line) for line in lines]  # a server's text (answers, log lines) escaped


def cmd_reference(args: argparse.Namespace) -> int:
    from tuner.gate.reference import GreedyOutput
    from tuner.report.frame import load_study_data
    from tuner.store.connect import database_url

    data = load_study_data(database_url(args.db), args.study, stores=stores_of(args))
    row = data.row_of(args.trial)
    outputs = ((row.gate or {}).get("reference") or {}).get("outputs") if row is not None else None
    if not outputs:
        raise ConfigError(
            f"trial {args.trial} of study {data.name!r}: no greedy outputs recorded; expected a trial run "
            f"with gate.reference.enabled: true"
        )
    answers = [
        GreedyOutput(
            prompt=o["prompt"],
            token_ids=tuple(o["token_ids"]) if o.get("token_ids") else None,
            text=o["text"],
        )
        for o in outputs
    ]
    write_reference(args.output, answers, source=f"study {data.name} trial {args.trial}", model=None)
    print(f"wrote {len(answers)} greedy outputs of trial {args.trial} to {args.output}", file=sys.stderr)
    return 0
