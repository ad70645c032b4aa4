"""Scenario files: the simulated hardware, model, memory and performance models, failure rules."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from tuner.errors import ConfigError
from tuner.sim.scenario_check import Field, ScenarioError, check_batch_map, check_section, fail

# Backend behaviours, mildest first; a pair of backends behaves like its worst member.
BEHAVIOURS = ("ok", "nan", "nan_batched", "garbage", "unsupported")


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
    capture_workspace_mib_per_bs: float = 0.0  # grows with the largest captured batch size
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
    """How one attention backend (sparse, or dense for a model without sparse attention) behaves on
    this GPU, and how fast it is."""

    behaviour: str = "ok"
    kv_dtype: str | None = None  # the KV dtype `auto` resolves to with this backend
    error: str = ""  # the exception line for `unsupported`
    prefill_factor: float = 1.0  # x prefill time when this backend prefills
    decode_factor: tuple[tuple[int, float], ...] = ((1, 1.0),)  # (min batch, x decode step time)
    nan_min_batch: int | None = None  # NaN in decode steps of at least this batch (None: never)
    nan_graph_only: bool = False  # ... and only in steps replayed from a captured CUDA graph
    behaviour_kv_dtypes: tuple[str, ...] | None = None  # nan/garbage only with these KV dtypes; ok otherwise
    behaviour_roles: tuple[str, ...] | None = None  # the behaviour only in these roles (prefill, decode)
    sm_majors: tuple[int, ...] | None = None  # GPU architectures it runs on (None: all); else unsupported
    arch_error: str = ""  # the exception line SGLang raises on another architecture


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
    description: str = ""
    platform: str = "cuda"  # the device runtime whose words the errors are in (logfmt.PLATFORMS)

    def backend(self, name: str | None) -> BackendRule:
        """The rule for backend `name` (None = nothing chosen)."""
        if name is None:
            return self.default_backend
        return self.backends.get(name, self.default_backend)


def parse_scenario(raw: Any, where: str) -> Scenario:
    """Scenario from the parsed YAML mapping `raw` (`where` names it in errors)."""
    if not isinstance(raw, dict):
        raise fail(where, "(root)", "a mapping with gpus, model, memory, perf, backends", raw)
    for key in raw:
        if key not in ROOT_KEYS:
            raise fail(where, str(key), "one of the keys " + ", ".join(ROOT_KEYS), "an unknown key")
    name = raw.get("name", Path(where).stem)
    description = raw.get("description", "")
    for key, value in (("name", name), ("description", description)):
        if not isinstance(value, str):
            raise fail(where, key, "a string", value)
    backends: dict[str, BackendRule] = {}
    raw_backends = raw.get("backends") or {}
    if not isinstance(raw_backends, dict):
        raise fail(where, "backends", "a mapping {backend name: behaviour or rule}", raw_backends)
    for backend, rule in raw_backends.items():
        backends[str(backend)] = parse_backend(rule, where, f"backends.{backend}")
    default = backends.pop("default", BackendRule())
    platform = raw.get("platform", "cuda")
    if platform not in PLATFORMS:
        raise fail(where, "platform", "one of " + ", ".join(PLATFORMS), platform)
    return Scenario(
        name=name,
        description=description,
        platform=platform,
        gpus=GpuSpec(**check_section(raw.get("gpus"), GPU_FIELDS, where, "gpus")),
        model=ModelSpec(**check_section(raw.get("model"), MODEL_FIELDS, where, "model")),
        memory=MemorySpec(**check_section(raw.get("memory"), MEMORY_FIELDS, where, "memory")),
        perf=PerfSpec(**_perf(raw.get("perf"), where)),
        backends=backends,
        default_backend=default,
    )


def _perf(raw: Any, where: str) -> dict[str, Any]:
    values = check_section(raw, PERF_FIELDS, where, "perf")
    extra = values.get("graph_per_req_extra_ms", 0.0)
    if values["per_req_step_ms"] + extra < 0:
        raise fail(where, "perf.graph_per_req_extra_ms", "a value >= -per_req_step_ms", extra)
    return values


def parse_backend(rule: Any, where: str, key: str) -> BackendRule:
    """One `backends:` entry: a behaviour name, or a mapping of rule keys."""
    if isinstance(rule, str) or rule is None:
        rule = {"behaviour": rule}
    values = check_section(rule, BACKEND_FIELDS, where, key)
    if "decode_factor" in values:
        values["decode_factor"] = check_batch_map(values["decode_factor"], where, f"{key}.decode_factor")
    behaviour = values.get("behaviour", "ok")
    if values.get("behaviour_kv_dtypes") is not None:
        values["behaviour_kv_dtypes"] = _kv_dtype_list(values["behaviour_kv_dtypes"], behaviour, where, key)
    if values.get("behaviour_roles") is not None:
        values["behaviour_roles"] = _role_list(values["behaviour_roles"], where, key)
    if values.get("sm_majors") is not None:
        values["sm_majors"] = _sm_majors(values["sm_majors"], where, key)
    if behaviour == "nan_batched":
        values.setdefault("nan_min_batch", 2)
    elif behaviour == "nan":
        values.setdefault("nan_min_batch", 1)
    elif values.get("nan_min_batch") is not None or values.get("nan_graph_only"):
        raise fail(where, f"{key}.behaviour", "nan or nan_batched when nan_min_batch/nan_graph_only is set",
                   behaviour)
    return BackendRule(**values)


def _kv_dtype_list(raw: Any, behaviour: str, where: str, key: str) -> tuple[str, ...]:
    """`behaviour_kv_dtypes`: a non-empty list of KV dtypes, for a nan or garbage behaviour only."""
    if behaviour not in ("nan", "nan_batched", "garbage"):
        raise fail(where, f"{key}.behaviour", "nan, nan_batched or garbage when behaviour_kv_dtypes is set",
                   behaviour)
    if not isinstance(raw, list) or not raw or any(not isinstance(v, str) or v not in KV_DTYPES for v in raw):
        raise fail(where, f"{key}.behaviour_kv_dtypes", "a non-empty list of " + ", ".join(KV_DTYPES), raw)
    return tuple(raw)


def _role_list(raw: Any, where: str, key: str) -> tuple[str, ...]:
    """`behaviour_roles`: a non-empty list of prefill / decode."""
    if not isinstance(raw, list) or not raw or any(v not in ("prefill", "decode") for v in raw):
        raise fail(where, f"{key}.behaviour_roles", "a non-empty list of prefill, decode", raw)
    return tuple(raw)


def _sm_majors(raw: Any, where: str, key: str) -> tuple[int, ...]:
    """`sm_majors`: the GPU architectures (compute-capability majors) a backend runs on."""
    bad = [v for v in raw if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 99] if isinstance(
        raw, list
    ) else [raw]
    if bad or not raw:
        raise fail(where, f"{key}.sm_majors", "a non-empty list of SM majors like [9, 10]", raw)
    return tuple(raw)


def _kv_dtype(value: str) -> str | None:
    return None if value in KV_DTYPES else "one of " + ", ".join(KV_DTYPES)


def _capability(value: str) -> str | None:
    return None if re.fullmatch(r"\d+\.\d+", value) else 'a quoted "MAJOR.MINOR" such as "9.0"'


# KV dtypes a scenario may name (SGLang's --kv-cache-dtype spellings)
KV_DTYPES = ("fp8_e4m3", "fp8_e5m2", "mxfp8", "bf16", "bfloat16", "fp4_e2m1", "nvfp4", "fp4_mx_block16")
# The device platforms a scenario can pretend (SGLang's --device cuda covers ROCm too; the runtime
# underneath decides the words of its errors: logfmt speaks each).
PLATFORMS = ("cuda", "rocm", "ascend", "xpu", "musa")
ROOT_KEYS = ("name", "description", "gpus", "model", "memory", "perf", "backends", "platform")
GPU_FIELDS = {
    "name": Field(kind="str"),
    "compute_capability": Field(kind="str", check=_capability),
    "total_mib": Field(kind="int", above=0),
    "count": Field(kind="int", low=1),
}
MODEL_FIELDS = {
    "name": Field(kind="str"),
    "architecture": Field(kind="str"),
    "dtype": Field(kind="str", default="torch.bfloat16"),
    "weights_mib_per_gpu": Field(kind="float", above=0),
    "reference_tp": Field(kind="int", low=1, default=1),
    "kv_bytes_per_token": Field(kind="int", above=0),
    "context_len": Field(kind="int", low=1),
    "load_s": Field(kind="float", low=0, high=600),
    "sparse_attention": Field(kind="bool", default=False),
    "default_kv_dtype": Field(kind="str", default="bfloat16", check=_kv_dtype),
}
MEMORY_FIELDS = {
    "static_reserve_mib": Field(kind="float", low=0),
    "runtime_overhead_mib": Field(kind="float", low=0),
    "graph_mib_per_graph": Field(kind="float", low=0),
    "graph_mib_per_bs": Field(kind="float", low=0),
    "capture_workspace_mib": Field(kind="float", low=0),
    "capture_workspace_mib_per_bs": Field(kind="float", low=0, default=0.0),
    "eager_act_mib_per_req": Field(kind="float", low=0),
    "prefill_act_mib_per_token": Field(kind="float", low=0),
    "min_kv_mib": Field(kind="float", low=0),
}
PERF_FIELDS = {
    "prefill_tok_s": Field(kind="float", above=0),
    "prefill_chunk_overhead_ms": Field(kind="float", low=0),
    "launch_overhead_ms": Field(kind="float", low=0),
    "base_step_ms": Field(kind="float", above=0),
    "per_req_step_ms": Field(kind="float", low=0),
    "graph_per_req_extra_ms": Field(kind="float", default=0.0),
    "capture_s_per_graph": Field(kind="float", low=0, high=60, default=0.02),
    "noise_pct": Field(kind="float", low=0, high=10, default=2.0),
}
BACKEND_FIELDS = {
    "behaviour": Field(kind="str", choices=BEHAVIOURS, default="ok"),
    "kv_dtype": Field(kind="str", optional=True, default=None, check=_kv_dtype),
    "error": Field(kind="str", default=""),
    "prefill_factor": Field(kind="float", above=0, high=100, default=1.0),
    "decode_factor": Field(kind="any", default=1.0),  # a number or {min batch: factor}: check_batch_map
    "nan_min_batch": Field(kind="int", low=1, optional=True, default=None),
    "nan_graph_only": Field(kind="bool", default=False),
    "behaviour_kv_dtypes": Field(kind="any", optional=True, default=None),  # checked by _kv_dtype_list
    "behaviour_roles": Field(kind="any", optional=True, default=None),  # checked by _role_list
    "sm_majors": Field(kind="any", optional=True, default=None),  # checked by _sm_majors
    "arch_error": Field(kind="str", default=""),
}


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
        detail = " ".join(str(exc).split())
        raise ScenarioError(f"scenario: {where}: not valid YAML: {detail}") from exc
    return parse_scenario(raw, where)
