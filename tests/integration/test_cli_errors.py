"""A user's mistake is one line on stderr and exit 2: nothing launched, the database untouched."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from support.cli import tuner_in

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _space_error_cases() -> list[tuple]:
    """The space-file mistakes of the loader's unit tests, run here through the CLI."""
    spec = importlib.util.spec_from_file_location(
        "space_error_cases", ROOT / "tests/unit/test_space_errors.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(module.CASES)


# A few kinds through the real CLI (every kind is covered at the loader's level in the unit tests).
CASES = [
    c
    for c in _space_error_cases()
    if c[0] in {"unknown-top-key", "wrong-type", "inverted-range", "duplicate-key", "yaml-syntax"}
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_space_exits_2_with_one_line_and_touches_nothing(tmp_path: Path, case: tuple) -> None:
    _, text, key, line, _ = case
    space = tmp_path / "bad.yaml"
    space.write_text(text)
    done = tuner_in(tmp_path, "run", "--space", str(space), "--db", str(tmp_path / "exp.db"), "--plain")
    assert done.returncode == 2, done.stderr
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert f"{space}:{line}" in lines[0] and key in lines[0]
    assert not (tmp_path / "exp.db").exists(), "the database was touched"
    assert not (tmp_path / "runs").exists(), "something was launched or prepared"


def test_unknown_flag_for_the_installed_release_exits_2_before_any_launch(tmp_path: Path) -> None:
    space = tmp_path / "space.yaml"
    text = (ROOT / "search_spaces" / "tiny-fast-sim.yaml").read_text()
    space.write_text(text.replace("  tp-size: 1\n", "  tp-size: 1\n  no-such-flag: 3\n"))
    done = tuner_in(tmp_path, "run", "--space", str(space), "--db", str(tmp_path / "exp.db"), "--plain")
    assert done.returncode == 2
    assert "no-such-flag" in done.stderr and "\n" not in done.stderr.strip()
    assert not (tmp_path / "exp.db").exists()


def test_unreachable_database_is_one_line_naming_it(tmp_path: Path) -> None:
    space = ROOT / "search_spaces" / "tiny-fast-sim.yaml"
    done = tuner_in(
        tmp_path, "run", "--space", str(space), "--db", "sqlite:////nonexistent-dir/x/exp.db", "--plain"
    )
    assert done.returncode != 0
    lines = [ln for ln in done.stderr.splitlines() if ln.strip() and not ln.startswith("20")]
    assert lines and lines[-1].startswith("error: ") and "nonexistent-dir" in lines[-1], done.stderr


def test_bad_gpu_list_is_a_usage_error(tmp_path: Path) -> None:
    space = ROOT / "search_spaces" / "tiny-fast-sim.yaml"
    done = tuner_in(tmp_path, "run", "--space", str(space), "--gpus", "0,x", "--db", str(tmp_path / "exp.db"))
    assert done.returncode == 2 and "expected GPU indices" in done.stderr
    assert not (tmp_path / "exp.db").exists()


def test_a_database_server_that_refuses_is_one_line_without_its_password(tmp_path: Path) -> None:
    done = tuner_in(tmp_path, "status", "--db", "postgresql://me:pw-Secret-9@127.0.0.1:1/db")
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "pw-Secret-9" not in done.stderr and "me:***@" in done.stderr
    assert not list(tmp_path.iterdir())
