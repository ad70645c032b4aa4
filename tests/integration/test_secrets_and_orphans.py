"""Secrets never reach a file the tuner writes; its files are owner-only; servers are found by intent."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest
from support.cli import tuner_in

from tuner.private import write_private
from tuner.secrets import redact_argv
from tuner.sglang.orphans import MARKER_ENV, LiveServers

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
API_KEY = "sk-SECRET123xyz"
HF_TOKEN = "hf_SECRET456abc"




@pytest.mark.timeout(900)  # a trial and five CLI commands, each a subprocess: slow only when busy
def test_secrets_are_redacted_in_every_file_and_run_files_are_owner_only(tmp_path: Path) -> None:
    text = (ROOT / "search_spaces" / "tiny-fast-sim.yaml").read_text()
    space = tmp_path / "space.yaml"
    space.write_text(
        text.replace("  tp-size: 1\n", f"  tp-size: 1\n  api-key: {API_KEY}\nenv:\n  HF_TOKEN: ${{HF}}\n")
    )
    env_run = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuner",
            "run",
            "--space",
            str(space),
            "--db",
            "exp.db",
            "--trials",
            "1",
            "--plain",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF": HF_TOKEN},
    )
    assert env_run.returncode == 0, env_run.stderr
    for args in (
        ("export", "--db", "exp.db", "--trial", "0", "--format", "sh", "-o", "launch.sh"),
        ("export", "--db", "exp.db", "--trial", "0", "--format", "json", "-o", "launch.json"),
        ("export", "--db", "exp.db", "--trial", "0", "--format", "yaml", "-o", "launch.yaml"),
        ("report", "--db", "exp.db", "--out", "report"),
        ("status", "--db", "exp.db"),
    ):
        done = tuner_in(tmp_path, *args)
        assert done.returncode == 0, done.stderr
        assert API_KEY not in done.stdout + done.stderr and HF_TOKEN not in done.stdout + done.stderr
    leaks = [
        p
        for p in tmp_path.rglob("*")
        if p.is_file()
        and p != space
        and (API_KEY.encode() in p.read_bytes() or HF_TOKEN.encode() in p.read_bytes())
    ]
    assert not leaks, f"secrets written to {leaks}"
    log = next((tmp_path / "runs").glob("*/logs/trial-0000.log"))
    assert "***" in log.read_text()  # the server printed its arguments: the key was scrubbed, not absent
    run_dir = log.parent.parent
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
    for folder in ("logs", "live", "artifacts"):
        assert stat.S_IMODE((run_dir / folder).stat().st_mode) == 0o700, folder
    for path in [*(run_dir / "logs").iterdir(), *(run_dir / "artifacts").iterdir()]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_a_live_record_holds_the_redacted_command_and_a_hash(tmp_path: Path) -> None:
    live = LiveServers(tmp_path / "run")
    argv = ["python", "-m", "sglang.launch_server", "--api-key", API_KEY, "--port", "30000"]
    record = live.reserve(argv, 30000, shown=redact_argv(argv))
    (path,) = (tmp_path / "run" / "live").glob("*.json")
    assert API_KEY not in path.read_text() and json.loads(path.read_text())["server_pid"] is None
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    live.started(record, 12345)
    assert json.loads(path.read_text())["server_pid"] == 12345
    live.remove(record)
    assert not list((tmp_path / "run" / "live").glob("*.json"))


def test_a_server_whose_pid_never_reached_its_record_is_still_found(tmp_path: Path) -> None:
    """The tuner was killed between recording the intent and filling in the pid."""
    live = LiveServers(tmp_path / "run")
    argv = [
        sys.executable,
        "-c",
        "import time, subprocess, sys; "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)",
    ]
    record = live.reserve(argv, 1)
    dead_owner = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_owner.wait()
    write_private(
        tmp_path / "run" / "live" / f"{record.id}.json",
        json.dumps(
            {
                **json.loads((tmp_path / "run" / "live" / f"{record.id}.json").read_text()),
                "owner_pid": dead_owner.pid,
            }
        ),
    )
    server = subprocess.Popen(argv, env={**os.environ, **dict(replace(record).env)}, start_new_session=True)
    deadline = time.monotonic() + 20
    while len(psutil.Process(server.pid).children()) < 1:
        assert time.monotonic() < deadline, "the child never started"
        time.sleep(0.05)
    child = psutil.Process(server.pid).children()[0]
    killed = live.stop_orphans()
    server.wait(10)
    assert server.pid in killed and child.pid in killed
    assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
    assert not list((tmp_path / "run" / "live").glob("*.json"))
    assert MARKER_ENV not in os.environ
