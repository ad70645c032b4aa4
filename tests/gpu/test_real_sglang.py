"""The tuner against real SGLang on one GPU: real memory cliffs, capture lists, an unsupported backend,
the effective launch, and kill -9 of the tuner mid-trial then resume.

Run on purpose on a GPU machine with SGLang importable (see benchmarks/gpu_real_sglang.py, whose
`all` command runs this module): `TUNER_REAL_MODEL=DIR python -m pytest -m gpu -v -s
tests/gpu/test_real_sglang.py`, DIR an 8B-class Llama config folder that `gpu_real_sglang.py model`
writes (launched with `--load-format dummy`). Each launch's outcome, KV tokens, free VRAM, teardown
and classification are appended to $TUNER_REAL_REPORT (JSON lines) when it is set.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from real_sglang_space import ATTENTION, GIB, gpu_used_mib, sglang_pids, space

pytestmark = pytest.mark.gpu

MODEL = os.environ.get("TUNER_REAL_MODEL")
REPORT = os.environ.get("TUNER_REAL_REPORT")
BACK_MIB = 512  # what may stay above the pre-launch reading once a server is gone (CUDA context of none)


@pytest.fixture(scope="module")
def model() -> Path:
    if not MODEL:
        pytest.skip(
            "TUNER_REAL_MODEL is not set (an 8B-class model folder; see benchmarks/gpu_real_sglang.py)"
        )
    try:
        import sglang  # noqa: F401

        gpu_used_mib()
    except Exception as exc:  # no SGLang or no NVML here
        pytest.skip(f"needs SGLang and an NVIDIA GPU: {exc}")
    return Path(MODEL)


@pytest.fixture()
def baseline() -> Iterator[int]:
    assert not sglang_pids(), f"SGLang processes before the check: {sglang_pids()}"
    used, _ = gpu_used_mib()
    yield used


def tuner(*args: str, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tuner", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def one_trial(model: Path, tmp: Path, name: str, knobs: dict[str, Any]) -> dict[str, Any]:
    path = space(model, tmp / "run", name=name, baselines=[knobs])
    done = tuner("trial", "--space", str(path), "--json", cwd=tmp, timeout=420)
    assert done.stdout.strip(), done.stderr[-2000:]
    return json.loads(done.stdout)


def record(check: str, result: dict[str, Any], baseline: int, note: str = "") -> dict[str, Any]:
    """One row of the report: what the tuner recorded, and whether the GPU came back (read here)."""
    used, _ = gpu_used_mib()
    failure = result.get("failure") or {}
    server = result.get("server") or {}
    config = result.get("config") or {}
    gate = result.get("gate") or {}
    row = {
        "check": check,
        "knobs": _knobs(config),
        "outcome": result.get("outcome"),
        "stage": failure.get("stage"),
        "kv_tokens": server.get("kv_tokens"),
        "kv_tokens_log": server.get("kv_tokens_log"),
        "captured_bs": server.get("captured_bs"),
        "cuda_graph": server.get("cuda_graph"),
        "min_free_mib": (result.get("min_free_mib") or [None])[0],
        "teardown_s": round((result.get("timings") or {}).get("teardown_s", 0.0), 2),
        "gpu_back": used <= baseline + BACK_MIB and not sglang_pids(),
        "gate": gate.get("verdict"),
        "gate_load": gate.get("load"),
        "warnings": result.get("warnings"),
        "note": note or failure.get("message") or "; ".join(result.get("warnings") or ()),
    }
    if REPORT:
        with open(REPORT, "a") as f:
            f.write(json.dumps(row) + "\n")
    print("\n" + json.dumps(row))
    return row


def _knobs(config: dict[str, Any]) -> str:
    if not config:
        return ""
    graph = config.get("cuda_graph") or {}
    cg = "off" if graph.get("enabled") is False else f"max:{graph.get('max_bs')}"
    backend = dict(config.get("flags") or []).get("attention-backend")
    return f"mem={config.get('mem_fraction_static')} cuda={cg} attention={backend}"


def test_a_low_fraction_is_sglang_s_not_enough_memory(model: Path, tmp_path: Path, baseline: int) -> None:
    """0.08 of an H200 (~11 GiB) cannot hold ~15 GiB of weights and a KV pool: SGLang says so itself."""
    result = one_trial(
        model,
        tmp_path,
        "nem",
        {"mem-fraction-static": 0.08, "cuda_graph": "off", ATTENTION: "triton"},
    )
    row = record("not enough memory", result, baseline)
    assert result["outcome"] == "not_enough_memory", result["failure"]
    assert row["gpu_back"]


def test_a_high_fraction_with_large_graphs_is_a_capture_oom(
    model: Path, tmp_path: Path, baseline: int
) -> None:
    """0.995 leaves ~0.7 GiB beside the KV pool: capturing decode graphs up to 512 runs out there."""
    result = one_trial(
        model,
        tmp_path,
        "oom",
        {"mem-fraction-static": 0.995, "cuda_graph": 512, ATTENTION: "triton"},
    )
    row = record("capture OOM", result, baseline)
    assert result["outcome"] == "oom", result["failure"]
    assert row["stage"] in ("capture", "kv", "load", "warmup"), row
    assert row["gpu_back"]


def test_a_backend_whose_kernels_are_not_installed_is_unsupported(
    model: Path, tmp_path: Path, baseline: int
) -> None:
    """fa3's library (sgl_kernel flash_ops) is not in the site: the backend cannot run here."""
    try:
        from sgl_kernel import flash_ops  # noqa: F401

        pytest.skip("fa3's kernels are installed here: no unsupported backend to check")
    except ImportError:
        pass
    result = one_trial(
        model, tmp_path, "fa3", {"mem-fraction-static": 0.85, "cuda_graph": 8, ATTENTION: "fa3"}
    )
    row = record("unsupported backend", result, baseline)
    assert result["outcome"] == "unsupported", result["failure"]
    assert row["gpu_back"]


def test_kill_9_of_the_tuner_mid_trial_then_resume(model: Path, tmp_path: Path, baseline: int) -> None:
    """The tuner is killed while its server holds the weights; the resumed run stops that orphan, gets
    the memory back, and measures; torch_native's graphs are stored as SGLang ran them (off)."""
    run_dir = tmp_path / "run"
    path = space(
        model,
        run_dir,
        name="resume",
        trials=2,
        baselines=[
            {"mem-fraction-static": 0.85, "cuda_graph": 8, ATTENTION: "torch_native"},
            {"mem-fraction-static": 0.85, "cuda_graph": 8, ATTENTION: "triton"},
        ],
    )
    db = tmp_path / "study.db"
    args = [sys.executable, "-m", "tuner", "run", "--space", str(path), "--db", str(db), "--plain"]
    with (tmp_path / "first.log").open("w") as log:
        first = subprocess.Popen(
            args, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        held = _wait_for_weights(run_dir, baseline, first, timeout_s=300)
        first.send_signal(signal.SIGKILL)  # the tuner only: its server lives on in its own session
        first.wait(30)
    orphans = sglang_pids()
    used_orphan, _ = gpu_used_mib()
    assert orphans and used_orphan > baseline + 8 * 1024, (orphans, used_orphan, held)
    t0 = time.monotonic()
    resumed = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    output = resumed.stdout + resumed.stderr
    (tmp_path / "resumed.log").write_text(output)
    assert "left by a killed run" in output, output[-3000:]
    used_after, _ = gpu_used_mib()
    back = used_after <= baseline + BACK_MIB and not sglang_pids()
    trials = _trials(db, path)
    for t in trials:
        row = record(
            f"resume #{t['number']}",
            _as_result(t),
            baseline,
            note=f"{t['attrs'].get('warning') or t['attrs'].get('failure_message') or ''}",
        )
        row.update(gpu_back=back)
    record(
        "kill -9 orphan",
        {"outcome": "orphan stopped" if back else "orphan LEFT"},
        baseline,
        note=f"orphan held {used_orphan - baseline} MiB ({len(orphans)} processes); resumed run "
        f"{time.monotonic() - t0:.0f} s, rc {resumed.returncode}",
    )
    assert back, (used_after, baseline, sglang_pids())
    measured = [t for t in trials if t["attrs"].get("outcome") == "ok"]
    assert measured, [t["attrs"].get("failure_message") for t in trials]
    native = [
        t
        for t in trials
        if _backend(t) == "torch_native" and t["attrs"].get("outcome") == "ok"
    ]
    for t in native:
        assert t["attrs"].get("effective_graphs") is False, t["attrs"]
        assert "SGLang ran off" in (t["attrs"].get("warning") or "")
    for t in measured:
        if _backend(t) == "triton":
            assert t["attrs"].get("kv_tokens"), t["attrs"]


def _wait_for_weights(run_dir: Path, baseline: int, proc: subprocess.Popen[bytes], timeout_s: float) -> int:
    """Until a server of the run holds the weights (the GPU 12 GiB above the baseline)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the tuner exited early (rc {proc.returncode})"
        used, _ = gpu_used_mib()
        if used > baseline + 12 * GIB // (1 << 20):  # ~13.5 GiB of weights, then the KV pool
            return used
        time.sleep(0.5)
    raise AssertionError(f"no server of {run_dir} held the weights within {timeout_s:.0f} s")


def _backend(trial: dict[str, Any]) -> str:
    """The attention backend of a trial (its pair's prefill member: the space's choices are one name)."""
    return str(trial["params"].get(ATTENTION) or "").split("/")[0]


def _trials(db: Path, searchedpath: Path) -> list[dict[str, Any]]:
    """The study's trials, params in the space's naming (a backend pair joined)."""
    import optuna

    from tuner.space.loader import load_space
    from tuner.space.sampling import joined_params

    searched = load_space(searchedpath)

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = f"sqlite:///{db}"
    (summary,) = optuna.get_all_study_summaries(storage)
    study = optuna.load_study(study_name=summary.study_name, storage=storage)
    return [
        {
            "number": t.number,
            "state": t.state.name,
            "params": joined_params(searched, t.params),
            "attrs": t.user_attrs,
        }
        for t in study.trials
    ]


def _as_result(trial: dict[str, Any]) -> dict[str, Any]:
    a, p = trial["attrs"], trial["params"]
    graph = str(p.get("cuda_graph"))
    return {
        "outcome": a.get("outcome") or trial["state"].lower(),
        "failure": {"stage": a.get("stage"), "message": a.get("failure_message")},
        "server": {"kv_tokens": a.get("kv_tokens")},
        "config": {
            "mem_fraction_static": p.get("mem-fraction-static"),
            "cuda_graph": {"enabled": graph != "off", "max_bs": graph.removeprefix("max:")},
            "flags": [["attention-backend", _backend(trial)]],
        },
        "min_free_mib": [a.get("min_free_vram_mib")],
        "warnings": [a["warning"]] if a.get("warning") else [],
    }
