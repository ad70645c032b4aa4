"""`tuner export` after a real (simulated) study: the script serves, the YAML and JSON mean the trial."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
import yaml

from tuner.report.frame import load_study_data
from tuner.report.profile import split_launcher
from tuner.sglang.config_yaml import config_to_argv
from tuner.sglang.options import build_parser, builtin_table
from tuner.sglang.process import free_port

if TYPE_CHECKING:
    from profile_study import ProfileStudy

pytestmark = pytest.mark.integration


def _best_row(study: ProfileStudy, prefer: str = "balanced"):
    from tuner.report.export import choose_best

    return choose_best(load_study_data(study.url, study.study), prefer=prefer).row


def test_exported_script_starts_a_server_with_the_trials_kv_tokens(
    profile_study: ProfileStudy, tmp_path: Path
) -> None:
    script = tmp_path / "launch.sh"
    done = profile_study.tuner(
        "export", "--db", str(profile_study.db), "--best", "--format", "sh", "-o", str(script)
    )
    assert done.returncode == 0, done.stderr
    assert "chose trial" in done.stderr and "prefer=balanced" in done.stderr
    assert os.access(script, os.X_OK)
    row = _best_row(profile_study)
    port = free_port()
    proc = subprocess.Popen(
        ["bash", str(script)],
        env={**os.environ, "PORT": str(port), "PYTHON": sys.executable},  # the interpreter, as documented
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        info = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                response = httpx.get(f"http://127.0.0.1:{port}/get_server_info", timeout=1.0)
                if response.status_code == 200:
                    info = response.json()
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        assert info is not None, f"the exported script never served on port {port} (exit {proc.poll()})"
        assert info["max_total_num_tokens"] == row.kv_tokens
    finally:
        with_group = os.getpgid(proc.pid) if proc.poll() is None else None
        if with_group is not None:
            os.killpg(with_group, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(with_group, signal.SIGKILL)
                proc.wait(5)


def test_yaml_parses_to_the_trials_flags(profile_study: ProfileStudy, tmp_path: Path) -> None:
    out = tmp_path / "profile.yaml"
    done = profile_study.tuner(
        "export",
        "--db",
        profile_study.url,
        "--study",
        profile_study.study,
        "--best",
        "--prefer",
        "kv",
        "--format",
        "yaml",
        "-o",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    row = _best_row(profile_study, "kv")
    table = builtin_table(row.sglang_version)
    mapping = yaml.safe_load(out.read_text())
    assert mapping and all("_" not in key for key in mapping)
    parser = build_parser(table)
    from_yaml = vars(parser.parse_args(list(config_to_argv(mapping, table))))
    from_trial = vars(parser.parse_args(list(split_launcher(row.argv or (), table)[1])))
    from_trial.pop("host"), from_trial.pop("port")
    assert from_yaml == from_trial
    assert f"trial {row.trial_number}" in out.read_text().splitlines()[0]


def test_json_round_trips_with_the_recorded_values(profile_study: ProfileStudy) -> None:
    row = _best_row(profile_study, "throughput")
    done = profile_study.tuner(
        "export", "--db", str(profile_study.db), "--trial", str(row.trial_number), "--format", "json"
    )
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout)
    assert json.loads(json.dumps(loaded)) == loaded
    assert loaded["trial"] == row.trial_number and loaded["study"] == profile_study.study
    assert loaded["argv"] == list(row.argv or ()) and loaded["knobs"] == row.params
    assert loaded["metrics"]["kv_tokens"] == row.kv_tokens
    assert loaded["metrics"]["output_throughput"] == row.metrics["output_throughput"]
    assert loaded["gate"]["verdict"] == "passed" and loaded["sglang_version"] == "0.5.9"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--trial", "999"), "trial 999: no recorded measurement"),
        (("--study", "nope"), "study 'nope': not in"),
        (("--best", "--min-free-vram", "10000000"), "--min-free-vram 10000000: no Pareto-front trial"),
    ],
)
def test_export_errors_are_one_line(profile_study: ProfileStudy, args: tuple[str, ...], message: str) -> None:
    done = profile_study.tuner("export", "--db", str(profile_study.db), *args)
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in done.stderr


def test_export_for_another_release_renders_its_spellings(
    profile_study: ProfileStudy, tmp_path: Path
) -> None:
    script = tmp_path / "launch-0.5.23.sh"
    done = profile_study.tuner(
        "export",
        "--db",
        str(profile_study.db),
        "--best",
        "--sglang-version",
        "0.5.23",
        "--engine",
        "sim",
        "-o",
        str(script),
    )
    assert done.returncode == 0, done.stderr
    assert "re-rendered for SGLang 0.5.23" in done.stderr
    text = script.read_text()
    assert "--sim-sglang-version 0.5.23" in text and '--port "${PORT:-30000}"' in text
    _, flags = split_launcher(
        tuple(text.split("exec ", 1)[1].replace("\\\n", " ").split()), builtin_table("0.5.23")
    )
    assert "--disable-cuda-graph" not in flags and "--cuda-graph-max-bs" not in flags
    real = profile_study.tuner(
        "export", "--db", str(profile_study.db), "--best", "--sglang-version", "0.5.23", "--format", "json"
    )
    data = json.loads(real.stdout)
    assert data["sglang_version"] == "0.5.23" and data["argv"][:3] == ["python", "-m", "sglang.launch_server"]
    assert data["port"] == 30000 and "TUNER_SIM_STATE_DIR" not in data["env"]
