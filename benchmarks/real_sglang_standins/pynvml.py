"""A stand-in NVML for the real-GPU check's dry run (benchmarks/real_sglang_dryrun.py): one 140 GiB
device; while any `sglang.launch_server` process (the simulator behind a stand-in SGLang) lives, 15 GiB
of it are used by that process."""

import os
from pathlib import Path
from types import SimpleNamespace

GIB = 1 << 30


class NVMLError(Exception):  # noqa: N818 - pynvml's own name
    pass


def _holders() -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = (
                (Path("/proc") / entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            )
            state = (Path("/proc") / entry / "stat").read_text().split(")")[-1].split()[0]
        except OSError:
            continue
        if "sglang.launch_server" in cmd and "-c" not in cmd.split()[:2] and state != "Z":
            out.append(int(entry))
    return out


def nvmlInit() -> None:  # noqa: N802 - pynvml's names
    pass


def nvmlShutdown() -> None:  # noqa: N802
    pass


def nvmlDeviceGetCount() -> int:  # noqa: N802
    return 1


def nvmlDeviceGetHandleByIndex(index: int) -> int:  # noqa: N802
    return index


def nvmlDeviceGetName(handle: int) -> str:  # noqa: N802
    return "NVIDIA H200 (stand-in)"


def nvmlDeviceGetUUID(handle: int) -> str:  # noqa: N802
    return "GPU-standin-0"


def nvmlDeviceGetCudaComputeCapability(handle: int) -> tuple[int, int]:  # noqa: N802
    return (9, 0)


def nvmlSystemGetDriverVersion() -> str:  # noqa: N802
    return "580.0"


def nvmlDeviceGetMaxMigDeviceCount(handle: int) -> int:  # noqa: N802
    raise NVMLError("not supported")


def nvmlDeviceGetMigDeviceHandleByIndex(handle: int, index: int) -> int:  # noqa: N802
    raise NVMLError("not supported")


def nvmlDeviceGetMemoryInfo(handle: int, version: object = None) -> SimpleNamespace:  # noqa: N802
    used = 15 * GIB if _holders() else 0
    return SimpleNamespace(total=140 * GIB, used=used, free=140 * GIB - used)


def nvmlDeviceGetComputeRunningProcesses(handle: int) -> list[SimpleNamespace]:  # noqa: N802
    return [SimpleNamespace(pid=pid, usedGpuMemory=15 * GIB) for pid in _holders()[:1]]
