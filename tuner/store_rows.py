"""TrialResult -> rows of tuner_trials / tuner_requests, and rows -> StoredTrial (pure)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tuner.config import Outcome, Phase, TrialResult
from tuner.store_codec import (
    dumps,
    fields_of,
    finite,
    integer,
    loads,
    pick,
    redact_argv,
    redact_env,
    scrub,
    secret_values,
    to_jsonable,
    utc,
)

# Scalar objective columns -> the spellings a metrics value may use for them (same unit only):
# flat names (SGLang's `p99_ttft_ms`) or nested latency statistics (`ttft.p99_ms`).
METRIC_COLUMNS: dict[str, tuple[str, ...]] = {
    "output_throughput": ("output_throughput", "output_tok_s", "output_tokens_per_s"),
    "total_throughput": ("total_throughput", "total_token_throughput", "total_tok_s"),
    "request_throughput": ("request_throughput", "requests_per_s", "req_s"),
    "ttft_p50_ms": ("ttft_p50_ms", "median_ttft_ms", "p50_ttft_ms", "ttft.median_ms", "ttft.p50_ms"),
    "ttft_p99_ms": ("ttft_p99_ms", "p99_ttft_ms", "ttft.p99_ms"),
    "tpot_p50_ms": ("tpot_p50_ms", "median_tpot_ms", "p50_tpot_ms", "tpot.median_ms", "tpot.p50_ms"),
    "tpot_p99_ms": ("tpot_p99_ms", "p99_tpot_ms", "tpot.p99_ms"),
    "itl_p50_ms": ("itl_p50_ms", "median_itl_ms", "p50_itl_ms", "itl.median_ms", "itl.p50_ms"),
    "itl_p99_ms": ("itl_p99_ms", "p99_itl_ms", "itl.p99_ms"),
    "e2e_p50_ms": ("e2e_p50_ms", "median_e2e_latency_ms", "p50_e2e_ms", "e2e.median_ms", "e2e.p50_ms"),
    "e2e_p99_ms": ("e2e_p99_ms", "p99_e2e_latency_ms", "p99_e2e_ms", "e2e.p99_ms"),
    "concurrency": ("concurrency", "mean_concurrency", "achieved_concurrency"),
}

# Request columns copied out of a RequestRecord for plain SQL -> its field or property spellings.
REQUEST_COLUMNS: dict[str, tuple[str, ...]] = {
    "success": ("success", "ok"),
    "ttft_ms": ("ttft_ms",),
    "tpot_ms": ("tpot_ms",),
    "e2e_ms": ("e2e_ms", "e2e_latency_ms", "latency_ms"),
    "input_tokens": ("input_tokens", "input_tokens_declared", "in_tok", "prompt_tokens"),
    "output_tokens": ("output_tokens", "out_tok", "completion_tokens"),
    "error": ("error", "error_message"),
}
_REQUEST_KIND = {"success": "bool", "input_tokens": "int", "output_tokens": "int", "error": "str"}


@dataclass(frozen=True, kw_only=True, slots=True)
class StoredTrial:
    """One recorded trial as read back from the store; `*_json` columns decoded to plain values."""

    id: int
    study: str
    trial_number: int | None
    attempt: int
    outcome: Outcome
    failure_phase: Phase | None
    failure_message: str | None
    exit_code: int | None
    feasible: bool
    config_hash: str
    config: dict[str, Any]
    params: dict[str, Any]
    argv: tuple[str, ...] | None
    env: dict[str, str] | None
    launch: dict[str, Any] | None
    sglang_version: str
    gpus: tuple[dict[str, Any], ...]
    server: dict[str, Any] | None
    startup_s: float | None
    kv_tokens: int | None
    kv_tokens_log: int | None
    captured_bs: tuple[int, ...] | None
    min_free_mib_per_gpu: tuple[int, ...] | None
    min_free_mib: int | None
    gate_verdict: str | None
    gate_reason: str | None
    gate_answers: tuple[dict[str, Any], ...] | None
    gate: dict[str, Any] | None
    objective_point: str | None
    metrics: dict[str, float | None]  # the METRIC_COLUMNS of the objective load point
    bench: dict[str, Any] | None  # every load point's metrics; request records are in requests()
    client_bound: bool | None
    log_path: str | None
    log_excerpt: str
    timings: dict[str, float]
    started_at: datetime
    finished_at: datetime
    hostname: str
    pid: int
    dedup_of: int | None
    confirm_of: int | None


def _gate_columns(gate: Any) -> dict[str, Any]:
    columns: dict[str, Any] = {"gate_verdict": None, "gate_reason": None, "gate_answers_json": None}
    if gate is None:
        return {**columns, "gate_json": None}
    parts = fields_of(gate)
    if not parts:  # not a dataclass: keep it whole
        return {**columns, "gate_json": dumps(gate)}
    verdict = to_jsonable(parts.pop("verdict", None))
    reason = parts.pop("reason", None)
    answers = parts.pop("answers", None)
    return {
        "gate_verdict": None if verdict is None else str(verdict),
        "gate_reason": None if reason is None else str(reason),
        "gate_answers_json": None if answers is None else dumps(answers),
        "gate_json": dumps(parts),  # the other fields: NaN log lines, burst size, duration
    }


def metric_value(metrics: Any, column: str) -> float | None:
    """One METRIC_COLUMNS value of a metrics value; None when not measured.

    Latency statistics over an empty list read 0 (SGLang's convention); here that is missing.
    """
    names = METRIC_COLUMNS[column]
    group = getattr(metrics, column.split("_")[0], None)
    if column.endswith("_ms") and getattr(group, "count", None) == 0:
        return None
    return finite(pick(metrics, names))


def _point_label(point_result: Any, index: int) -> str:
    label = getattr(getattr(point_result, "point", None), "label", None)
    return str(label) if label else f"p{index}"


def _bench_columns(bench: Any, objective_point: int | None) -> dict[str, Any]:
    empty: dict[str, Any] = dict.fromkeys(METRIC_COLUMNS)
    if bench is None:
        return {**empty, "objective_point": None, "bench_json": None, "client_bound": None}
    parts = fields_of(bench) or {"value": bench}
    points = tuple(parts.pop("points", None) or ())
    summary = []
    for point_result in points:
        point_parts = fields_of(point_result)
        records = point_parts.pop("records", None)
        point_parts["n_records"] = None if records is None else len(records)
        summary.append(point_parts)
    parts["points"] = summary
    client_bound = parts.get("client_bound")
    row = {
        **empty,
        "bench_json": dumps(parts),
        "objective_point": None,
        "client_bound": None if client_bound is None else bool(client_bound),
    }
    if objective_point is None:
        objective_point = integer(getattr(bench, "objective_point", None))
    index = -1 if objective_point is None else objective_point
    if points and -len(points) <= index < len(points):
        chosen = points[index]
        metrics = getattr(chosen, "metrics", None)
        if metrics is not None:
            row.update({col: metric_value(metrics, col) for col in METRIC_COLUMNS})
        row["objective_point"] = _point_label(chosen, index % len(points))
    return row


def trial_row(
    result: TrialResult,
    *,
    study: str,
    trial_number: int | None,
    params: Mapping[str, Any],
    config_hash: str,
    feasible: bool,
    dedup_of: int | None,
    confirm_of: int | None,
    objective_point: int | None,
    hostname: str,
    pid: int,
) -> dict[str, Any]:
    """The tuner_trials row of a result (without id and attempt), secrets redacted everywhere."""
    launch = result.launch
    argv = launch.argv if launch else ()
    env = launch.env if launch else ()
    # Flags in the config or params (e.g. a fixed `api-key` in the space file) count as argv too.
    flag_pairs = [*result.config.flags, *params.items()]
    pseudo_argv = [part for name, value in flag_pairs for part in (f"--{name}", str(value))]
    secrets = secret_values([*argv, *pseudo_argv], env)
    failure = result.failure
    server = result.server
    launch_rest = None
    if launch is not None:
        launch_rest = {k: v for k, v in fields_of(launch).items() if k not in ("argv", "env")}
    row: dict[str, Any] = {
        "study": study,
        "trial_number": trial_number,
        "outcome": result.outcome.value,
        "failure_phase": failure.phase.value if failure else None,
        "failure_message": failure.message if failure else None,
        "exit_code": failure.exit_code if failure else None,
        "feasible": bool(feasible),
        "config_hash": config_hash,
        "config_json": dumps(result.config),
        "params_json": dumps(params),
        "argv_json": dumps(redact_argv(argv)) if launch else None,
        "env_json": dumps(redact_env(env)) if launch else None,
        "launch_json": None if launch_rest is None else dumps(launch_rest),
        "sglang_version": result.sglang_version,
        "gpus_json": dumps(result.gpus),
        "server_json": None if server is None else dumps(server),
        "startup_s": finite(server.startup_s) if server else None,
        "kv_tokens": server.kv_tokens if server else None,
        "kv_tokens_log": server.kv_tokens_log if server else None,
        "captured_bs_json": dumps(server.captured_bs) if server and server.captured_bs is not None else None,
        "min_free_mib_json": None if result.min_free_mib is None else dumps(result.min_free_mib),
        "min_free_mib": min(result.min_free_mib) if result.min_free_mib else None,
        **_gate_columns(result.gate),
        **_bench_columns(result.bench, objective_point),
        "log_path": str(launch.log_path) if launch else None,
        "log_excerpt": result.log_excerpt or (failure.excerpt if failure else ""),
        "timings_json": dumps(result.timings),
        "started_at": utc(result.started_at),
        "finished_at": utc(result.finished_at),
        "hostname": hostname,
        "pid": pid,
        "dedup_of": dedup_of,
        "confirm_of": confirm_of,
    }
    if secrets:
        row = {k: scrub(v, secrets) if isinstance(v, str) else v for k, v in row.items()}
    return row


def _request_value(column: str, value: Any) -> Any:
    kind = _REQUEST_KIND.get(column, "float")
    if value is None:
        return None
    if kind == "bool":
        return bool(value)
    if kind == "int":
        return integer(value)
    if kind == "str":
        return str(to_jsonable(value))
    return finite(value)


def request_rows(bench: Any) -> Iterator[dict[str, Any]]:
    """The tuner_requests rows of every load point's request records (the store adds trial_id)."""
    for index, point_result in enumerate(getattr(bench, "points", None) or ()):
        label = _point_label(point_result, index)
        for seq, record in enumerate(getattr(point_result, "records", None) or ()):
            data = to_jsonable(record)
            row = {col: _request_value(col, pick(record, names)) for col, names in REQUEST_COLUMNS.items()}
            row.update(point_index=index, point_label=label, seq=seq, record_json=dumps(data))
            yield row


def _tuple(value: Any) -> tuple[Any, ...] | None:
    return None if value is None else tuple(value)


def stored_trial(row: Mapping[str, Any]) -> StoredTrial:
    """A StoredTrial from a tuner_trials row (raises ValueError on an outcome this tuner does not know)."""
    argv = loads(row["argv_json"])
    return StoredTrial(
        id=row["id"],
        study=row["study"],
        trial_number=row["trial_number"],
        attempt=row["attempt"],
        outcome=Outcome(row["outcome"]),
        failure_phase=None if row["failure_phase"] is None else Phase(row["failure_phase"]),
        failure_message=row["failure_message"],
        exit_code=row["exit_code"],
        feasible=bool(row["feasible"]),
        config_hash=row["config_hash"],
        config=loads(row["config_json"]),
        params=loads(row["params_json"]),
        argv=_tuple(argv),
        env=loads(row["env_json"]),
        launch=loads(row["launch_json"]),
        sglang_version=row["sglang_version"],
        gpus=tuple(loads(row["gpus_json"])),
        server=loads(row["server_json"]),
        startup_s=row["startup_s"],
        kv_tokens=row["kv_tokens"],
        kv_tokens_log=row["kv_tokens_log"],
        captured_bs=_tuple(loads(row["captured_bs_json"])),
        min_free_mib_per_gpu=_tuple(loads(row["min_free_mib_json"])),
        min_free_mib=row["min_free_mib"],
        gate_verdict=row["gate_verdict"],
        gate_reason=row["gate_reason"],
        gate_answers=_tuple(loads(row["gate_answers_json"])),
        gate=loads(row["gate_json"]),
        objective_point=row["objective_point"],
        metrics={col: row[col] for col in METRIC_COLUMNS},
        bench=loads(row["bench_json"]),
        client_bound=None if row["client_bound"] is None else bool(row["client_bound"]),
        log_path=row["log_path"],
        log_excerpt=row["log_excerpt"],
        timings=loads(row["timings_json"]),
        started_at=utc(row["started_at"]),
        finished_at=utc(row["finished_at"]),
        hostname=row["hostname"],
        pid=row["pid"],
        dedup_of=row["dedup_of"],
        confirm_of=row["confirm_of"],
    )
