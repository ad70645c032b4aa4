"""`NvmlProbe`: the real GPUs through NVML (pynvml), and which of them CUDA_VISIBLE_DEVICES names."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

from tuner.config import GpuInfo
from tuner.errors import GpuError
from tuner.gpu.probe import MIB, GpuMemory, merge_processes

log = logging.getLogger(__name__)


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
                    processes=merge_processes(
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
