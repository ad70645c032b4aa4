"""Scenario files: the simulated hardware, model, memory and performance models, failure rules."""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from tuner.errors import ConfigError

# Backend behaviours, mildest first; a pair of backends behaves like its worst member.
BEHAVIOURS = ("ok", "nan_batched", "garbage", "unsupported")


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuSpec:
    """The GPUs of the simulated machine (all alike)."""

    name: str
    compute_capability: str
    total_mib: int
    count: int

    @property
    def sm_major(self) -> int:
        return int(self.compute_capability.split(".")[0])


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelSpec:
    """The served model as the memory and log models need it."""

    name: str
    architecture: str
    dtype: str = "torch.bfloat16"
    weights_mib_per_gpu: float  # at reference_tp ranks; scales as 1/tp
    reference_tp: int = 1
    kv_bytes_per_token: int  # per GPU, for an 8-bit KV cache
    context_len: int
    load_s: float
    sparse_attention: bool = False  # a DSA (NSA) model: logs the backend choice, honours --*-backend
    default_kv_dtype: str = "bfloat16"


@dataclass(frozen=True, kw_only=True, slots=True)
class MemorySpec:
    """Linear memory model, MiB per GPU."""

    static_reserve_mib: float
    runtime_overhead_mib: float
    graph_mib_per_graph: float
    graph_mib_per_bs: float
    capture_workspace_mib: float
    eager_act_mib_per_req: float
    prefill_act_mib_per_token: float
    min_kv_mib: float


@dataclass(frozen=True, kw_only=True, slots=True)
class PerfSpec:
    """Performance model: step time as a function of the running batch."""

    prefill_tok_s: float
    prefill_chunk_overhead_ms: float
    launch_overhead_ms: float  # per decode step, removed when the padded batch was captured
    base_step_ms: float
    per_req_step_ms: float
    graph_per_req_extra_ms: float = 0.0  # graph-mode all-reduce path cost per request
    capture_s_per_graph: float = 0.02
    noise_pct: float = 2.0


@dataclass(frozen=True, kw_only=True, slots=True)
class BackendRule:
    """How one sparse-attention backend behaves on this GPU."""

    behaviour: str = "ok"
    kv_dtype: str | None = None  # the KV dtype `auto` resolves to with this backend
    error: str = ""  # the exception line for `unsupported`


@dataclass(frozen=True, kw_only=True, slots=True)
class Scenario:
    """Everything the simulator pretends about one deployment."""

    name: str
    gpus: GpuSpec
    model: ModelSpec
    memory: MemorySpec
    perf: PerfSpec
    backends: dict[str, BackendRule] = field(default_factory=dict)
    default_backend: BackendRule = field(default_factory=BackendRule)

    def backend(self, name: str | None) -> BackendRule:
        """The rule for backend `name` (None = nothing chosen)."""
        if name is None:
            return self.default_backend
        return self.backends.get(name, self.default_backend)


def _section(raw: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = raw.get(key)
    if not isinstance(value, dict):
        raise ConfigError(f"scenario: section '{key}' must be a mapping in {where}")
    return value


def _build(cls: type, raw: dict[str, Any], where: str) -> Any:
    try:
        return cls(**raw)
    except TypeError as exc:
        raise ConfigError(f"scenario: {cls.__name__}: {exc} in {where}") from exc


def parse_scenario(raw: Any, where: str) -> Scenario:
    """Scenario from the parsed YAML mapping `raw` (`where` names it in errors)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"scenario: root must be a mapping in {where}")
    backends: dict[str, BackendRule] = {}
    for name, rule in (raw.get("backends") or {}).items():
        rule = {"behaviour": rule} if isinstance(rule, str) else dict(rule)
        if rule.get("behaviour", "ok") not in BEHAVIOURS:
            raise ConfigError(
                f"scenario: backend {name}: behaviour must be one of {BEHAVIOURS} "
                f"(got {rule.get('behaviour')!r}) in {where}"
            )
        backends[str(name)] = _build(BackendRule, rule, where)
    default = backends.pop("default", BackendRule())
    return Scenario(
        name=str(raw.get("name") or Path(where).stem),
        gpus=_build(GpuSpec, _section(raw, "gpus", where), where),
        model=_build(ModelSpec, _section(raw, "model", where), where),
        memory=_build(MemorySpec, _section(raw, "memory", where), where),
        perf=_build(PerfSpec, _section(raw, "perf", where), where),
        backends=backends,
        default_backend=default,
    )


def builtin_names() -> tuple[str, ...]:
    """Names of the scenarios shipped in tuner/sim/scenarios."""
    files = resources.files("tuner.sim").joinpath("scenarios").iterdir()
    return tuple(sorted(f.name[: -len(".yaml")] for f in files if f.name.endswith(".yaml")))


def load_scenario(name_or_path: str) -> Scenario:
    """A built-in scenario by name, or a YAML file by path."""
    path = Path(name_or_path)
    if name_or_path.endswith((".yaml", ".yml")) or path.exists():
        if not path.is_file():
            raise ConfigError(f"scenario: no such file {name_or_path}")
        text, where = path.read_text(), str(path)
    else:
        if name_or_path not in builtin_names():
            raise ConfigError(
                f"scenario: unknown name {name_or_path!r}; expected one of {builtin_names()} or a path"
            )
        ref = resources.files("tuner.sim").joinpath("scenarios").joinpath(f"{name_or_path}.yaml")
        text, where = ref.read_text(), f"tuner/sim/scenarios/{name_or_path}.yaml"
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"scenario: bad YAML in {where}: {exc}") from exc
    return parse_scenario(raw, where)
