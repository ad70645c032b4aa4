"""The largest decode batch SGLang's own CUDA-graph list captures, when a launch names no list.

    default_graph_max_bs(total_mib, tp_size, release) -> int
    captured_sizes(max_bs, listed, pool) -> the batch sizes it captures

SGLang picks the decode graphs' max batch size from the GPU's memory and the tensor-parallel size
(reference/sglang.md §2.3: ServerArgs' GPU-memory settings, 0.5.9 `_handle_gpu_memory_settings`,
0.5.23 `arg_groups/memory_hook.py`), then captures its list up to it, never past the running-request
cap (the request pool). The two releases differ only below 35 GB; releases between them take the
later row (not checked one by one). Facts of the release, not a measurement: a launch that reports
its captured list (/server_info, the capture log line) says what it really captured.
"""

from __future__ import annotations

import re

GIB = 1024  # the table's thresholds are MiB multiples of 1024, as SGLang writes them


def default_graph_max_bs(total_mib: float, tp_size: int, release: str | None = None) -> int:
    """The decode graphs' max batch size SGLang picks for a GPU of `total_mib` at this TP size."""
    big_tp = tp_size >= 4
    if total_mib < 20 * GIB:
        return 8
    if total_mib < 35 * GIB:
        if _at_most(release, (0, 5, 9)):
            return 80 if big_tp else 24
        return 160 if big_tp else 48
    if total_mib < 60 * GIB:
        return 160 if big_tp else 32
    if total_mib < 160 * GIB:
        return 512 if big_tp else 256
    return 512


def _at_most(release: str | None, bound: tuple[int, ...]) -> bool:
    """Whether `release` ("0.5.9", "0.5.10rc1") is `bound` or earlier; False when it does not parse."""
    if not release:
        return False
    found = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", release.strip())
    if found is None:
        return False
    return tuple(int(g or 0) for g in found.groups()) <= bound


def captured_sizes(
    max_bs: int | None, listed: tuple[int, ...] | None = None, pool: int | None = None
) -> tuple[int, ...]:
    """The decode batch sizes SGLang captures: the `listed` sizes, or its default list up to `max_bs`
    ([1, 2, 4, 8, 12], 16-256 by 8, 272-496 by 16, 512 up by 32, and `max_bs` itself), none past a
    request pool of `pool` requests (the pool's size and the one below added when the list went past
    it, so the largest batch that can run keeps a graph)."""
    if listed:
        sizes = sorted(set(listed))
    elif max_bs:
        steps = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, max_bs + 1, 32)]
        sizes = sorted({b for b in steps if b <= max_bs} | {max_bs})
    else:
        return ()
    if pool and sizes and sizes[-1] > pool:
        sizes = sorted({b for b in sizes if b <= pool} | {b for b in (pool - 1, pool) if b > 0})
    return tuple(sizes)
