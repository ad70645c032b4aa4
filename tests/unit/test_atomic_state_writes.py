"""State and cache files are replaced through random O_EXCL names: a link planted at a guessable name
(`.NAME.PID.tmp`, `NAME.PID.tmp`) is never followed, so a shared directory cannot redirect the write."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tuner.gpu.statefile import write_json_atomic
from tuner.sglang.introspect import _write_cache


def _plant(link: Path, victim: Path) -> None:
    victim.write_text("precious")
    link.symlink_to(victim)


def test_the_gpu_state_file_write_does_not_follow_a_planted_link(tmp_path: Path) -> None:
    path = tmp_path / "gpus.json"
    victim = tmp_path / "victim.txt"
    _plant(tmp_path / f".{path.name}.{os.getpid()}.tmp", victim)
    write_json_atomic(path, {"gpus": []})
    assert victim.read_text() == "precious"
    assert json.loads(path.read_text()) == {"gpus": []} and not path.is_symlink()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp") and not p.is_symlink()] == []


def test_the_option_cache_write_does_not_follow_a_planted_link(tmp_path: Path) -> None:
    path = tmp_path / "options-0.5.17.json"
    victim = tmp_path / "victim.txt"
    _plant(path.with_suffix(f".{os.getpid()}.tmp"), victim)
    _write_cache(path, "0.5.17", "python3", [["--port"]])
    assert victim.read_text() == "precious"
    assert json.loads(path.read_text())["sglang_version"] == "0.5.17" and not path.is_symlink()
