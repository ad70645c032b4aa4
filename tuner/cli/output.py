"""What the commands share: argument types and JSON output."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable

from tuner.config import MAX_GPU_INDEX
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


def print_json(value: object) -> None:
    """Print a result (dataclasses, enums, paths) as indented JSON."""
    print(json_text(value))
