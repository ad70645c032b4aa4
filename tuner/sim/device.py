"""GPU-backed mode (`--sim-gpu-backed`): the scheduler child holds real device memory for its model.

What the memory model says the child holds (weights, KV pool, graphs, activation peaks) is
scaled from the scenario's card to the real one (the scenario's `gpus.total_mib` maps onto the
real card's total) and allocated with torch on each of the launch's TP ranks' devices, so NVML
sees it; an over-commit is torch's own CUDA out-of-memory error; exiting gives it back.

torch is imported only when a `DeviceMemory` is first used (in the forked child, never in the
launcher: CUDA must not be initialised before a fork), so the simulator runs without torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

MIB = 1 << 20
CHUNK_MIB = 1024  # memory is held in chunks of this size (and one smaller tail) so it can shrink


class DeviceOutOfMemory(Exception):
    """torch raised CUDA out of memory; the message is torch's."""


class DeviceUnavailable(Exception):
    """No torch, or no CUDA device to hold memory on; the message says which."""


def scale_mib(model_mib: float, scenario_total_mib: float, card_total_mib: float) -> int:
    """MiB to hold on the real card for `model_mib` of the scenario's card (whole MiB, never negative)."""
    if scenario_total_mib <= 0 or card_total_mib <= 0:
        raise ValueError(
            f"GPU totals must be positive (scenario {scenario_total_mib}, card {card_total_mib})"
        )
    return max(0, int(round(model_mib * card_total_mib / scenario_total_mib)))


def plan_chunks(
    held_mib: Sequence[int], target_mib: int, chunk_mib: int = CHUNK_MIB
) -> tuple[int, tuple[int, ...]]:
    """How to go from the chunks held to `target_mib`: (chunks to keep from the front, sizes to add).

    Keeps the longest prefix that fits in the target, then adds full chunks and one tail.
    """
    kept = 0
    total = 0
    for size in held_mib:
        if total + size > target_mib:
            break
        total += size
        kept += 1
    rest = target_mib - total
    full, tail = divmod(rest, chunk_mib)
    return kept, (chunk_mib,) * full + ((tail,) if tail else ())


def oom_line(message: str) -> str:
    """SGLang's log line for torch's out-of-memory error (one line, as the classifier reads it)."""
    text = " ".join(message.split())
    return text if text.startswith("torch.OutOfMemoryError") else f"torch.OutOfMemoryError: {text}"


class DeviceMemory:
    """Real memory on `ranks` CUDA devices (cuda:0.. under CUDA_VISIBLE_DEVICES), sized by the model."""

    def __init__(self, *, ranks: int, scenario_total_mib: int) -> None:
        self.ranks = max(1, ranks)
        self.scenario_total_mib = scenario_total_mib
        self._torch: Any = None
        self._card_total_mib = 0
        self._held: list[list[Any]] = [[] for _ in range(self.ranks)]  # tensors per rank
        self._sizes: list[list[int]] = [[] for _ in range(self.ranks)]  # their MiB

    def _init(self) -> Any:
        if self._torch is None:
            try:
                import torch  # optional: pip install 'sglang-tuner[gpu-sim]'

                _, total = torch.cuda.mem_get_info(0)
            except ImportError as exc:
                raise DeviceUnavailable(
                    f"ImportError: --sim-gpu-backed needs torch (pip install 'sglang-tuner[gpu-sim]'): {exc}"
                ) from None
            except (RuntimeError, AssertionError) as exc:  # no driver, no device, CUDA_VISIBLE_DEVICES=""
                raise DeviceUnavailable(f"RuntimeError: {exc}") from None
            self._torch = torch
            self._card_total_mib = int(total) // MIB
        return self._torch

    @property
    def card_total_mib(self) -> int:
        self._init()
        return self._card_total_mib

    def hold(self, model_mib: float) -> None:
        """Hold what `model_mib` of the scenario's card is on the real card, on every rank.

        Raises DeviceOutOfMemory with torch's message when the card cannot give it (what was
        allocated before the error stays held, as in a real process).
        """
        torch = self._init()
        target = scale_mib(model_mib, self.scenario_total_mib, self._card_total_mib)
        shrunk = False
        for rank in range(self.ranks):
            kept, add = plan_chunks(self._sizes[rank], target)
            if kept < len(self._sizes[rank]):
                del self._held[rank][kept:], self._sizes[rank][kept:]
                shrunk = True
            for size in add:
                try:
                    tensor = torch.empty(size * MIB, dtype=torch.uint8, device=f"cuda:{rank}")
                except torch.cuda.OutOfMemoryError as exc:
                    raise DeviceOutOfMemory(str(exc)) from None
                self._held[rank].append(tensor)
                self._sizes[rank].append(size)
        if shrunk:
            torch.cuda.empty_cache()  # give freed chunks back to the driver, so NVML sees them go

    def held_mib(self) -> tuple[int, ...]:
        """MiB held per rank (allocations only; the CUDA context comes on top)."""
        return tuple(sum(sizes) for sizes in self._sizes)

    def release(self) -> None:
        """Give everything back."""
        for rank in range(self.ranks):
            self._held[rank].clear()
            self._sizes[rank].clear()
        if self._torch is not None:
            self._torch.cuda.empty_cache()
