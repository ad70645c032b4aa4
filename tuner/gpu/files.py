"""`FileGpuProbe`: GPUs as the simulator publishes them in files (no driver needed)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

from tuner.config import GpuInfo
from tuner.gpu import statefile
from tuner.gpu.probe import GpuMemory, merge_processes
from tuner.host import pid_alive

log = logging.getLogger(__name__)


class FileGpuProbe:
    """GPUs as the simulator publishes them under `state_dir` (format: tuner.gpu.statefile).

    A process file counts while its pid is alive (not a zombie); files of dead pids are removed.
    Before gpus.json exists, devices() is empty and memory() reports used MiB from live files with
    total_mib and free_mib None. A live process whose file cannot be read (half written) is reported
    on every GPU asked for with used_mib None, so nobody mistakes it for gone; its last good reading
    is used when there is one.
    """

    def __init__(self, state_dir: Path | str, *, publish: Callable[[], None] | None = None) -> None:
        self.state_dir = Path(state_dir)
        self._devices: tuple[GpuInfo, ...] = ()
        self._last_good: dict[Path, dict[int, int]] = {}
        self._publish = publish  # writes gpus.json before any server has (asked once, when missing)

    def devices(self) -> tuple[GpuInfo, ...]:
        if self._publish is not None and not (self.state_dir / statefile.GPUS_FILE).exists():
            publish, self._publish = self._publish, None
            publish()
        try:
            self._devices = tuple(
                GpuInfo(
                    index=g.index,
                    uuid=g.uuid,
                    name=g.name,
                    compute_capability=g.compute_capability,
                    total_mib=g.total_mib,
                    driver=g.driver,
                )
                for g in statefile.read_gpus(self.state_dir)
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
                    processes=merge_processes(held[index]),
                )
            )
        return tuple(out)

    def _live_holders(self) -> list[tuple[int, dict[int, int] | None]]:
        holders = []
        for pid, path in statefile.proc_files(self.state_dir):
            if not pid_alive(pid):
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
            usage = statefile.read_proc(path)
        except FileNotFoundError:
            self._last_good.pop(path, None)
            return False
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return self._last_good.get(path)
        self._last_good[path] = usage
        return usage

    def close(self) -> None:
        self._last_good.clear()
