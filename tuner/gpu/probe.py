"""GPU memory as a probe reports it: the values and the `GpuProbe` protocol both adapters meet.

Memory is in MiB (2**20 bytes), rounded down. Process ids are the ones the driver
reports: inside a container that does not share the host's PID namespace they are
host pids and match none of ours, so release is then judged by memory alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from tuner.config import GpuInfo

MIB = 1 << 20


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuProcess:
    """A process holding memory on one GPU; used_mib is None where the driver cannot tell."""

    pid: int
    used_mib: int | None


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuMemory:
    """One GPU's memory at one instant; total/free are None where unknown (simulator before it starts)."""

    index: int
    total_mib: int | None
    used_mib: int
    free_mib: int | None
    processes: tuple[GpuProcess, ...] = ()


class GpuProbe(Protocol):
    """What the trial runner needs to know about GPUs."""

    def devices(self) -> tuple[GpuInfo, ...]: ...

    def memory(self, indices: Sequence[int]) -> tuple[GpuMemory, ...]: ...

    def close(self) -> None: ...


def merge_processes(pairs: Iterable[tuple[int, int | None]]) -> tuple[GpuProcess, ...]:
    """One entry per pid (NVML lists a pid once per MIG instance / context), summing known MiB."""
    merged: dict[int, int | None] = {}
    for pid, used in pairs:
        if pid in merged:
            prev = merged[pid]
            merged[pid] = None if prev is None or used is None else prev + used
        else:
            merged[pid] = used
    return tuple(GpuProcess(pid=pid, used_mib=used) for pid, used in sorted(merged.items()))
