"""GPU probes, sampler and release waits without a GPU: fake NVML, real files, real child processes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tuner.config import GpuInfo
from tuner.errors import GpuBusyError, GpuError, ReleaseTimeoutError
from tuner.gpu.sampler import (
    MIB,
    FileGpuProbe,
    GpuMemory,
    GpuProcess,
    MemorySampler,
    NvmlProbe,
    check_gpus_free,
    visible_to_nvml,
    wait_for_release,
)


def make_gpu(index: int, uuid: str | None = None, total_mib: int = 97887) -> GpuInfo:
    return GpuInfo(
        index=index,
        uuid=uuid or f"GPU-{index:08x}-aaaa",
        name="Sim",
        compute_capability="12.0",
        total_mib=total_mib,
    )


# --------------------------------------------------------------------------- NVML


class FakeNvmlError(Exception):
    pass


class FakeNvml:
    """The slice of pynvml NvmlProbe uses; `v2` False makes the v2 call fail as on old drivers."""

    NVMLError = FakeNvmlError
    nvmlMemory_v2 = 0x02000028

    def __init__(self, *, v2: bool = True) -> None:
        self.v2 = v2
        self.inits = 0
        self.shutdowns = 0
        self.procs: list[Any] = []

    def nvmlInit(self) -> None:
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return "580.159.04"

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if index >= 2:
            raise FakeNvmlError("Invalid Argument")
        return index

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        return b"NVIDIA H200"

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return f"GPU-{handle}abc"

    def nvmlDeviceGetCudaComputeCapability(self, handle: int) -> tuple[int, int]:
        return (9, 0)

    def nvmlDeviceGetMemoryInfo(self, handle: int, version: int | None = None) -> Any:
        total = 143771 * MIB
        reserved = 615 * MIB
        used = 1000 * MIB
        if version is None:
            return SimpleNamespace(total=total, used=used + reserved, free=total - used - reserved)
        if not self.v2:
            raise FakeNvmlError("Function Not Found")
        return SimpleNamespace(total=total, reserved=reserved, used=used, free=total - used - reserved)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Any]:
        return self.procs


def test_nvml_probe_reads_devices_and_v2_memory() -> None:
    nvml = FakeNvml()
    nvml.procs = [
        SimpleNamespace(pid=41, usedGpuMemory=512 * MIB),
        SimpleNamespace(pid=7, usedGpuMemory=None),
    ]
    probe = NvmlProbe(nvml=nvml)  # type: ignore[arg-type]
    assert probe.devices() == (
        GpuInfo(index=0, uuid="GPU-0abc", name="NVIDIA H200", compute_capability="9.0", total_mib=143771,
                driver="580.159.04"),
        GpuInfo(index=1, uuid="GPU-1abc", name="NVIDIA H200", compute_capability="9.0", total_mib=143771,
                driver="580.159.04"),
    )  # fmt: skip
    (mem,) = probe.memory([1])
    assert probe.memory_api == "v2"
    assert (mem.used_mib, mem.free_mib, mem.total_mib) == (1000, 143771 - 1615, 143771)
    assert mem.processes == (GpuProcess(pid=7, used_mib=None), GpuProcess(pid=41, used_mib=512))
    probe.close()
    probe.close()
    assert (nvml.inits, nvml.shutdowns) == (1, 1)


def test_nvml_probe_falls_back_to_v1_where_the_driver_lacks_v2() -> None:
    probe = NvmlProbe(nvml=FakeNvml(v2=False))  # type: ignore[arg-type]
    (mem,) = probe.memory([0])
    assert probe.memory_api == "v1"
    assert mem.used_mib == 1615  # v1 counts driver-reserved memory as used


def test_nvml_probe_merges_a_pid_listed_twice() -> None:
    nvml = FakeNvml()
    nvml.procs = [
        SimpleNamespace(pid=5, usedGpuMemory=100 * MIB),
        SimpleNamespace(pid=5, usedGpuMemory=28 * MIB),
    ]
    (mem,) = NvmlProbe(nvml=nvml).memory([0])  # type: ignore[arg-type]
    assert mem.processes == (GpuProcess(pid=5, used_mib=128),)


def test_nvml_errors_become_gpu_errors() -> None:
    with pytest.raises(GpuError, match="NVML handle of GPU 5 failed: Invalid Argument"):
        NvmlProbe(nvml=FakeNvml()).memory([5])  # type: ignore[arg-type]


def test_no_driver_gives_a_clear_gpu_error() -> None:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this machine has an NVIDIA driver")
    with pytest.raises(GpuError, match=r"^NVML not available \(no NVIDIA driver\?\): .+; use engine: sim"):
        NvmlProbe()


# --------------------------------------------------------------------------- CUDA_VISIBLE_DEVICES

DEVICES = (
    make_gpu(0, "GPU-8932f937-aaaa"),
    make_gpu(1, "GPU-8932f111-bbbb"),
    make_gpu(2, "GPU-77aa0000-cccc"),
)


@pytest.mark.parametrize(
    ("visible", "expected"),
    [
        (None, (0, 1, 2)),
        ("", ()),
        ("2,0", (2, 0)),
        (" 1 , 2 ", (1, 2)),
        ("0,7,1", (0,)),  # CUDA stops at the first entry naming no device
        ("-1", ()),
        ("GPU-77aa0000-cccc,GPU-8932f937-aaaa", (2, 0)),
        ("GPU-77aa", (2,)),  # a unique prefix
        ("GPU-8932f,2", ()),  # an ambiguous prefix names no device
        ("gpu-8932F111-BBBB", ()),  # CUDA needs the GPU- prefix as written
        ("MIG-GPU-8932f111-bbbb/1/0", (1,)),
        ("MIG-0d5e5b83-0000,MIG-1f00", (2, 0)),
        ("MIG-unknown", ()),
        ("1,1,0", (1, 0)),
    ],
)
def test_visible_to_nvml(visible: str | None, expected: tuple[int, ...]) -> None:
    migs = {"MIG-0d5e5b83-0000": 2, "MIG-1f00": 0}
    assert visible_to_nvml(visible, DEVICES, mig_parents=migs) == expected


# --------------------------------------------------------------------------- simulator files


@pytest.fixture
def holder() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "60"])
    yield proc
    proc.kill()
    proc.wait()


def write_gpus(state: Path, count: int = 2, total_mib: int = 97887) -> None:
    gpus = [{"index": i, "uuid": f"GPU-sim-{i}", "name": "Sim RTX PRO 6000", "compute_capability": "12.0",
             "total_mib": total_mib, "driver": "sim"} for i in range(count)]  # fmt: skip
    (state / "gpus.json").write_text(json.dumps({"gpus": gpus}))


def write_proc(state: Path, pid: int, used: dict[str, int]) -> Path:
    (state / "procs").mkdir(exist_ok=True)
    path = state / "procs" / f"{pid}.json"
    path.write_text(json.dumps({"pid": pid, "used_mib": used}))
    return path


def test_file_probe_sums_live_holders_and_drops_dead_ones(
    tmp_path: Path, holder: subprocess.Popen[bytes]
) -> None:
    write_gpus(tmp_path)
    write_proc(tmp_path, holder.pid, {"0": 81313, "1": 81313})
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = write_proc(tmp_path, dead.pid, {"0": 5000})
    probe = FileGpuProbe(tmp_path)
    assert [d.uuid for d in probe.devices()] == ["GPU-sim-0", "GPU-sim-1"]
    m0, m1 = probe.memory([0, 1])
    assert m0 == GpuMemory(index=0, total_mib=97887, used_mib=81313, free_mib=97887 - 81313,
                           processes=(GpuProcess(pid=holder.pid, used_mib=81313),))  # fmt: skip
    assert m1.used_mib == 81313
    assert not stale.exists()

    holder.send_signal(signal.SIGKILL)
    holder.wait()
    (m0,) = probe.memory([0])
    assert (m0.used_mib, m0.free_mib, m0.processes) == (0, 97887, ())


def test_file_probe_counts_a_zombie_as_gone(tmp_path: Path, holder: subprocess.Popen[bytes]) -> None:
    write_proc(tmp_path, holder.pid, {"0": 100})
    holder.send_signal(signal.SIGKILL)
    os.waitid(os.P_PID, holder.pid, os.WEXITED | os.WNOWAIT)  # dead but not reaped: a zombie
    (m0,) = FileGpuProbe(tmp_path).memory([0])
    assert m0.used_mib == 0 and m0.processes == ()


def test_file_probe_before_the_simulator_published_its_gpus(
    tmp_path: Path, holder: subprocess.Popen[bytes]
) -> None:
    probe = FileGpuProbe(tmp_path / "not-yet")
    assert probe.devices() == ()
    assert probe.memory([0]) == (GpuMemory(index=0, total_mib=None, used_mib=0, free_mib=None),)
    write_proc(tmp_path, holder.pid, {"1": 700})
    (m1,) = FileGpuProbe(tmp_path).memory([1])
    assert (m1.total_mib, m1.used_mib, m1.free_mib) == (None, 700, None)


def test_file_probe_tolerates_half_written_files(tmp_path: Path, holder: subprocess.Popen[bytes]) -> None:
    write_gpus(tmp_path)
    probe = FileGpuProbe(tmp_path)
    assert len(probe.devices()) == 2
    (tmp_path / "gpus.json").write_text('{"gpus": [{"ind')
    assert len(probe.devices()) == 2  # the last good reading stays

    path = write_proc(tmp_path, holder.pid, {"0": 300})
    path.write_text('{"pid": ')  # never read whole: held, amount unknown, on every GPU asked
    m0, m1 = probe.memory([0, 1])
    assert m0.processes == m1.processes == (GpuProcess(pid=holder.pid, used_mib=None),)
    write_proc(tmp_path, holder.pid, {"0": 300})
    probe.memory([0])
    path.write_text("")  # read whole once: the last good reading stays
    assert probe.memory([0])[0].used_mib == 300
    path.unlink()  # vanished between listing and reading, or simply gone
    assert probe.memory([0])[0].processes == ()


def test_wait_for_release_with_a_real_process_and_file_probe(
    tmp_path: Path, holder: subprocess.Popen[bytes]
) -> None:
    write_gpus(tmp_path)
    write_proc(tmp_path, holder.pid, {"0": 81313})
    probe = FileGpuProbe(tmp_path)
    with pytest.raises(ReleaseTimeoutError, match=rf"pid {holder.pid} \(sleep 60\) holds 81313 MiB on GPU 0"):
        wait_for_release(probe, [0], baseline_used_mib=[0], our_pids={holder.pid}, timeout_s=0)
    holder.kill()
    holder.wait()
    assert wait_for_release(probe, [0], baseline_used_mib=[0], our_pids={holder.pid}, timeout_s=5) < 5


# --------------------------------------------------------------------------- waits with a fake clock


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.now += seconds


class FakeProbe:
    """GPU 0 of 100 000 MiB; `timeline` maps the clock to (used MiB, processes)."""

    def __init__(self, clock: FakeClock, timeline: Any) -> None:
        self.clock = clock
        self.timeline = timeline
        self.calls = 0

    def devices(self) -> tuple[GpuInfo, ...]:
        return (make_gpu(0, total_mib=100_000),)

    def memory(self, indices: Sequence[int]) -> tuple[GpuMemory, ...]:
        self.calls += 1
        used, procs = self.timeline(self.clock())
        return tuple(
            GpuMemory(index=i, total_mib=100_000, used_mib=used, free_mib=100_000 - used, processes=procs)
            for i in indices
        )

    def close(self) -> None:
        pass


def test_wait_for_release_returns_when_pids_gone_and_memory_back() -> None:
    clock = FakeClock()

    def timeline(t: float) -> tuple[int, tuple[GpuProcess, ...]]:
        if t < 2.0:
            return 90_000, (GpuProcess(pid=100, used_mib=80_000), GpuProcess(pid=7, used_mib=9_000))
        if t < 3.5:  # process gone, driver still tearing the context down
            return 60_000, (GpuProcess(pid=7, used_mib=9_000),)
        return 10_500, (GpuProcess(pid=7, used_mib=9_000),)  # pid 7 is someone else's, there before

    probe = FakeProbe(clock, timeline)
    waited = wait_for_release(
        probe,
        [0],
        baseline_used_mib=[10_000],
        our_pids={100, 101},
        timeout_s=30,
        clock=clock,
        sleep=clock.sleep,
    )
    assert waited == pytest.approx(3.5)
    assert probe.calls == 36  # polled every 0.1 s, no sleep-and-hope


def test_wait_for_release_tolerance_is_the_larger_of_mib_and_fraction() -> None:
    clock = FakeClock()
    probe = FakeProbe(clock, lambda t: (10_000 + 1_999, ()))  # 2 % of 100 000 MiB is 2 000
    assert (
        wait_for_release(probe, [0], baseline_used_mib=[10_000], our_pids=(), timeout_s=1, clock=clock) == 0
    )
    probe = FakeProbe(clock, lambda t: (10_000 + 2_001, ()))
    with pytest.raises(ReleaseTimeoutError, match="GPU 0 still uses 2001 MiB above its pre-launch baseline"):
        wait_for_release(
            probe, [0], baseline_used_mib=[10_000], our_pids=(), timeout_s=1, clock=clock, sleep=clock.sleep
        )


def test_wait_for_release_timeout_names_the_pids_still_holding() -> None:
    clock = FakeClock()
    probe = FakeProbe(clock, lambda t: (50_000, (GpuProcess(pid=os.getpid(), used_mib=40_000),)))
    with pytest.raises(ReleaseTimeoutError) as err:
        wait_for_release(
            probe,
            [0],
            baseline_used_mib=None,
            our_pids={os.getpid()},
            timeout_s=5,
            clock=clock,
            sleep=clock.sleep,
        )
    assert clock.now == pytest.approx(5.0)
    message = str(err.value)
    assert message.startswith("GPU memory not released after 5 s: ")
    own_command = Path("/proc/self/cmdline").read_bytes().split(b"\0")[0].decode()  # the holder's name
    assert f"pid {os.getpid()} ({own_command}" in message and "holds 40000 MiB on GPU 0" in message


def test_check_gpus_free_policies() -> None:
    clock = FakeClock()
    foreign = (GpuProcess(pid=4242, used_mib=1234), GpuProcess(pid=os.getpid(), used_mib=10))

    def timeline(t: float) -> tuple[int, tuple[GpuProcess, ...]]:
        return (2_000, foreign) if t < 7 else (0, ())

    probe = FakeProbe(clock, timeline)
    with pytest.raises(GpuBusyError, match=r"pid 4242 \(.*\) holds 1234 MiB on GPU 0") as err:
        check_gpus_free(probe, [0], policy="fail", timeout_s=60, clock=clock, sleep=clock.sleep)
    assert not re.search(rf"pid {os.getpid()}\b", str(err.value))  # our own process is not foreign
    assert check_gpus_free(probe, [0], policy="fail", timeout_s=60, our_pids={4242}, clock=clock) == 0
    assert check_gpus_free(probe, [0], policy="ignore", timeout_s=60, clock=clock) == 0
    assert clock.now == 0
    with pytest.raises(GpuBusyError, match="after waiting 3 s"):
        check_gpus_free(probe, [0], policy="wait", timeout_s=3, clock=clock, sleep=clock.sleep)
    assert check_gpus_free(
        probe, [0], policy="wait", timeout_s=10, clock=clock, sleep=clock.sleep
    ) == pytest.approx(4)


# --------------------------------------------------------------------------- sampler


class SteppingProbe:
    """Returns the next scripted reading on each call; signals when the script is used up."""

    def __init__(self, free: list[int | None]) -> None:
        self.free = free
        self.done = threading.Event()

    def memory(self, indices: Sequence[int]) -> tuple[GpuMemory, ...]:
        value = self.free.pop(0) if len(self.free) > 1 else self.free[0]
        if len(self.free) == 1:
            self.done.set()
        if value is None:
            raise GpuError("NVML hiccup")
        return tuple(
            GpuMemory(index=i, total_mib=1000, used_mib=1000 - value, free_mib=value) for i in indices
        )

    def devices(self) -> tuple[GpuInfo, ...]:
        return ()

    def close(self) -> None:
        pass


def test_memory_sampler_keeps_the_minimum_free_and_survives_errors() -> None:
    probe = SteppingProbe([900, 400, None, 100, 700, 800])
    with MemorySampler(probe, [0, 3], interval_s=0.001) as sampler:
        assert probe.done.wait(5)
    assert sampler.min_free_mib == (100, 100)
    assert sampler.max_used_mib == (900, 900)
    assert isinstance(sampler.error, GpuError)
    assert sampler.samples >= 5


def test_memory_sampler_without_free_figures_reports_none(tmp_path: Path) -> None:
    with MemorySampler(FileGpuProbe(tmp_path), [0]) as sampler:
        pass
    assert sampler.samples == 2
    assert sampler.min_free_mib is None
    assert sampler.max_used_mib == (0,)
