"""What the commands share: argument types and JSON output."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from tuner.config import MAX_GPU_INDEX
from tuner.errors import ConfigError
from tuner.space.source import parse_duration


def duration(text: str) -> float:
    """An argparse type: 90s, 30m, 8h -> seconds."""
    try:
        seconds = float(parse_duration(text))
    except (TypeError, ValueError) as exc:
        raise argparse.ArgumentTypeError(
            f"expected a duration such as 90s, 30m or 8h (got {text[:40]!r})"
        ) from exc
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"expected a duration > 0 such as 90s, 30m or 8h (got {text!r})")
    return seconds


def gpu_list(text: str) -> tuple[int, ...]:
    """An argparse type: 0,1,2,3 -> (0, 1, 2, 3)."""
    expected = f"expected GPU indices 0..{MAX_GPU_INDEX} such as 0,1,2,3 (got {text[:40]!r})"
    try:
        gpus = tuple(int(part) for part in text.split(","))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(expected) from exc
    if not gpus or any(not 0 <= g <= MAX_GPU_INDEX for g in gpus):
        raise argparse.ArgumentTypeError(expected)
    if len(set(gpus)) != len(gpus):
        raise argparse.ArgumentTypeError(f"each GPU once, please (got {text[:40]!r})")
    return gpus


def positive_int(text: str) -> int:
    """An argparse type: a whole number ≥ 1 (a trial count, a number of repeats)."""
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a whole number ≥ 1 (got {text[:40]!r})") from exc
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number ≥ 1 (got {value})")
    return value


def database_arg(text: str) -> str:
    """An argparse type for --db: refuses an in-memory SQLite database (every result would vanish)."""
    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(text) if "://" in text else None
    except Exception:  # noqa: BLE001 - not a URL: checked when opened
        parsed = None
    memory = (
        parsed is not None
        and parsed.get_backend_name() == "sqlite"
        and (
            parsed.database in (None, "", ":memory:")
            or "mode=memory" in (parsed.database or "")
            or parsed.query.get("mode") == "memory"
        )
    )
    if memory:
        raise argparse.ArgumentTypeError(
            f"an in-memory database keeps nothing once the command ends; expected a file path such as "
            f"experiments.db (got {text!r})"
        )
    return text


def study_name(text: str) -> str:
    """An argparse type: a study name (letters, digits, _ . -; it becomes a folder and a file's line)."""
    from tuner.names import name_problem

    problem = name_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(f"{problem} (got {text[:40]!r})")
    return text


MAX_SEED = 2**32 - 1  # numpy's and Optuna's samplers take seeds below 2**32


def seed(text: str) -> int:
    """An argparse type: a sampler seed 0..2**32-1."""
    expected = f"expected a whole number from 0 to {MAX_SEED} (got {text[:40]!r})"
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(expected) from exc
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(expected)
    return value


def result_json(result: object, secrets: Iterable[str]) -> str:
    """A trial's result as JSON with its launch's secrets hidden (argv, env and every echo of them)."""
    from tuner.secrets import redact_argv, redact_env, scrub_tree
    from tuner.store.codec import to_jsonable

    data = to_jsonable(result)
    launch = data.get("launch") if isinstance(data, dict) else None
    if isinstance(launch, dict):
        launch["argv"] = list(redact_argv(launch.get("argv") or ()))
        launch["env"] = redact_env(launch.get("env") or {})
    return json.dumps(scrub_tree(data, secrets), indent=2, sort_keys=False)


def json_text(value: object) -> str:
    """A result (dataclasses, enums, paths) as indented JSON."""
    from tuner.store.codec import to_jsonable

    return json.dumps(to_jsonable(value), indent=2, sort_keys=False)


@contextlib.contextmanager
def written(path: Path, what: str) -> Iterator[Path]:
    """A temporary path beside `path` to write; renamed to `path` when the block ends without error.

    A full disk or a killed process never leaves a truncated file under the real name; any
    OSError (a missing or read-only folder, a folder given where a file belongs) becomes one
    ConfigError line naming the path.
    """
    if path.is_dir():
        raise ConfigError(f"{what} {path}: is a folder; expected a file path")
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")  # the suffix names the format
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        yield tmp
        os.replace(tmp, path)
    except OSError as exc:
        raise ConfigError(f"{what} {path}: cannot write: {exc.strerror or exc}") from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def check_writable(path: Path, what: str) -> None:
    """ConfigError unless a file can be written at `path` later; checks without leaving anything."""
    if path.is_dir():
        raise ConfigError(f"{what} {path}: is a folder; expected a file path")
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise ConfigError(f"{what} {path}: cannot write: {exc.strerror or exc}") from None


def write_file(path: Path, text: str, what: str, *, mode: int | None = None) -> None:
    """Write `text` to `path` through a temporary file and a rename (see `written`)."""
    with written(path, what) as tmp:
        tmp.write_text(text, encoding="utf-8")
        if mode is not None:
            os.chmod(tmp, mode)


def output_folder(path: Path, what: str) -> Path:
    """`path` as a folder to write files into (created); ConfigError when it cannot be one."""
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{what} {path}: is a file; expected a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{what} {path}: cannot create the folder: {exc.strerror or exc}") from None
    return path


def print_json(value: object) -> None:
    """Print a result (dataclasses, enums, paths) as indented JSON."""
    print(json_text(value))
