"""A short study of the GPU-backed simulator on real GPUs, checked against an independent NVML sampler.

    python benchmarks/gpu_study.py run --out DIR [--parallel 2] [--trials 8] [--compare-serial]
    python benchmarks/gpu_study.py report --out DIR      # the report again, from DIR's files

Needs an NVIDIA GPU (two for --parallel 2), torch and nvidia-ml-py in this Python, and the
project's dependencies; run it from the repository root (a fresh checkout is enough: the
repository is put on PYTHONPATH). It writes into DIR:

    nvml.csv      every GPU's memory every --interval-s, read by a separate process with pynvml
    study.db      the study (tuner tables + Optuna); runs/ the server logs; run.log the tuner's output
    report.txt    per trial: the free VRAM the tuner recorded against the independent reading over
                  the same window, the OOMs and whether torch raised them, whether each release wait
                  returned only once the memory was back, and the teardown-to-release time
    timeline.png  used MiB per GPU over time with the trials' windows (matplotlib)

`--compare-serial` runs the same study again with --parallel 1 (into DIR/serial) for the speed-up.
"""

from __future__ import annotations

import argparse
import csv
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SPACE = REPO / "search_spaces" / "h200-gpu-backed-sim.yaml"
STUDY = "h200-gpu-backed-sim-v1"
FIELDS = ("t_unix", "gpu", "total_mib", "used_mib", "free_mib", "pids")
MIB = 1 << 20


# -- the independent sampler (its own process, pynvml only) ------------------------------------


def sample(csv_path: Path, gpus: Sequence[int], interval_s: float) -> int:
    """Write every GPU's memory and compute pids to `csv_path` until SIGTERM."""
    import pynvml

    pynvml.nvmlInit()
    handles = [(g, pynvml.nvmlDeviceGetHandleByIndex(g)) for g in gpus]
    stop = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    with csv_path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(FIELDS)
        while not stop:
            now = time.time()
            for index, handle in handles:
                info = pynvml.nvmlDeviceGetMemoryInfo(handle)
                try:
                    pids = ";".join(str(p.pid) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle))
                except pynvml.NVMLError:
                    pids = ""
                out.writerow(
                    (f"{now:.4f}", index, info.total // MIB, info.used // MIB, info.free // MIB, pids)
                )
            f.flush()
            time.sleep(interval_s)
    pynvml.nvmlShutdown()
    return 0


@dataclass(frozen=True, kw_only=True, slots=True)
class Sample:
    """One independent reading of one GPU."""

    t: float
    gpu: int
    total_mib: int
    used_mib: int
    free_mib: int
    pids: tuple[int, ...]


def load_samples(path: Path) -> list[Sample]:
    """The sampler's CSV, in time order."""
    with path.open() as f:
        rows = [
            Sample(
                t=float(r["t_unix"]),
                gpu=int(r["gpu"]),
                total_mib=int(r["total_mib"]),
                used_mib=int(r["used_mib"]),
                free_mib=int(r["free_mib"]),
                pids=tuple(int(p) for p in r["pids"].split(";") if p),
            )
            for r in csv.DictReader(f)
        ]
    return sorted(rows, key=lambda s: (s.t, s.gpu))


# -- what the tuner recorded ---------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class TrialWindow:
    """One launched trial as the store has it; times are Unix seconds."""

    number: int
    outcome: str
    gpus: tuple[int, ...]
    launched: float  # the GPUs were free and the baseline read: the server starts
    ready: float | None  # the tuner's memory sampler starts (None: it never got ready)
    teardown: float  # the stop begins (the tuner's sampler has stopped)
    released: float  # the release wait returned
    release_s: float  # of which the wait for the memory, after the processes were gone
    tuner_min_free_mib: tuple[int, ...] | None
    message: str = ""
    real_oom: bool = False  # torch raised it (not the memory model's text)


MODEL_OOM_TEXT = "all but a little is allocated by PyTorch"  # only the simulated (modelled) OOM says this


def trial_windows(db: Path, study: str) -> list[TrialWindow]:
    """The launched trials of `study` in the SQLite file `db`, in start order."""
    sys.path.insert(0, str(REPO))
    from tuner.store.sql import SqlStore

    windows = []
    for row in SqlStore(f"sqlite:///{db}").trials(study):
        if row.launch is None or row.confirm_of is not None:
            continue
        t = row.timings
        started = row.started_at.timestamp()
        launched = started + t.get("wait_gpus_s", 0.0)
        released = row.finished_at.timestamp()
        message = (row.failure_message or "").splitlines()[0] if row.failure_message else ""
        text = f"{row.failure_message or ''}\n{row.log_excerpt}"
        windows.append(
            TrialWindow(
                number=row.trial_number if row.trial_number is not None else -1,
                outcome=row.outcome.value,
                gpus=tuple(row.launch.get("gpus") or [g["index"] for g in row.gpus]),
                launched=launched,
                ready=launched + t.get("launch_s", 0.0) if row.server is not None else None,
                teardown=released - t.get("teardown_s", 0.0),
                released=released,
                release_s=t.get("release_s", 0.0),
                tuner_min_free_mib=row.min_free_mib_per_gpu,
                message=message,
                real_oom="CUDA out of memory" in text and MODEL_OOM_TEXT not in text,
            )
        )
    return sorted(windows, key=lambda w: w.launched)


# -- the comparison (pure) -----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuCheck:
    """One trial on one GPU, against the independent readings."""

    number: int
    gpu: int
    tuner_min_free_mib: int | None
    nvml_min_free_mib: int | None
    baseline_used_mib: int | None
    back_at_release: bool | None  # every reading just after the wait returned was at the baseline
    nvml_release_s: float | None  # teardown start -> first reading back at the baseline
    tuner_teardown_s: float  # teardown start -> the release wait returned
    foreign_pids: tuple[int, ...]  # pids of this trial's window seen on another GPU too


def release_tolerance_mib(total_mib: int) -> float:
    """What the tuner's release wait allows above the baseline (tuner.gpu.sampler.wait_for_release)."""
    return max(256, 0.02 * total_mib)


def check_trials(windows: Sequence[TrialWindow], samples: Sequence[Sample]) -> list[GpuCheck]:
    """Per trial and GPU: recorded vs independent free VRAM, the release, processes on other GPUs."""
    checks = []
    for w in windows:
        for pos, gpu in enumerate(w.gpus):
            mine = [s for s in samples if s.gpu == gpu]
            before = [s for s in mine if s.t <= w.launched]
            baseline = before[-1].used_mib if before else None
            nvml_min = None
            if w.ready is not None:
                inside = [s.free_mib for s in mine if w.ready + 0.05 <= s.t <= w.teardown - 0.05]
                nvml_min = min(inside) if inside else None
            later = [w2.launched for w2 in windows if gpu in w2.gpus and w2.launched > w.released]
            until = min([w.released + 0.5, *later])
            after = [s for s in mine if w.released < s.t < until]
            back_at_release = nvml_release_s = None
            if baseline is not None:
                tol = release_tolerance_mib(mine[0].total_mib)
                back_at_release = all(s.used_mib - baseline <= tol for s in after) if after else None
                back = [s.t for s in mine if s.t >= w.teardown and s.used_mib - baseline <= tol]
                nvml_release_s = back[0] - w.teardown if back else None
            in_window = {p for s in mine if w.launched <= s.t <= w.teardown for p in s.pids}
            elsewhere = {
                p for s in samples if s.gpu != gpu and w.launched <= s.t <= w.teardown for p in s.pids
            }
            tuner = (
                w.tuner_min_free_mib[pos]
                if w.tuner_min_free_mib and pos < len(w.tuner_min_free_mib)
                else None
            )
            checks.append(
                GpuCheck(
                    number=w.number,
                    gpu=gpu,
                    tuner_min_free_mib=tuner,
                    nvml_min_free_mib=nvml_min,
                    baseline_used_mib=baseline,
                    back_at_release=back_at_release,
                    nvml_release_s=nvml_release_s,
                    tuner_teardown_s=w.released - w.teardown,
                    foreign_pids=tuple(sorted(in_window & elsewhere)),
                )
            )
    return checks


def _v(value: object, fmt: str = "{}") -> str:
    return "-" if value is None else fmt.format(value)


def render(windows: Sequence[TrialWindow], checks: Sequence[GpuCheck], *, wall_s: dict[str, float]) -> str:
    """The report: a table per trial and GPU, the OOMs, and the verdicts."""
    by_number = {w.number: w for w in windows}
    lines = [
        "trial gpu outcome          tuner min free  NVML min free   diff  release wait  back at return"
        "  NVML back after  tuner teardown",
    ]
    for c in checks:
        w = by_number[c.number]
        diff = (
            None
            if c.tuner_min_free_mib is None or c.nvml_min_free_mib is None
            else c.tuner_min_free_mib - c.nvml_min_free_mib
        )
        lines.append(
            f"{c.number:>5} {c.gpu:>3} {w.outcome:<16} {_v(c.tuner_min_free_mib, '{:,}'):>14} "
            f"{_v(c.nvml_min_free_mib, '{:,}'):>14} {_v(diff, '{:+,}'):>6} {w.release_s:>11.2f}s "
            f"{_v(c.back_at_release):>15} {_v(c.nvml_release_s, '{:.2f}s'):>16} {c.tuner_teardown_s:>14.2f}s"
        )
    ooms = [w for w in windows if w.outcome == "oom"]
    lines.append("")
    lines.append(f"OOM trials: {len(ooms)}")
    for w in ooms:
        lines.append(
            f"  trial {w.number}: torch raised it: {'yes' if w.real_oom else 'NO'}; {w.message[:150]}"
        )
    diffs = [
        abs(c.tuner_min_free_mib - c.nvml_min_free_mib)
        for c in checks
        if c.tuner_min_free_mib is not None and c.nvml_min_free_mib is not None
    ]
    releases = [c.back_at_release for c in checks if c.back_at_release is not None]
    foreign = [c for c in checks if c.foreign_pids]
    lines += [
        "",
        f"free VRAM, tuner vs independent NVML: max |diff| {max(diffs) if diffs else '-'} MiB "
        f"over {len(diffs)} trial GPUs",
        f"release waits that returned with the memory back: {sum(releases)}/{len(releases)}"
        + ("" if all(releases) else "  <-- a wait returned early"),
        f"OOMs classified as oom and raised by torch: {sum(w.real_oom for w in ooms)}/{len(ooms)}",
        f"processes of a trial seen on another GPU: {len(foreign)}"
        + "".join(f"  (trial {c.number} GPU {c.gpu}: {c.foreign_pids})" for c in foreign),
    ]
    for name, seconds in wall_s.items():
        lines.append(f"wall time {name}: {seconds:.1f} s")
    if "parallel" in wall_s and "serial" in wall_s and wall_s["parallel"] > 0:
        lines.append(
            f"speed-up of --parallel over --parallel 1: {wall_s['serial'] / wall_s['parallel']:.2f}x"
        )
    return "\n".join(lines) + "\n"


def plot(samples: Sequence[Sample], windows: Sequence[TrialWindow], path: Path) -> None:
    """Used MiB per GPU over time, each trial's window shaded and labelled."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gpus = sorted({s.gpu for s in samples})
    t0 = min(s.t for s in samples)
    fig, axes = plt.subplots(len(gpus), 1, figsize=(12, 3 * len(gpus)), sharex=True, squeeze=False)
    for ax, gpu in zip(axes[:, 0], gpus, strict=True):
        mine = [s for s in samples if s.gpu == gpu]
        ax.plot([s.t - t0 for s in mine], [s.used_mib / 1024 for s in mine], lw=1)
        for w in windows:
            if gpu in w.gpus:
                color = "tab:red" if w.outcome == "oom" else "tab:green"
                ax.axvspan(w.launched - t0, w.released - t0, color=color, alpha=0.15)
                ax.text(w.launched - t0, ax.get_ylim()[1] * 0.9, f"#{w.number} {w.outcome}", fontsize=7)
        ax.set_ylabel(f"GPU {gpu} used GiB")
    axes[-1, 0].set_xlabel("seconds")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# -- the run -------------------------------------------------------------------------------------


def _study(out: Path, *, parallel: int, trials: int, space: Path, log: Path) -> float:
    gpus = ",".join(str(g) for g in range(parallel))
    cmd = [
        sys.executable,
        "-m",
        "tuner",
        "run",
        "--space",
        str(space),
        "--db",
        str(out / "study.db"),
        "--study",
        STUDY,
        "--trials",
        str(trials),
        "--parallel",
        str(parallel),
        "--gpus",
        gpus,
        "--plain",
    ]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    out.mkdir(parents=True, exist_ok=True)
    print("$", " ".join(cmd), flush=True)
    t0 = time.monotonic()
    with log.open("w") as f:
        proc = subprocess.Popen(
            cmd, cwd=out, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            f.write(line)
            print(line, end="", flush=True)
        code = proc.wait()
    if code != 0:
        raise SystemExit(f"the study exited {code}; see {log}")
    return time.monotonic() - t0


def _preflight(parallel: int) -> None:
    try:
        import optuna  # noqa: F401 - the tuner's own dependencies
    except ImportError as exc:
        raise SystemExit(f"the tuner's dependencies are missing (pip install -e . in {REPO}): {exc}") from exc
    try:
        import pynvml
        import torch  # noqa: F401 - the simulator's child imports it; fail here, not in every trial
    except ImportError as exc:
        raise SystemExit(f"needs torch and nvidia-ml-py in {sys.executable}: {exc}") from exc
    pynvml.nvmlInit()
    count = pynvml.nvmlDeviceGetCount()
    pynvml.nvmlShutdown()
    if count < parallel:
        raise SystemExit(f"--parallel {parallel} needs {parallel} GPUs; NVML sees {count}")


def cmd_run(args: argparse.Namespace) -> int:
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    _preflight(args.parallel)
    gpus = ",".join(str(g) for g in range(args.parallel))
    sampler = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "sample",
            "--csv",
            str(out / "nvml.csv"),
            "--gpus",
            gpus,
            "--interval-s",
            str(args.interval_s),
        ]
    )
    wall: dict[str, float] = {}
    try:
        time.sleep(1.0)  # a baseline before the first launch
        wall["parallel" if args.parallel > 1 else "study"] = _study(
            out, parallel=args.parallel, trials=args.trials, space=args.space, log=out / "run.log"
        )
        if args.compare_serial and args.parallel > 1:
            wall["serial"] = _study(
                out / "serial",
                parallel=1,
                trials=args.trials,
                space=args.space,
                log=out / "serial" / "run.log",
            )
        time.sleep(1.0)
    finally:
        sampler.send_signal(signal.SIGTERM)
        sampler.wait(10)
    (out / "wall.csv").write_text("".join(f"{k},{v:.3f}\n" for k, v in wall.items()))
    return cmd_report(args)


def cmd_report(args: argparse.Namespace) -> int:
    out: Path = args.out.resolve()
    samples = load_samples(out / "nvml.csv")
    windows = trial_windows(out / "study.db", STUDY)
    wall = {}
    if (out / "wall.csv").exists():
        for line in (out / "wall.csv").read_text().splitlines():
            name, seconds = line.split(",")
            wall[name] = float(seconds)
    text = render(windows, check_trials(windows, samples), wall_s=wall)
    (out / "report.txt").write_text(text)
    print(text)
    if not args.no_plot and samples:
        plot(samples, windows, out / "timeline.png")
        print(f"timeline: {out / 'timeline.png'}")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the study beside an independent NVML sampler, then report")
    run.add_argument("--out", type=Path, required=True, help="directory for every output")
    run.add_argument("--parallel", type=int, default=1, help="trials at once, one GPU each (GPUs 0..N-1)")
    run.add_argument("--trials", type=int, default=8, help="launches in the study")
    run.add_argument("--space", type=Path, default=SPACE)
    run.add_argument("--interval-s", type=float, default=0.05, help="independent sampling period")
    run.add_argument("--compare-serial", action="store_true", help="also run it with --parallel 1 (speed-up)")
    run.add_argument("--no-plot", action="store_true")
    run.set_defaults(handler=cmd_run)
    report = sub.add_parser("report", help="the report again from DIR/nvml.csv and DIR/study.db")
    report.add_argument("--out", type=Path, required=True)
    report.add_argument("--no-plot", action="store_true")
    report.set_defaults(handler=cmd_report)
    samp = sub.add_parser("sample", help="(internal) the independent NVML sampler")
    samp.add_argument("--csv", type=Path, required=True)
    samp.add_argument("--gpus", required=True)
    samp.add_argument("--interval-s", type=float, default=0.05)
    samp.set_defaults(handler=lambda a: sample(a.csv, [int(g) for g in a.gpus.split(",")], a.interval_s))
    return p


if __name__ == "__main__":
    parsed = parser().parse_args()
    sys.exit(parsed.handler(parsed))
