"""benchmarks/gpu_study.py on CPU: the checks and the report from a recorded NVML CSV."""

from __future__ import annotations

import csv
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("gpu_study", ROOT / "benchmarks" / "gpu_study.py")
assert _spec is not None and _spec.loader is not None
gs = importlib.util.module_from_spec(_spec)
sys.modules["gpu_study"] = gs
_spec.loader.exec_module(gs)

TOTAL = 143771
BASE = 600  # used MiB with nothing running (driver-reserved)


def _write_csv(path: Path, rows: list[tuple[float, int, int, str]]) -> None:
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(gs.FIELDS)
        for t, gpu, used, pids in rows:
            out.writerow((f"{t:.4f}", gpu, TOTAL, used, TOTAL - used, pids))


def _recording(tmp: Path, *, late_release: bool) -> Path:
    """Two GPUs sampled every 0.1 s for 10 s: trial 0 on GPU 0 (t 1-6), trial 1 on GPU 1 (t 2-5, OOM)."""
    rows = []
    for k in range(101):
        t = 1000 + k / 10
        rel = t - 1000
        used0 = BASE
        if 1.5 <= rel < 6.0:  # server up on GPU 0; min free while benchmarking
            used0 = BASE + (120_000 if 3 <= rel < 5 else 110_000)
        if late_release and 6.0 <= rel < 6.4:
            used0 = BASE + 50_000  # still held after the wait returned at 6.05
        used1 = BASE + 140_000 if 2.5 <= rel < 3.0 else BASE
        rows.append((t, 0, used0, "4242" if used0 > BASE else ""))
        rows.append((t, 1, used1, "4343" if used1 > BASE else ""))
    path = tmp / "nvml.csv"
    _write_csv(path, rows)
    return path


def _windows() -> list:
    ok = gs.TrialWindow(number=0, outcome="ok", gpus=(0,), launched=1001.0, ready=1002.0, teardown=1005.5,
                        released=1006.05, release_s=0.3, tuner_min_free_mib=(TOTAL - BASE - 120_000,))
    oom = gs.TrialWindow(number=1, outcome="oom", gpus=(1,), launched=1002.0, ready=None, teardown=1003.0,
                         released=1003.4, release_s=0.1, tuner_min_free_mib=None,
                         message="CUDA out of memory at capture: ...", real_oom=True)
    return [ok, oom]


def test_recorded_free_vram_release_and_ooms_are_checked_against_the_csv(tmp_path: Path) -> None:
    samples = gs.load_samples(_recording(tmp_path, late_release=False))
    checks = {c.number: c for c in gs.check_trials(_windows(), samples)}
    ok, oom = checks[0], checks[1]
    assert ok.gpu == 0 and ok.baseline_used_mib == BASE
    assert ok.tuner_min_free_mib == ok.nvml_min_free_mib == TOTAL - BASE - 120_000
    assert ok.back_at_release is True
    assert ok.nvml_release_s == pytest.approx(0.5, abs=0.06)  # teardown 5.5 -> memory back at 6.0
    assert ok.foreign_pids == () and oom.foreign_pids == ()
    assert oom.nvml_min_free_mib is None and oom.back_at_release is True
    text = gs.render(_windows(), list(checks.values()), wall_s={"parallel": 60.0, "serial": 100.0})
    assert "free VRAM, tuner vs independent NVML: max |diff| 0 MiB over 1 trial GPUs" in text
    assert "release waits that returned with the memory back: 2/2\n" in text
    assert "OOMs classified as oom and raised by torch: 1/1" in text
    assert "trial 1: torch raised it: yes; CUDA out of memory at capture" in text
    assert "speed-up of --parallel over --parallel 1: 1.67x" in text


def test_a_wait_that_returned_before_the_memory_was_back_is_flagged(tmp_path: Path) -> None:
    samples = gs.load_samples(_recording(tmp_path, late_release=True))
    checks = gs.check_trials(_windows(), samples)
    assert checks[0].back_at_release is False
    assert "release waits that returned with the memory back: 1/2  <-- a wait returned early" in gs.render(
        _windows(), checks, wall_s={}
    )


def test_a_process_on_two_gpus_is_named(tmp_path: Path) -> None:
    rows = [(1000 + k / 10, g, BASE + 1000, "77") for k in range(30) for g in (0, 1)]
    _write_csv(tmp_path / "nvml.csv", rows)
    checks = gs.check_trials(_windows(), gs.load_samples(tmp_path / "nvml.csv"))
    assert checks[0].foreign_pids == (77,)


def test_the_timeline_is_drawn(tmp_path: Path) -> None:
    samples = gs.load_samples(_recording(tmp_path, late_release=False))
    gs.plot(samples, _windows(), tmp_path / "timeline.png")
    assert (tmp_path / "timeline.png").stat().st_size > 10_000


def test_the_command_line() -> None:
    args = gs.parser().parse_args(["run", "--out", "/tmp/x", "--parallel", "2", "--compare-serial"])
    assert args.parallel == 2 and args.compare_serial and args.trials == 8 and args.space == gs.SPACE
    assert gs.parser().parse_args(["report", "--out", "/tmp/x"]).handler is gs.cmd_report
