"""Pure performance model: decode step time by batch size, prefill time, closed-loop throughput.

    eager step_ms(b) = launch_overhead + base + per_req x b
    graph step_ms(b) = base + (per_req + graph_per_req_extra) x pad(b)      (pad = next captured size)
    prefill_s(n)     = n / prefill_tok_s + chunk_overhead per chunk

A batch larger than the largest captured size runs eagerly.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from tuner.sim.scenario import PerfSpec


def padded_bs(batch: int, captured: tuple[int, ...]) -> int | None:
    """The captured size a batch is padded to, or None when it runs eagerly."""
    if not captured or batch <= 0:
        return None
    i = bisect.bisect_left(captured, batch)
    return captured[i] if i < len(captured) else None


def decode_step_ms(perf: PerfSpec, batch: int, captured: tuple[int, ...]) -> float:
    """Time of one decode step for `batch` running requests."""
    padded = padded_bs(batch, captured)
    if padded is None:
        return perf.launch_overhead_ms + perf.base_step_ms + perf.per_req_step_ms * batch
    return perf.base_step_ms + (perf.per_req_step_ms + perf.graph_per_req_extra_ms) * padded


def prefill_s(perf: PerfSpec, tokens: int) -> float:
    """Time of one prefill chunk of `tokens` tokens."""
    return tokens / perf.prefill_tok_s + perf.prefill_chunk_overhead_ms / 1000


@dataclass(frozen=True, kw_only=True, slots=True)
class Throughput:
    """Predicted steady throughput of a closed-loop fixed-length workload."""

    output_tok_s: float
    total_tok_s: float
    cycle_s: float


def predict_closed_loop(
    perf: PerfSpec,
    *,
    concurrency: int,
    input_len: int,
    output_len: int,
    captured: tuple[int, ...],
    chunked_prefill: int,
) -> Throughput:
    """Throughput of `concurrency` clients sending fixed-length requests back to back.

    All clients start together, so requests move in waves: the prompts are
    prefilled in chunks (the last chunk gives each request its first token),
    then output_len - 1 decode steps at batch `concurrency`.
    """
    prompt_tokens = concurrency * input_len
    chunk = chunked_prefill if chunked_prefill > 0 else prompt_tokens
    chunks = max(1, math.ceil(prompt_tokens / chunk))
    prefill = prompt_tokens / perf.prefill_tok_s + chunks * perf.prefill_chunk_overhead_ms / 1000
    decode = (output_len - 1) * decode_step_ms(perf, concurrency, captured) / 1000
    cycle = prefill + decode
    out = concurrency * output_len
    return Throughput(output_tok_s=out / cycle, total_tok_s=(out + prompt_tokens) / cycle, cycle_s=cycle)
