"""TrialResult -> rows of tuner_trials / tuner_requests, and rows -> StoredTrial (pure)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tuner.bench.types import BenchResult, LoadPointResult
from tuner.config import Outcome, Phase, ServerFacts, TrialConfig, Verdict
from tuner.gate.checks import GateResult
from tuner.metrics import BENCH_METRICS, bench_values
from tuner.result import TrialResult
from tuner.secrets import redact_argv, redact_env, scrub, secret_values
from tuner.sglang.structured import restore_config
from tuner.store.codec import (
    dumps,
    fields_of,
    finite,
    loads,
    to_jsonable,
    utc,
)


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
    metrics: dict[str, float | None]  # the BENCH_METRICS of the objective load point
    bench: dict[str, Any] | None  # every load point's metrics; request records are in requests()
    client_bound: bool | None
    log_path: str | None
    log_excerpt: str
    timings: dict[str, float]
    started_at: datetime
    finished_at: datetime
    hostname: str
    pid: int
    confirm_of: int | None

    def trial_config(self) -> TrialConfig:
        """The configuration this row measured, decoded from its stored `config` (config_from_dict)."""
        return config_from_dict(self.config)


def config_from_dict(data: Mapping[str, Any]) -> TrialConfig:
    """The TrialConfig of a stored row's `config` (the JSON of the dataclass), the one decoder of it:
    every structured knob restores its own fields (tuner.sglang.structured), so a new one is carried
    without naming it here."""
    return restore_config(data)


def _gate_columns(gate: GateResult | None) -> dict[str, Any]:
    if gate is None:
        return {"gate_verdict": None, "gate_reason": None, "gate_answers_json": None, "gate_json": None}
    parts = fields_of(gate)
    answers = parts.pop("answers")
    parts.pop("verdict"), parts.pop("reason")
    return {
        "gate_verdict": gate.verdict.value,
        "gate_reason": gate.reason,
        "gate_answers_json": dumps(answers),
        "gate_json": dumps(parts),  # the other fields: NaN log lines, burst size, duration
    }


def _point_label(point_result: LoadPointResult, index: int) -> str:
    return point_result.point.label or f"p{index}"


def _bench_columns(
    bench: BenchResult | None, objective_point: int | None, computed: Mapping[str, float | None]
) -> dict[str, Any]:
    """The benchmark's columns; the metric columns as the verdict computed them (`computed`), read
    from another load point only when the caller names one that is not the objective point."""
    empty: dict[str, Any] = dict.fromkeys(BENCH_METRICS)
    if bench is None:
        return {**empty, "objective_point": None, "bench_json": None, "client_bound": None}
    parts = fields_of(bench)
    summary = []
    for point_result in bench.points:
        point_parts = fields_of(point_result)
        point_parts["n_records"] = len(point_parts.pop("records"))
        summary.append(point_parts)
    parts["points"] = summary
    row = {**empty, "bench_json": dumps(parts), "objective_point": None, "client_bound": bench.client_bound}
    index = bench.objective_point if objective_point is None else objective_point
    points = bench.points
    if points and -len(points) <= index < len(points):
        chosen = points[index]
        own = index % len(points) == bench.objective_point % len(points)
        values = {name: computed.get(name) for name in BENCH_METRICS} if own else bench_values(chosen.metrics)
        row.update(values)
        row["objective_point"] = _point_label(chosen, index % len(points))
    return row


def trial_row(
    result: TrialResult,
    *,
    study: str,
    trial_number: int | None,
    params: Mapping[str, Any],
    config_hash: str,
    verdict: Verdict,
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
    row: dict[str, Any] = {
        "study": study,
        "trial_number": trial_number,
        "outcome": verdict.outcome.value,
        "failure_phase": failure.phase.value if failure else None,
        "failure_message": failure.message if failure else None,
        "exit_code": failure.exit_code if failure else None,
        "feasible": verdict.feasible,
        "config_hash": config_hash,
        "config_json": dumps(result.config),
        "params_json": dumps(params),
        **_launch_columns(result),
        "sglang_version": result.sglang_version,
        "gpus_json": dumps(result.gpus),
        **_server_columns(result.server),
        "min_free_mib_json": None if result.min_free_mib is None else dumps(result.min_free_mib),
        "min_free_mib": min(result.min_free_mib) if result.min_free_mib else None,
        **_gate_columns(result.gate),
        **_bench_columns(result.bench, objective_point, verdict.metrics),
        "log_path": str(launch.log_path) if launch else None,
        "log_excerpt": result.log_excerpt or (failure.excerpt if failure else ""),
        "timings_json": dumps(result.timings),
        "started_at": utc(result.started_at),
        "finished_at": utc(result.finished_at),
        "hostname": hostname,
        "pid": pid,
        "confirm_of": confirm_of,
    }
    return {k: scrub(v, secrets) if isinstance(v, str) else v for k, v in row.items()}


def _launch_columns(result: TrialResult) -> dict[str, Any]:
    """argv, env (redacted) and the rest of the launch, with what SGLang reports it ran where that
    is not the request."""
    launch = result.launch
    if launch is None:
        return {"argv_json": None, "env_json": None, "launch_json": None}
    rest = {k: v for k, v in fields_of(launch).items() if k not in ("argv", "env")}
    if result.effective is not None:
        rest.update(effective=to_jsonable(result.effective), effective_key=result.effective_key)
    return {
        "argv_json": dumps(redact_argv(launch.argv)),
        "env_json": dumps(redact_env(launch.env)),
        "launch_json": dumps(rest),
    }


def _server_columns(server: ServerFacts | None) -> dict[str, Any]:
    """What the ready server reported (none for a launch that never got ready)."""
    if server is None:
        return dict.fromkeys(("server_json", "startup_s", "kv_tokens", "kv_tokens_log", "captured_bs_json"))
    return {
        "server_json": dumps(server),
        "startup_s": finite(server.startup_s),
        "kv_tokens": server.kv_tokens,
        "kv_tokens_log": server.kv_tokens_log,
        "captured_bs_json": dumps(server.captured_bs) if server.captured_bs is not None else None,
    }


def request_rows(bench: BenchResult | None) -> Iterator[dict[str, Any]]:
    """The tuner_requests rows of every load point's request records (the store adds trial_id)."""
    for index, point_result in enumerate(bench.points if bench is not None else ()):
        label = _point_label(point_result, index)
        for seq, record in enumerate(point_result.records):
            yield {
                "success": record.success,
                "ttft_ms": finite(record.ttft_ms),
                "tpot_ms": finite(record.tpot_ms),
                "e2e_ms": finite(record.e2e_ms),
                "input_tokens": record.input_tokens,
                "output_tokens": record.output_tokens,
                "error": None if record.error is None else record.error.value,
                "point_index": index,
                "point_label": label,
                "seq": seq,
                "record_json": dumps(to_jsonable(record)),
            }


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
        metrics={col: row[col] for col in BENCH_METRICS},
        bench=loads(row["bench_json"]),
        client_bound=None if row["client_bound"] is None else bool(row["client_bound"]),
        log_path=row["log_path"],
        log_excerpt=row["log_excerpt"],
        timings=loads(row["timings_json"]),
        started_at=utc(row["started_at"]),
        finished_at=utc(row["finished_at"]),
        hostname=row["hostname"],
        pid=row["pid"],
        confirm_of=row["confirm_of"],
    )
