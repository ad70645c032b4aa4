"""GPU probe: who holds how much memory on which GPU, and waiting until it is given back.

Two adapters behind one `GpuProbe` protocol: `NvmlProbe` (the real driver, through
pynvml) and `FileGpuProbe` (files the simulator publishes). On top of either:
`MemorySampler` (minimum free memory over a window), `wait_for_release` (after a
server stops: no process of ours on the GPUs and used memory back at its pre-launch
baseline) and `check_gpus_free` (before a launch: no foreign process on the GPUs).

Memory is in MiB (2**20 bytes), rounded down. Process ids are the ones NVML
reports: inside a container that does not share the host's PID namespace they are
host pids and match none of ours, so release is then judged by memory alone.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any, Literal, Protocol

import psutil

from tuner.config import GpuInfo
from tuner.errors import GpuBusyError, GpuError, ReleaseTimeoutError

log = logging.getLogger(__name__)

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


# --------------------------------------------------------------------------- NVML


class NvmlProbe:
    """The real GPUs through NVML (pynvml, from nvidia-ml-py); initialised once, shut down on close()."""

    def __init__(self, *, nvml: ModuleType | None = None) -> None:
        try:
            if nvml is None:
                import pynvml

                nvml = pynvml
            nvml.nvmlInit()
        except Exception as exc:  # ImportError, NVMLError_LibraryNotFound, DriverNotLoaded, ...
            raise GpuError(
                f"NVML not available (no NVIDIA driver?): {type(exc).__name__}: {exc}; "
                "use engine: sim for the simulator"
            ) from exc
        self._nvml: Any = nvml
        self._open = True
        self._use_v2 = hasattr(nvml, "nvmlMemory_v2")
        self._devices: tuple[GpuInfo, ...] | None = None

    @property
    def memory_api(self) -> str:
        """'v2' (used excludes driver-reserved memory) or 'v1' (older drivers)."""
        return "v2" if self._use_v2 else "v1"

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except self._nvml.NVMLError as exc:
            raise GpuError(f"NVML {what} failed: {exc}") from exc

    def _handle(self, index: int) -> Any:
        return self._call(f"handle of GPU {index}", self._nvml.nvmlDeviceGetHandleByIndex, index)

    def _memory_info(self, handle: Any) -> Any:
        if self._use_v2:
            try:
                return self._nvml.nvmlDeviceGetMemoryInfo(handle, version=self._nvml.nvmlMemory_v2)
            except self._nvml.NVMLError as exc:  # driver without the v2 call: fall back for good
                log.debug("nvmlDeviceGetMemoryInfo v2 unavailable (%s); using v1", exc)
                self._use_v2 = False
        return self._call("memory info", self._nvml.nvmlDeviceGetMemoryInfo, handle)

    def devices(self) -> tuple[GpuInfo, ...]:
        """Every GPU NVML sees, in NVML (PCI bus) order; read once."""
        if self._devices is None:
            nv = self._nvml
            driver = _text(self._call("driver version", nv.nvmlSystemGetDriverVersion))
            count = self._call("device count", nv.nvmlDeviceGetCount)
            infos = []
            for index in range(count):
                handle = self._handle(index)
                major, minor = self._call("compute capability", nv.nvmlDeviceGetCudaComputeCapability, handle)
                infos.append(
                    GpuInfo(
                        index=index,
                        uuid=_text(self._call("UUID", nv.nvmlDeviceGetUUID, handle)),
                        name=_text(self._call("name", nv.nvmlDeviceGetName, handle)),
                        compute_capability=f"{major}.{minor}",
                        total_mib=int(self._memory_info(handle).total) // MIB,
                        driver=driver,
                    )
                )
            self._devices = tuple(infos)
        return self._devices

    def memory(self, indices: Sequence[int]) -> tuple[GpuMemory, ...]:
        """Memory and compute processes of the given NVML indices, now."""
        out = []
        for index in indices:
            handle = self._handle(index)
            info = self._memory_info(handle)
            try:
                raw = self._nvml.nvmlDeviceGetComputeRunningProcesses(handle)
            except self._nvml.NVMLError as exc:  # NotSupported on some vGPU / MIG set-ups
                log.debug("GPU %d: compute processes unavailable: %s", index, exc)
                raw = []
            out.append(
                GpuMemory(
                    index=index,
                    total_mib=int(info.total) // MIB,
                    used_mib=int(info.used) // MIB,
                    free_mib=int(info.free) // MIB,
                    processes=_merge_processes(
                        (int(p.pid), None if p.usedGpuMemory is None else int(p.usedGpuMemory) // MIB)
                        for p in raw
                    ),
                )
            )
        return tuple(out)

    def mig_parents(self) -> dict[str, int]:
        """MIG device UUID -> NVML index of the GPU it lives on (empty without MIG)."""
        nv = self._nvml
        parents: dict[str, int] = {}
        for info in self.devices():
            handle = self._handle(info.index)
            try:
                count = nv.nvmlDeviceGetMaxMigDeviceCount(handle)
            except nv.NVMLError:
                continue
            for slot in range(count):
                try:
                    mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
                    parents[_text(nv.nvmlDeviceGetUUID(mig))] = info.index
                except nv.NVMLError:
                    continue
        return parents

    def close(self) -> None:
        if self._open:
            self._open = False
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError as exc:
                log.debug("nvmlShutdown: %s", exc)


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _merge_processes(pairs: Any) -> tuple[GpuProcess, ...]:
    """One entry per pid (NVML lists a pid once per MIG instance / context), summing known MiB."""
    merged: dict[int, int | None] = {}
    for pid, used in pairs:
        if pid in merged:
            prev = merged[pid]
            merged[pid] = None if prev is None or used is None else prev + used
        else:
            merged[pid] = used
    return tuple(GpuProcess(pid=pid, used_mib=used) for pid, used in sorted(merged.items()))


def visible_to_nvml(
    cuda_visible_devices: str | None,
    devices: Sequence[GpuInfo],
    *,
    mig_parents: Mapping[str, int] | None = None,
) -> tuple[int, ...]:
    """NVML indices of the GPUs a process sees under CUDA_VISIBLE_DEVICES.

    Entries are indices, GPU UUIDs or unique UUID prefixes (`GPU-8932f937`), MIG UUIDs
    (`MIG-...`, resolved through `mig_parents`, see `NvmlProbe.mig_parents`) or the old
    `MIG-GPU-<uuid>/<gi>/<ci>` form. As CUDA does, the list ends at the first entry that
    names no device (so "-1" hides all GPUs) and unset means all. Indices assume
    CUDA_DEVICE_ORDER=PCI_BUS_ID, the order NVML uses; launchers should set it.
    """
    if cuda_visible_devices is None:
        return tuple(d.index for d in devices)
    by_position = {pos: d.index for pos, d in enumerate(devices)}
    out: list[int] = []
    for raw in cuda_visible_devices.split(","):
        entry = raw.strip()
        index = _resolve_visible(entry, devices, by_position, mig_parents or {})
        if index is None:
            break
        if index not in out:
            out.append(index)
    return tuple(out)


def _resolve_visible(
    entry: str, devices: Sequence[GpuInfo], by_position: Mapping[int, int], mig_parents: Mapping[str, int]
) -> int | None:
    if entry.lstrip("+-").isdigit():
        return by_position.get(int(entry))
    if entry.startswith("MIG-GPU-"):
        entry = entry[len("MIG-") :].split("/", 1)[0]
    elif entry.startswith("MIG-"):
        return mig_parents.get(entry)
    if not entry.startswith("GPU-"):
        return None
    matches = [d.index for d in devices if d.uuid.lower().startswith(entry.lower())]
    return matches[0] if len(matches) == 1 else None


# --------------------------------------------------------------------------- simulator files


class FileGpuProbe:
    """GPUs as the simulator publishes them under `state_dir`.

    `gpus.json`: {"gpus": [{"index", "uuid", "name", "compute_capability", "total_mib", "driver"}]}.
    `procs/<pid>.json`: {"pid": <pid>, "used_mib": {"<index>": MiB, ...}}, one per process holding
    memory; writers should write a temporary file and rename it. A file counts while its pid is
    alive (not a zombie); files of dead pids are removed. Before gpus.json exists, devices() is
    empty and memory() reports used MiB from live files with total_mib and free_mib None. A live
    process whose file cannot be read (half written) is reported on every GPU asked for with
    used_mib None, so nobody mistakes it for gone; its last good reading is used when there is one.
    """

    def __init__(self, state_dir: Path | str) -> None:
        self.state_dir = Path(state_dir)
        self._devices: tuple[GpuInfo, ...] = ()
        self._last_good: dict[Path, dict[int, int]] = {}

    def devices(self) -> tuple[GpuInfo, ...]:
        try:
            data = json.loads((self.state_dir / "gpus.json").read_text())
            self._devices = tuple(
                GpuInfo(
                    index=int(g["index"]),
                    uuid=str(g["uuid"]),
                    name=str(g["name"]),
                    compute_capability=str(g["compute_capability"]),
                    total_mib=int(g["total_mib"]),
                    driver=str(g.get("driver", "sim")),
                )
                for g in data["gpus"]
            )
        except FileNotFoundError:
            self._devices = ()
        except (OSError, ValueError, KeyError, TypeError) as exc:  # half written: keep the last good one
            log.debug("%s/gpus.json unreadable (%s); keeping last reading", self.state_dir, exc)
        return self._devices

    def memory(self, indices: Sequence[int]) -> tuple[GpuMemory, ...]:
        totals = {d.index: d.total_mib for d in self.devices()}
        held: dict[int, list[tuple[int, int | None]]] = {i: [] for i in indices}
        for pid, usage in self._live_holders():
            for index in indices:
                if usage is None:
                    held[index].append((pid, None))
                elif usage.get(index):
                    held[index].append((pid, usage[index]))
        out = []
        for index in indices:
            used = sum(mib for _, mib in held[index] if mib is not None)
            total = totals.get(index)
            out.append(
                GpuMemory(
                    index=index,
                    total_mib=total,
                    used_mib=used,
                    free_mib=None if total is None else max(total - used, 0),
                    processes=_merge_processes(held[index]),
                )
            )
        return tuple(out)

    def _live_holders(self) -> list[tuple[int, dict[int, int] | None]]:
        try:
            paths = sorted((self.state_dir / "procs").glob("*.json"))
        except OSError:
            return []
        holders = []
        for path in paths:
            try:
                pid = int(path.stem)
            except ValueError:
                continue
            if not _alive(pid):
                path.unlink(missing_ok=True)
                self._last_good.pop(path, None)
                continue
            usage = self._read_usage(path)
            if usage is not False:
                holders.append((pid, usage))
        return holders

    def _read_usage(self, path: Path) -> dict[int, int] | None | Literal[False]:
        """MiB per index; None when unreadable and never read; False when the file vanished."""
        try:
            data = json.loads(path.read_text())
            usage = {int(k): int(v) for k, v in data["used_mib"].items()}
        except FileNotFoundError:
            self._last_good.pop(path, None)
            return False
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return self._last_good.get(path)
        self._last_good[path] = usage
        return usage

    def close(self) -> None:
        self._last_good.clear()


def _alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:  # exists, but we may not look inside
        return True


# --------------------------------------------------------------------------- sampling and waiting


class MemorySampler:
    """Background thread recording the minimum free and maximum used MiB per GPU over its window.

    Use as a context manager; it samples once on entry and once on exit, and every
    `interval_s` between. A probe error is kept in `.error` and sampling goes on.
    """

    def __init__(self, probe: GpuProbe, indices: Sequence[int], *, interval_s: float = 0.1) -> None:
        self._probe = probe
        self._indices = tuple(indices)
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._min_free: list[int | None] = [None] * len(self._indices)
        self._max_used: list[int | None] = [None] * len(self._indices)
        self.samples = 0
        self.error: Exception | None = None

    def __enter__(self) -> MemorySampler:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> MemorySampler:
        self._sample()
        self._thread = threading.Thread(target=self._run, name="gpu-memory-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self._sample()

    @property
    def min_free_mib(self) -> tuple[int, ...] | None:
        """Lowest free MiB seen per GPU, in the order given; None until every GPU reported a free figure."""
        with self._lock:
            values = list(self._min_free)
        return None if any(v is None for v in values) else tuple(v for v in values if v is not None)

    @property
    def max_used_mib(self) -> tuple[int, ...] | None:
        """Highest used MiB seen per GPU, in the order given; None before the first sample."""
        with self._lock:
            values = list(self._max_used)
        return None if any(v is None for v in values) else tuple(v for v in values if v is not None)

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._sample()

    def _sample(self) -> None:
        try:
            snapshot = self._probe.memory(self._indices)
        except Exception as exc:  # keep sampling: one failed read must not end a trial
            if self.error is None:
                log.warning("GPU memory sampling failed: %s", exc)
            self.error = exc
            return
        with self._lock:
            self.samples += 1
            for pos, mem in enumerate(snapshot):
                if mem.free_mib is not None:
                    low = self._min_free[pos]
                    self._min_free[pos] = mem.free_mib if low is None else min(low, mem.free_mib)
                high = self._max_used[pos]
                self._max_used[pos] = mem.used_mib if high is None else max(high, mem.used_mib)


def wait_for_release(
    probe: GpuProbe,
    indices: Sequence[int],
    *,
    baseline_used_mib: Sequence[int] | None,
    our_pids: Collection[int],
    timeout_s: float,
    tolerance_mib: int = 256,
    tolerance_frac: float = 0.02,
    poll_s: float = 0.1,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> float:
    """Seconds until no pid of ours holds memory on `indices` and used MiB is back at the baseline.

    "Back" means within max(tolerance_mib, tolerance_frac * total) of `baseline_used_mib`
    (per index, same order; None checks processes only). Raises ReleaseTimeoutError naming
    the pids (with command lines) and MiB still held after `timeout_s`.
    """
    start = clock()
    ours = set(our_pids)
    while True:
        snapshot = probe.memory(indices)
        holders = [(mem.index, p) for mem in snapshot for p in mem.processes if p.pid in ours]
        excess = [
            (mem.index, mem.used_mib - base)
            for mem, base in zip(snapshot, baseline_used_mib or (), strict=False)
            if mem.used_mib - base > max(tolerance_mib, tolerance_frac * (mem.total_mib or 0))
        ]
        waited = clock() - start
        if not holders and not excess:
            return waited
        if waited >= timeout_s:
            parts = [_holder(i, p) for i, p in holders]
            parts += [f"GPU {i} still uses {mib} MiB above its pre-launch baseline" for i, mib in excess]
            raise ReleaseTimeoutError(f"GPU memory not released after {timeout_s:.0f} s: " + "; ".join(parts))
        sleep(min(poll_s, max(timeout_s - waited, 0.0)))


def check_gpus_free(
    probe: GpuProbe,
    indices: Sequence[int],
    *,
    policy: Literal["wait", "fail", "ignore"],
    timeout_s: float,
    our_pids: Collection[int] = (),
    poll_s: float = 0.5,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> float:
    """Before a launch: seconds waited until no foreign process holds memory on `indices`.

    policy "fail" raises GpuBusyError at once, "wait" raises it after `timeout_s`,
    "ignore" logs a warning and returns 0. Our own pids and this process are not foreign.
    """
    mine = set(our_pids) | {os.getpid()}
    start = clock()
    while True:
        snapshot = probe.memory(indices)
        foreign = [(mem.index, p) for mem in snapshot for p in mem.processes if p.pid not in mine]
        waited = clock() - start
        if not foreign:
            return waited
        what = "; ".join(_holder(i, p) for i, p in foreign)
        if policy == "ignore":
            log.warning("GPUs %s are not free, launching anyway: %s", list(indices), what)
            return 0.0
        if policy == "fail" or waited >= timeout_s:
            after = "" if policy == "fail" else f" after waiting {timeout_s:.0f} s"
            raise GpuBusyError(
                f"GPUs {list(indices)} are busy{after}: {what} "
                "(stop those processes, or set the GPU policy to wait or ignore)"
            )
        sleep(min(poll_s, max(timeout_s - waited, 0.0)))


def _holder(index: int, proc: GpuProcess) -> str:
    held = "an unknown amount" if proc.used_mib is None else f"{proc.used_mib} MiB"
    return f"pid {proc.pid} ({_command(proc.pid)}) holds {held} on GPU {index}"


def _command(pid: int) -> str:
    try:
        cmdline = psutil.Process(pid).cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
        return "command unknown"
    text = " ".join(" ".join(cmdline).split()) or "command unknown"  # one line, even for `python -c "..."`
    return text if len(text) <= 160 else text[:157] + "..."
