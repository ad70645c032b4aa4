"""Pure memory model: KV-cache size, graph memory, used and free MiB per GPU.

    kv_mib      = fraction x total - weights - static_reserve
    kv_tokens   = kv_mib x 2^20 / kv_bytes_per_token
    idle used   = weights + kv + runtime_overhead + graph
    graph       = n_graphs x graph_mib_per_graph + sum(bs) x graph_mib_per_bs
    capture peak = idle used + capture_workspace + capture_workspace_per_bs x max captured bs
    peak used   = idle used + activation (eager decode: per running request; prefill: per token)

Decode activations of a captured batch live in the graph's own memory pool, so
graph mode adds no decode activation on top (the reason 0.92 with graphs can
survive a load that 0.95 without graphs cannot).
"""

from __future__ import annotations

from dataclasses import dataclass

from tuner.sim.scenario import MemorySpec, Scenario

_KV_DTYPE_FACTOR = {  # relative to an 8-bit KV cache
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
    "mxfp8": 1.0,
    "bf16": 2.0,
    "bfloat16": 2.0,
    "fp4_e2m1": 0.5,
    "nvfp4": 0.5,
    "fp4_mx_block16": 0.5,
}

_TORCH_DTYPE = {
    "fp8_e4m3": "torch.float8_e4m3fn",
    "fp8_e5m2": "torch.float8_e5m2",
    "mxfp8": "torch.float8_e4m3fn",
    "bf16": "torch.bfloat16",
    "bfloat16": "torch.bfloat16",
    "fp4_e2m1": "torch.float4_e2m1fn_x2",
    "nvfp4": "torch.float4_e2m1fn_x2",
    "fp4_mx_block16": "torch.float4_e2m1fn_x2",
}


def torch_kv_dtype(kv_dtype: str) -> str:
    """The torch dtype name SGLang logs for a resolved --kv-cache-dtype."""
    return _TORCH_DTYPE.get(kv_dtype, "torch.bfloat16")


def weights_mib(scenario: Scenario, tp_size: int) -> float:
    """Weights per GPU at `tp_size` ranks."""
    model = scenario.model
    return model.weights_mib_per_gpu * model.reference_tp / max(1, tp_size)


def kv_bytes_per_token(scenario: Scenario, kv_dtype: str) -> float:
    """KV bytes per token per GPU for a resolved KV dtype."""
    return scenario.model.kv_bytes_per_token * _KV_DTYPE_FACTOR.get(kv_dtype, 2.0)


def graph_mib(mem: MemorySpec, bs: tuple[int, ...]) -> float:
    """Memory the captured decode graphs keep."""
    return len(bs) * mem.graph_mib_per_graph + sum(bs) * mem.graph_mib_per_bs


def default_capture_bs(max_bs: int) -> tuple[int, ...]:
    """SGLang's default decode capture list for a max batch size (non-speculative)."""
    sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, max_bs + 1, 32)]
    return tuple(b for b in sizes if b <= max_bs)


def default_chunk_and_max_bs(total_mib: int, tp_size: int, version_new: bool) -> tuple[int, int]:
    """Default chunked_prefill_size and decode max_bs by GPU memory (reference §2.3)."""
    big_tp = tp_size >= 4
    if total_mib < 20 * 1024:
        return 2048, 8
    if total_mib < 35 * 1024:
        return (4096, 160 if big_tp else 48) if version_new else (2048, 80 if big_tp else 24)
    if total_mib < 60 * 1024:
        return 4096, 160 if big_tp else 32
    if total_mib < 160 * 1024:
        return 8192, 512 if big_tp else 256
    return 16384, 512


def auto_mem_fraction(total_mib: int, chunked_prefill: int, tp_size: int, max_bs: int) -> float:
    """SGLang's automatic --mem-fraction-static (roughly its formula)."""
    reserved = 512 + max(chunked_prefill, 2048) * 1.5 + tp_size / 8 * 1024 + max_bs * 2
    if total_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((total_mib - reserved) / total_mib, 3)


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryPlan:
    """Per-GPU memory of one launch, MiB."""

    total_mib: int
    weights_mib: float
    kv_mib: float
    kv_tokens: int
    overhead_mib: float
    graph_mib: float
    max_captured_bs: int = 0

    @property
    def idle_used_mib(self) -> float:
        return self.weights_mib + max(0.0, self.kv_mib) + self.overhead_mib + self.graph_mib

    @property
    def free_mib(self) -> float:
        return self.total_mib - self.idle_used_mib


def plan_memory(
    scenario: Scenario, *, tp_size: int, fraction: float, kv_dtype: str, captured_bs: tuple[int, ...]
) -> MemoryPlan:
    """Memory of a launch once weights, KV pool and graphs are in place."""
    mem = scenario.memory
    total = scenario.gpus.total_mib
    weights = weights_mib(scenario, tp_size)
    kv = fraction * total - weights - mem.static_reserve_mib
    tokens = max(0, int(kv * 2**20 // kv_bytes_per_token(scenario, kv_dtype)))
    return MemoryPlan(
        total_mib=total,
        weights_mib=weights,
        kv_mib=kv,
        kv_tokens=tokens,
        overhead_mib=mem.runtime_overhead_mib,
        graph_mib=graph_mib(mem, captured_bs),
        max_captured_bs=max(captured_bs, default=0),
    )


def enough_for_kv(scenario: Scenario, plan: MemoryPlan) -> bool:
    """False when the pool left for KV is below the scenario's minimum ('Not enough memory')."""
    return plan.kv_mib >= scenario.memory.min_kv_mib and plan.kv_tokens > 0


def capture_peak_mib(scenario: Scenario, plan: MemoryPlan) -> float:
    """Peak while capturing: everything plus the capture workspace (which grows with the largest size)."""
    return plan.idle_used_mib + capture_workspace_mib(scenario, plan.max_captured_bs)


def capture_workspace_mib(scenario: Scenario, max_bs: int) -> float:
    """Transient memory of capturing graphs up to batch `max_bs`."""
    mem = scenario.memory
    return mem.capture_workspace_mib + mem.capture_workspace_mib_per_bs * max_bs


def activation_mib(scenario: Scenario, *, decode_batch: int, graph_mode: bool, prefill_tokens: int) -> float:
    """Transient activation memory of one step."""
    mem = scenario.memory
    decode = 0.0 if graph_mode else decode_batch * mem.eager_act_mib_per_req
    return max(decode, prefill_tokens * mem.prefill_act_mib_per_token)


def mib_to_gb(mib: float) -> float:
    """MiB to the 'GB' SGLang prints (GiB)."""
    return mib / 1024

