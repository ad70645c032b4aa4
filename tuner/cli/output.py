"""What the commands share: argument types and JSON output."""

from __future__ import annotations

import argparse
import json

from tuner.space.source import parse_duration


def duration(text: str) -> float:
    """An argparse type: 90s, 30m, 8h -> seconds."""
    try:
        return float(parse_duration(text))
    except (TypeError, ValueError) as exc:
        raise argparse.ArgumentTypeError(
            f"expected a duration such as 90s, 30m or 8h (got {text!r})"
        ) from exc


def gpu_list(text: str) -> tuple[int, ...]:
    """An argparse type: 0,1,2,3 -> (0, 1, 2, 3)."""
    try:
        gpus = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected GPU indices such as 0,1,2,3 (got {text!r})") from exc
    if not gpus or any(g < 0 for g in gpus):
        raise argparse.ArgumentTypeError(f"expected GPU indices such as 0,1,2,3 (got {text!r})")
    return gpus


def print_json(value: object) -> None:
    """Print a result (dataclasses, enums, paths) as indented JSON."""
    from tuner.store.codec import to_jsonable

    print(json.dumps(to_jsonable(value), indent=2, sort_keys=False))
