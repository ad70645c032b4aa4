"""From parsed flags, scenario and environment to the resolved launch (pure)."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from tuner.sglang.options import version_key
from tuner.sim import memory
from tuner.sim.scenario import BEHAVIOURS, BackendRule, Scenario


def at_least(version: str, floor: str) -> bool:
    return version_key(version) >= version_key(floor)


@dataclass(frozen=True, kw_only=True, slots=True)
class Launch:
    """Every setting of one simulated launch, resolved like SGLang resolves its ServerArgs."""

    version: str
    model_path: str
    served_model_name: str
    host: str
    port: int
    tp_size: int
    visible_gpus: tuple[int, ...]  # physical indices after CUDA_VISIBLE_DEVICES
    mem_fraction_static: float
    chunked_prefill_size: int
    max_running_requests: int | None  # None = from the KV pool
    graphs: bool
    captured_bs: tuple[int, ...]  # () when graphs are off
    cuda_graph_max_bs: int | None
    kv_cache_dtype: str  # resolved (never 'auto')
    prefill_backend: str | None
    decode_backend: str | None
    behaviour: str  # worst behaviour of the backend pair
    unsupported_error: str
    failing_role: str | None = None  # "prefill" or "decode": whose backend set `behaviour`
    prefill_factor: float = 1.0  # x prefill time (the prefill backend's)
    decode_factor: tuple[tuple[int, float], ...] = ((1, 1.0),)  # x decode step time (the decode backend's)
    nan_min_batch: int | None = None  # decode steps of at least this batch give NaN
    nan_graph_only: bool = False  # ... only when replayed from a captured graph
    enable_metrics: bool
    enable_nan_detection: bool
    decode_log_interval: int
    skip_server_warmup: bool
    args: dict[str, Any]  # the ServerArgs-like dict, for the log dump and /server_info

    @property
    def used_gpus(self) -> tuple[int, ...]:
        return self.visible_gpus[: self.tp_size]

    def decode_factor_at(self, batch: int) -> float:
        """The decode backend's step-time factor at `batch` running requests."""
        factor = 1.0
        for min_batch, value in self.decode_factor:
            if batch >= min_batch:
                factor = value
        return factor

    def nan_at(self, batch: int, graph: bool) -> bool:
        """True when a decode step of `batch` requests (in a captured graph or not) gives NaN."""
        if self.behaviour == "garbage":
            return True
        if self.nan_min_batch is None or batch < self.nan_min_batch:
            return False
        return graph or not self.nan_graph_only


def visible_gpus(env_value: str | None, count: int) -> tuple[int, ...]:
    """Physical GPUs seen through CUDA_VISIBLE_DEVICES (enumeration stops at the first bad entry)."""
    if env_value is None:
        return tuple(range(count))
    seen: list[int] = []
    for part in env_value.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) >= count or int(part) in seen:
            break
        seen.append(int(part))
    return tuple(seen)


def default_backends(version: str, kv_dtype: str, sm_major: int, architecture: str) -> tuple[str, str]:
    """SGLang's automatic DSA backends (reference §2.2)."""
    fp8 = kv_dtype.startswith("fp8")
    if not fp8:
        return ("flashmla_sparse", "trtllm") if sm_major >= 10 else ("flashmla_sparse", "fa3")
    if sm_major < 10:
        return (
            ("flashmla_kv", "flashmla_kv")
            if at_least(version, "0.5.11")
            else ("flashmla_auto", "flashmla_kv")
        )
    if not at_least(version, "0.5.10"):
        return "flashmla_auto", "flashmla_kv"
    if at_least(version, "0.5.19") and sm_major == 12 and architecture.startswith("Glm"):
        return "flashinfer_sparse_mla", "flashinfer_sparse_mla"
    return "trtllm", "trtllm"


def _first(given: dict[str, Any], *dests: str) -> Any:
    for dest in dests:
        if dest in given:
            return given[dest]
    return None


def _graph_settings(version: str, given: dict[str, Any]) -> tuple[bool, list[int] | None, int | None]:
    """(enabled, explicit bs list, explicit max bs) across both graph-flag dialects."""
    disabled = bool(given.get("disable_cuda_graph"))
    bs = _first(given, "cuda_graph_bs_decode", "cuda_graph_bs")
    max_bs = _first(given, "cuda_graph_max_bs_decode", "cuda_graph_max_bs")
    if at_least(version, "0.5.14"):
        disabled = disabled or bool(given.get("disable_decode_cuda_graph"))
        if given.get("cuda_graph_backend_decode") == "disabled":
            disabled = True
        config = given.get("cuda_graph_config")
        if config:
            decode = (json.loads(config) or {}).get("decode") or {}
            if decode.get("backend") == "disabled":
                disabled = True
            bs = decode.get("bs", bs)
            max_bs = decode.get("max_bs", max_bs)
    return not disabled, bs, max_bs


@dataclass(frozen=True, kw_only=True, slots=True)
class _Graphs:
    enabled: bool
    captured: tuple[int, ...]  # () when graphs are off
    max_bs: int | None  # the largest size SGLang would capture (also when graphs are off)


GRAPH_FREE_BACKENDS = {"torch_native": "torch native", "flex_attention": "torch Flex Attention"}


def graph_free_backend(given: dict[str, Any]) -> str | None:
    """The attention backend for which SGLang disables CUDA graphs ("Cuda graph is disabled because of
    using torch native attention backend"), or None."""
    backend = given.get("attention_backend")
    return backend if backend in GRAPH_FREE_BACKENDS else None


def _graphs(version: str, given: dict[str, Any], default_max_bs: int) -> _Graphs:
    """The decode graphs SGLang captures for these flags."""
    graphs, bs_list, max_bs = _graph_settings(version, given)
    max_running = given.get("max_running_requests")
    if bs_list:
        captured = tuple(sorted(set(int(b) for b in bs_list)))
        max_bs = max(captured)
    else:
        if max_bs is None:
            max_bs = default_max_bs
            if at_least(version, "0.5.20") and max_running:
                max_bs = min(max_bs, int(max_running))
        captured = memory.default_capture_bs(int(max_bs))
        if at_least(version, "0.5.22") and max_bs not in captured:
            captured = (*captured, int(max_bs))
    if max_running:
        captured = within_request_pool(captured, int(max_running))
    return _Graphs(enabled=graphs, captured=captured if graphs else (), max_bs=max_bs)


def within_request_pool(captured: tuple[int, ...], pool: int) -> tuple[int, ...]:
    """The sizes SGLang captures of a list when its request pool holds `pool` requests (every release's
    get_batch_sizes_to_capture): none larger than the pool; the pool's own size, and the one below,
    added when the list went past it, so the largest batch that can run still has its graph."""
    if captured and max(captured) > pool:
        captured = (*captured, pool - 1, pool)
    return tuple(sorted({b for b in captured if 0 < b <= pool}))


@dataclass(frozen=True, kw_only=True, slots=True)
class _Backends:
    kv_dtype: str  # resolved (never 'auto')
    prefill: str | None
    decode: str | None
    behaviour: str = "ok"
    error: str = ""
    failing_role: str | None = None  # the role whose backend set `behaviour`, when it is not ok
    prefill_rule: BackendRule
    decode_rule: BackendRule
    nan_rules: tuple[BackendRule, ...] = ()


def _with_kv(rule: BackendRule, kv: str) -> BackendRule:
    """A rule whose NaN or garbage needs other KV dtypes behaves as ok with `kv`."""
    if rule.behaviour_kv_dtypes is None or kv in rule.behaviour_kv_dtypes:
        return rule
    return replace(rule, behaviour="ok", nan_min_batch=None, nan_graph_only=False, behaviour_kv_dtypes=None)


def _in_role(rule: BackendRule, role: str) -> BackendRule:
    """A rule whose behaviour holds only in other roles behaves as ok in `role` (its speed stays)."""
    if rule.behaviour_roles is None or role in rule.behaviour_roles:
        return rule
    return replace(
        rule, behaviour="ok", error="", nan_min_batch=None, nan_graph_only=False, behaviour_kv_dtypes=None
    )


def _backends(scenario: Scenario, version: str, given: dict[str, Any]) -> _Backends:
    """KV dtype and attention backends as SGLang resolves them, with the pair's worst behaviour.

    A sparse-attention model reads the --dsa-/--nsa-*-backend pair (unset: SGLang's automatic one);
    any other model the --prefill-/--decode-attention-backend pair over --attention-backend (unset:
    the scenario's default rule, SGLang's own choice for the GPU)."""
    kv = given.get("kv_cache_dtype") or "auto"
    if not scenario.model.sparse_attention:
        both = given.get("attention_backend")
        prefill = given.get("prefill_attention_backend") or both
        decode = given.get("decode_attention_backend") or both
        kv = scenario.model.default_kv_dtype if kv == "auto" else kv
        return _pair(scenario, kv, prefill, decode)
    prefill = _first(given, "dsa_prefill_backend", "nsa_prefill_backend")
    decode = _first(given, "dsa_decode_backend", "nsa_decode_backend")
    if kv == "auto":
        chosen = scenario.backend(decode).kv_dtype if decode else None
        kv = chosen or scenario.model.default_kv_dtype
    auto_p, auto_d = default_backends(version, kv, scenario.gpus.sm_major, scenario.model.architecture)
    forced = (
        version_key("0.5.10") <= version_key(version) < version_key("0.5.11")
        and kv.startswith("fp8")
        and scenario.gpus.sm_major >= 10
    )
    prefill = auto_p if forced or prefill is None else prefill
    decode = auto_d if forced or decode is None else decode
    return _pair(scenario, kv, prefill, decode)


def _on_this_gpu(rule: BackendRule, sm_major: int) -> BackendRule:
    """A backend built for other GPU architectures is unsupported here."""
    if rule.sm_majors is None or sm_major in rule.sm_majors:
        return rule
    archs = ", ".join(f"SM{m}x" for m in rule.sm_majors)
    error = rule.arch_error or f"ValueError: this attention backend requires {archs} (this is SM{sm_major}x)"
    return replace(rule, behaviour="unsupported", error=error)


def _eager_in_prefill(rule: BackendRule) -> BackendRule:
    """A NaN that needs a captured graph never comes from the prefill backend: the graphs of a batch
    size are decode graphs, which run the decode backend's kernels; prefill runs eager, or in graphs
    that break at attention (piecewise, "breakable"), so its attention kernels run eager either way."""
    if not rule.nan_graph_only:
        return rule
    return replace(rule, behaviour="ok", nan_min_batch=None, nan_graph_only=False, behaviour_kv_dtypes=None)


def _pair(scenario: Scenario, kv: str, prefill: str | None, decode: str | None) -> _Backends:
    sm = scenario.gpus.sm_major
    prefill_rule = _eager_in_prefill(_in_role(_with_kv(scenario.backend(prefill), kv), "prefill"))
    prefill_rule = _on_this_gpu(prefill_rule, sm)
    decode_rule = _on_this_gpu(_in_role(_with_kv(scenario.backend(decode), kv), "decode"), sm)
    behaviour, error, failing_role = "ok", "", None
    for role, rule in (("prefill", prefill_rule), ("decode", decode_rule)):
        b = rule.behaviour
        if rule.kv_dtype and rule.kv_dtype != kv and b == "ok":
            b = "garbage"  # a backend that only works with another KV dtype
        if BEHAVIOURS.index(b) > BEHAVIOURS.index(behaviour):
            behaviour, error, failing_role = b, rule.error, role
    return _Backends(
        kv_dtype=kv,
        prefill=prefill,
        decode=decode,
        behaviour=behaviour,
        error=error,
        failing_role=failing_role,
        prefill_rule=prefill_rule,
        decode_rule=decode_rule,
        nan_rules=tuple(r for r in (prefill_rule, decode_rule) if r.nan_min_batch is not None),
    )


def _server_args(
    scenario: Scenario,
    version: str,
    given: dict[str, Any],
    *,
    tp: int,
    fraction: float,
    chunk: int,
    graphs: _Graphs,
    backends: _Backends,
) -> dict[str, Any]:
    """The ServerArgs-like dict the log dump and /server_info show."""
    args = dict(given)
    args.update(
        model_path=given["model_path"],
        served_model_name=given.get("served_model_name") or given["model_path"],
        host=given.get("host") or "127.0.0.1",
        port=int(given.get("port") or 30000),
        mem_fraction_static=fraction,
        chunked_prefill_size=chunk,
        max_running_requests=given.get("max_running_requests"),
        kv_cache_dtype=backends.kv_dtype,
        disable_cuda_graph=not graphs.enabled
        and not (at_least(version, "0.5.14") and graph_free_backend(given) is not None),
    )
    args["tp_size" if at_least(version, "0.5.14") else "tensor_parallel_size"] = tp
    bs_key = "cuda_graph_bs_decode" if at_least(version, "0.5.14") else "cuda_graph_bs"
    args[bs_key] = list(graphs.captured) if graphs.enabled else None
    args[bs_key.replace("_bs", "_max_bs")] = int(graphs.max_bs or 0) if graphs.enabled else None
    if at_least(version, "0.5.14"):
        args["cuda_graph_config"] = _graph_config(given, graphs, chunk)
        if graph_free_backend(given) is not None:  # turned off by SGLang: the flat keys stay as asked
            for key in (bs_key, bs_key.replace("_bs", "_max_bs")):
                args[key] = given.get(key)
    if scenario.model.sparse_attention:
        prefix = "dsa" if at_least(version, "0.5.13") else "nsa"
        args[f"{prefix}_prefill_backend"] = backends.prefill
        args[f"{prefix}_decode_backend"] = backends.decode
        args["attention_backend"] = given.get("attention_backend") or prefix
    return args


def _graph_config(given: dict[str, Any], graphs: _Graphs, chunk: int) -> dict[str, Any]:
    """The resolved `cuda_graph_config` of 0.5.14+ (in the ServerArgs dump and /server_info).

    On 0.5.17 (an H200) the flat `cuda_graph_max_bs_decode` / `disable_*` keys stay as asked; this
    is what was resolved: a backend SGLang turned off (torch_native) is `disabled` here only.
    """
    off = graph_free_backend(given) is not None or bool(given.get("disable_cuda_graph"))
    decode_bs = list(graphs.captured) or list(memory.default_capture_bs(int(graphs.max_bs or 8)))
    prefill_off = off or bool(given.get("disable_prefill_cuda_graph"))
    return {
        "decode": {
            "backend": "full" if graphs.enabled else "disabled",
            "max_bs": int(graphs.max_bs or 0),
            "bs": decode_bs,
        },
        "prefill": {"backend": "disabled" if prefill_off else "breakable", "max_bs": chunk, "bs": None},
    }


def resolve_launch(
    scenario: Scenario,
    version: str,
    given: dict[str, Any],
    cuda_visible_devices: str | None,
    *,
    gpu_count: int | None = None,
) -> Launch:
    """The resolved launch for parsed flags `given` (argparse dests of the release).

    `gpu_count` is how many GPUs CUDA_VISIBLE_DEVICES may name (default: the scenario's).
    """
    tp = int(_first(given, "tp_size", "tensor_parallel_size") or 1)
    total = scenario.gpus.total_mib
    default_chunk, default_max_bs = memory.default_chunk_and_max_bs(total, tp, at_least(version, "0.5.20"))
    chunk = int(given.get("chunked_prefill_size") or default_chunk)
    max_running = given.get("max_running_requests")
    graphs = _graphs(version, given, default_max_bs)
    if graph_free_backend(given) is not None:  # SGLang turns graphs off for these, whatever was asked
        graphs = replace(graphs, enabled=False, captured=())
    fraction = given.get("mem_fraction_static")
    if fraction is None:
        graph_bs = int(graphs.max_bs or 0) if graphs.enabled else 0
        fraction = memory.auto_mem_fraction(total, max(chunk, 0), tp, graph_bs)
    backends = _backends(scenario, version, given)
    args = _server_args(
        scenario, version, given, tp=tp, fraction=fraction, chunk=chunk, graphs=graphs, backends=backends
    )
    nan_rules = backends.nan_rules
    return Launch(
        version=version,
        model_path=args["model_path"],
        served_model_name=args["served_model_name"],
        host=args["host"],
        port=args["port"],
        tp_size=tp,
        visible_gpus=visible_gpus(cuda_visible_devices, gpu_count or scenario.gpus.count),
        mem_fraction_static=float(fraction),
        chunked_prefill_size=chunk,
        max_running_requests=int(max_running) if max_running else None,
        graphs=graphs.enabled,
        captured_bs=graphs.captured,
        cuda_graph_max_bs=int(graphs.max_bs or 0) if graphs.enabled else None,
        kv_cache_dtype=backends.kv_dtype,
        prefill_backend=backends.prefill,
        decode_backend=backends.decode,
        behaviour=backends.behaviour,
        unsupported_error=backends.error,
        failing_role=backends.failing_role,
        prefill_factor=backends.prefill_rule.prefill_factor,
        decode_factor=backends.decode_rule.decode_factor,
        nan_min_batch=min((r.nan_min_batch or 1) for r in nan_rules) if nan_rules else None,
        nan_graph_only=bool(nan_rules) and all(r.nan_graph_only for r in nan_rules),
        enable_metrics=bool(given.get("enable_metrics")),
        enable_nan_detection=bool(given.get("enable_nan_detection")),
        decode_log_interval=int(given.get("decode_log_interval") or 40),
        skip_server_warmup=bool(given.get("skip_server_warmup")),
        args=args,
    )
