"""A small reader of search-space files for the oracle: engine, fixed flags, params, gate, bench.

The product's space loader is not used here (tuner.sim depends only on tuner.errors and
tuner.sglang.options); this reads just what the oracle needs, in the same format
(search_spaces/template.yaml): float/int ranges with step (a grid of `grid` points
without one, geometric when `log`), categoricals, bools, `cuda_graph` and `backend_pair`
choices, `when:` conditions and `forbidden:` combinations. The product's loader stays
the judge of a space's validity; this one assumes a space that passes `tuner validate`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from tuner.errors import ConfigError
from tuner.sglang.options import ArgvError, OptionTable, build_parser, builtin_table
from tuner.sim.oracle import Workload
from tuner.sim.resolve import Launch, resolve_launch
from tuner.sim.scenario import Scenario, load_scenario

DEFAULT_SIM_VERSION = "0.5.9"
Point = dict[str, Any]  # param name -> encoded value ("max:64", "trtllm/trtllm", 0.85, ...)

# knob -> the dests that hold it, newest first (the flag is the table's canonical spelling)
_DESTS = {
    "mem": ("mem_fraction_static",),
    "max_bs": ("cuda_graph_max_bs_decode", "cuda_graph_max_bs"),
    "bs": ("cuda_graph_bs_decode", "cuda_graph_bs"),
    "off": ("disable_cuda_graph",),
    "prefill": ("dsa_prefill_backend", "nsa_prefill_backend"),
    "decode": ("dsa_decode_backend", "nsa_decode_backend"),
}


@dataclass(frozen=True, kw_only=True, slots=True)
class SpaceParam:
    """One searched knob as the oracle needs it."""

    name: str
    kind: str  # float | int | categorical | bool | cuda_graph | backend_pair | attention_backends
    flag: str
    values: tuple[Any, ...]  # every value the oracle tries (encoded)
    when: tuple[tuple[str, tuple[Any, ...]], ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class SimSpace:
    """A space file read for the oracle."""

    path: Path
    name: str
    scenario_ref: str  # built-in name or absolute path
    version: str
    fixed_flags: tuple[tuple[str, Any], ...]
    params: tuple[SpaceParam, ...]
    forbidden: tuple[dict[str, tuple[Any, ...]], ...]
    workload: Workload  # gate_burst 0: no gate
    gate_burst: int | None  # None: the largest captured batch size, at least 8
    constraints: tuple[tuple[str, str, float], ...]  # (metric, ">=" | "<=", value)

    def scenario(self) -> Scenario:
        return load_scenario(self.scenario_ref)

    def points(self) -> Iterator[Point]:
        """Every point of the space (conditions applied, forbidden combinations left out)."""
        yield from (p for p in _expand(self.params, 0, {}) if not self.is_forbidden(p))

    def is_forbidden(self, point: Point) -> bool:
        return any(
            all(k in point and any(_same(point[k], v) for v in vals) for k, vals in rule.items())
            for rule in self.forbidden
        )

    def argv(self, point: Point) -> list[str]:
        """SGLang flags of a point (fixed flags first), spelled for the space's release."""
        table = builtin_table(self.version)
        out: list[str] = []
        for name, value in self.fixed_flags:
            out += _flag_tokens(f"--{name}", value)
        if not any(n == "model-path" for n, _ in self.fixed_flags):
            out += ["--model-path", "/models/oracle"]
        for param in self.params:
            if param.name in point:
                out += _param_tokens(param, point[param.name], table)
        return out

    def launch(self, scenario: Scenario, point: Point) -> Launch:
        """The launch the simulator resolves for a point."""
        return launch_from_argv(scenario, self.version, self.argv(point))

    def workload_for(self, launch: Launch) -> Workload:
        """The workload with the gate's burst size for this launch (as the gate chooses it)."""
        if self.gate_burst is not None or not self.workload.gate_burst:
            return self.workload
        return replace(self.workload, gate_burst=max(8, max(launch.captured_bs, default=0)))


def launch_from_argv(scenario: Scenario, version: str, argv: list[str]) -> Launch:
    """Parse SGLang flags like the release and resolve them like the simulator."""
    try:
        given = vars(_parser(version).parse_args(argv))
    except ArgvError as exc:
        raise ConfigError(f"oracle: SGLang {version} rejects {' '.join(argv)}: {exc}") from exc
    return resolve_launch(scenario, version, given, None)


_PARSERS: dict[str, Any] = {}


def _parser(version: str) -> Any:
    if version not in _PARSERS:
        _PARSERS[version] = build_parser(builtin_table(version), raising=True)
    return _PARSERS[version]


def _spelling(table: OptionTable, knob: str) -> str:
    for dest in _DESTS[knob]:
        specs = [s for s in table.by_dest(dest) if s.kind not in ("removed",)]
        if specs:
            return specs[0].opts[0]
    raise ConfigError(f"oracle: SGLang {table.version} has no flag for {knob}")


def _flag_tokens(flag: str, value: Any) -> list[str]:
    if value is None or value is False:
        return []
    if value is True:
        return [flag]
    if isinstance(value, (list, tuple)):
        return [flag, *(str(v) for v in value)]
    return [flag, str(value)]


def _param_tokens(param: SpaceParam, value: Any, table: OptionTable) -> list[str]:
    if param.kind == "cuda_graph":
        if value == "off":
            return [_spelling(table, "off")]
        if value.startswith("max:"):
            return [_spelling(table, "max_bs"), value[4:]]
        if value.startswith("bs:"):
            return [_spelling(table, "bs"), *value[3:].split(",")]
        return []
    if param.kind == "backend_pair":
        prefill, decode = value.split("/")
        return [_spelling(table, "prefill"), prefill, _spelling(table, "decode"), decode]
    if param.kind == "attention_backends":  # tuner.knobs.attention_backends, read independently
        prefill, decode = value.split("/")
        if prefill == decode:
            return ["--attention-backend", prefill]
        return ["--prefill-attention-backend", prefill, "--decode-attention-backend", decode]
    return _flag_tokens(f"--{param.flag}", value)


def _expand(params: tuple[SpaceParam, ...], i: int, point: Point) -> Iterator[Point]:
    if i == len(params):
        yield dict(point)
        return
    param = params[i]
    active = all(k in point and any(_same(point[k], v) for v in vals) for k, vals in param.when)
    if not active:
        yield from _expand(params, i + 1, point)
        return
    for value in param.values:
        point[param.name] = value
        yield from _expand(params, i + 1, point)
        del point[param.name]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return bool(a == b)


def encode(kind: str, raw: Any) -> Any:
    """A raw YAML value in the form points carry."""
    if kind == "cuda_graph":
        if raw is False or (isinstance(raw, str) and raw.lower() in ("off", "false", "disabled")):
            return "off"
        if raw is True or (isinstance(raw, str) and raw.lower() in ("on", "true", "default")):
            return "on"
        if isinstance(raw, int):
            return f"max:{raw}"
        if isinstance(raw, (list, tuple)):
            return "bs:" + ",".join(str(int(b)) for b in raw)
        text = str(raw).replace(" ", "")
        if text.isdigit():
            return f"max:{text}"
        return text if re.fullmatch(r"(max|bs):[\d,]+", text) else "bs:" + text.strip("[]")
    if kind == "backend_pair":
        return "/".join(p.strip() for p in str(raw).split("/"))
    if kind == "attention_backends":
        parts = [p.strip() for p in str(raw).split("/")]
        return "/".join(parts * 2 if len(parts) == 1 else parts)
    if kind == "float" and not isinstance(raw, bool) and isinstance(raw, (int, float)):
        return float(raw)
    return raw


def _range(spec: dict[str, Any], kind: str, grid: int) -> tuple[Any, ...]:
    low, high, step = spec["low"], spec["high"], spec.get("step")
    if step is not None:
        n = int(round((high - low) / step))
        values = [low + k * step for k in range(n + 1)]
    elif spec.get("log"):
        values = [low * (high / low) ** (k / (grid - 1)) for k in range(grid)]
    else:
        values = [low + (high - low) * k / (grid - 1) for k in range(grid)]
    if kind == "int":
        return tuple(sorted({int(round(v)) for v in values}))
    return tuple(round(float(v), 10) for v in values)


def read_space(path: Path, *, grid: int = 11) -> SimSpace:
    """The oracle's view of a space file (continuous ranges without a step: `grid` points)."""
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"oracle: cannot read space {path}: {' '.join(str(exc).split())}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"oracle: {path}: expected a mapping at the root")
    engine = raw.get("engine") or {}
    scenario = engine.get("scenario")
    if engine.get("kind") != "sim" or not scenario:
        raise ConfigError(f"oracle: {path}: engine.kind must be sim with a scenario (or pass --scenario)")
    scenario_ref = str(scenario)
    if scenario_ref.endswith((".yaml", ".yml")) and not Path(scenario_ref).is_absolute():
        scenario_ref = str((path.parent / scenario_ref).resolve())
    version = str(raw.get("sglang_version") or "auto")
    if version == "auto":
        version = str(engine.get("sim_sglang_version") or DEFAULT_SIM_VERSION)
    params = []
    for spec in raw.get("params") or []:
        kind = spec.get("kind", "categorical")
        name = spec["name"]
        if kind in ("float", "int"):
            values = _range(spec, kind, grid)
        elif kind == "bool":
            values = (False, True)
        else:
            values = tuple(encode(kind, c) for c in spec.get("choices") or ())
        when = tuple((k, _values(_kind_of(raw, k), v)) for k, v in (spec.get("when") or {}).items())
        flag = str(spec.get("flag") or name)
        params.append(SpaceParam(name=name, kind=kind, flag=flag, values=values, when=when))
    forbidden = tuple(
        {k: _values(_kind_of(raw, k), v) for k, v in rule.items() if k != "reason"}
        for rule in raw.get("forbidden") or []
    )
    return SimSpace(
        path=path,
        name=str(raw.get("name") or path.stem),
        scenario_ref=scenario_ref,
        version=version,
        fixed_flags=tuple((str(k), v) for k, v in (raw.get("fixed_flags") or {}).items()),
        params=tuple(params),
        forbidden=forbidden,
        workload=_workload(raw),
        gate_burst=_gate_burst(raw),
        constraints=tuple(_constraint(c, path) for c in raw.get("constraints") or []),
    )


def _values(kind: str, raw: Any) -> tuple[Any, ...]:
    """The encoded values of a `when:` / `forbidden:` entry (one value or a list of values, as the
    product reads it: a CUDA-graph batch-size list inside such a list is [[1, 2, 4]])."""
    return tuple(encode(kind, v) for v in (raw if isinstance(raw, list) else [raw]))


def _gate_burst(raw: dict[str, Any]) -> int | None:
    gate = raw.get("gate") or {}
    if gate.get("enabled", True) is False:
        return 0
    burst = gate.get("burst_size")
    return None if burst is None else int(burst)


def _kind_of(raw: dict[str, Any], name: str) -> str:
    for spec in raw.get("params") or []:
        if spec.get("name") == name:
            return str(spec.get("kind", "categorical"))
    return "categorical"


def _workload(raw: dict[str, Any]) -> Workload:
    bench = raw.get("bench") or {}
    work = bench.get("workload") or {}
    points = bench.get("load_points") or [{"concurrency": 64}]
    point = points[int(bench.get("objective_point", -1))]
    concurrency = int(point.get("concurrency") or 64)
    num_prompts = point.get("num_prompts") or max(32, 5 * concurrency)
    ratio = float(work.get("range_ratio", 1.0))
    gate = raw.get("gate") or {}
    burst = 0 if gate.get("enabled", True) is False else gate.get("burst_size")
    return Workload(
        input_len=max(1, round(int(work.get("input_len", 1024)) * (1 + ratio) / 2)),
        output_len=max(1, round(int(work.get("output_len", 1024)) * (1 + ratio) / 2)),
        concurrency=concurrency,
        num_prompts=int(num_prompts),
        gate_burst=8 if burst is None else int(burst),
    )


def _constraint(text: Any, path: Path) -> tuple[str, str, float]:
    m = re.fullmatch(r"\s*([a-z0-9_]+)\s*(>=|<=)\s*([-+\d.eE]+)\s*", str(text))
    if not m:
        raise ConfigError(
            f"oracle: {path}: constraint {text!r} is not 'metric >= number' or 'metric <= number'"
        )
    return m.group(1), m.group(2), float(m.group(3))
