"""How much the host keeps a process group from a CPU: the run-queue figures, the window, the verdict."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable

import pytest

from tuner.host import CpuPressure, CpuWatch, group_schedstat, task_schedstat

linux_schedstat = pytest.mark.skipif(
    task_schedstat("self", threading.get_native_id()) is None, reason="Linux schedstats not reported here"
)
SECOND = 1_000_000_000


@pytest.mark.parametrize(
    ("wait_share", "load_per_cpu", "starved"),
    [
        (0.75, 3.0, True),  # other work queued ahead of the server on a crowded host
        (0.75, 0.8, False),  # it waited, but the host had CPUs to spare: its own threads crowded it
        (0.05, 3.0, False),  # a busy host that still gave the server its CPU time
        (0.2, 3.0, False),  # at the limit, not past it
    ],
)
def test_starved_needs_both_the_group_s_wait_and_a_crowded_host(
    wait_share: float, load_per_cpu: float, starved: bool
) -> None:
    assert CpuPressure(wait_share=wait_share, load_per_cpu=load_per_cpu).starved(0.2) is starved


def test_the_description_names_the_wait_and_the_load() -> None:
    said = CpuPressure(wait_share=0.68, load_per_cpu=3.1).describe()
    assert "68%" in said and "3.1 per CPU" in said


def _watch(
    run_per_s: float, wait_per_s: float, *, idle_after: float | None = None
) -> tuple[CpuWatch, list[float]]:
    """A watch over a fake group that runs and waits these CPU-seconds per second of wall time."""
    clock = [0.0]

    def read(_: Iterable[int]) -> tuple[int, int]:
        t = clock[0] if idle_after is None else min(clock[0], idle_after)
        return int(run_per_s * t * SECOND), int(wait_per_s * t * SECOND)

    return CpuWatch(lambda: [1], read=read, load=lambda: 3.0), clock


def _run_for(watch: CpuWatch, clock: list[float], seconds: float) -> None:
    while clock[0] < seconds:
        clock[0] += 0.25
        watch.sample(clock[0])


def test_a_group_kept_waiting_over_the_window_is_starved() -> None:
    watch, clock = _watch(run_per_s=0.5, wait_per_s=1.5)
    _run_for(watch, clock, 100.0)
    got = watch.pressure(clock[0])
    assert got is not None and got.wait_share == pytest.approx(0.75, abs=0.01) and got.starved(0.2)


def test_only_the_last_window_counts() -> None:
    """Starved at start-up (imports on a busy host), then running freely: judged by the recent stretch."""
    clock = [0.0]

    def read(_: Iterable[int]) -> tuple[int, int]:
        t = clock[0]
        wait = min(t, 20.0) * 1.5  # waited only in the first 20 s
        return int(0.5 * t * SECOND), int(wait * SECOND)

    watch = CpuWatch(lambda: [1], read=read, load=lambda: 3.0)
    _run_for(watch, clock, 100.0)
    got = watch.pressure(clock[0])
    assert got is not None and got.wait_share < 0.05 and not got.starved(0.2)


def test_a_group_asleep_is_never_starved() -> None:
    """A hung server asks for no CPU: whatever it waited while it still ran is behind the window."""
    watch, clock = _watch(run_per_s=0.5, wait_per_s=1.5, idle_after=10.0)
    _run_for(watch, clock, 100.0)
    assert watch.pressure(clock[0]) is None


def test_a_short_life_gives_no_verdict() -> None:
    watch, clock = _watch(run_per_s=0.5, wait_per_s=1.5)
    _run_for(watch, clock, CpuWatch.MIN_WINDOW_S - 1.0)
    assert watch.pressure(clock[0]) is None


@linux_schedstat
def test_this_process_s_threads_are_read_and_a_spinning_thread_adds_run_time() -> None:
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            pass

    before = group_schedstat([os.getpid()])
    worker = threading.Thread(target=spin)
    worker.start()
    try:
        stop.wait(0.3)
        after = group_schedstat([os.getpid()])  # while the spinner lives: a thread gone is not counted
    finally:
        stop.set()
        worker.join()
    assert before is not None and after is not None
    assert sum(after) - sum(before) >= 0.1 * SECOND  # the spinner was runnable for most of 0.3 s


def test_no_readable_process_gives_no_figure() -> None:
    assert group_schedstat([]) is None
    assert group_schedstat([2**22 + 12345]) is None  # beyond any pid Linux hands out
    assert task_schedstat(-1, 1) is None
