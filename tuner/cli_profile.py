"""Commands around a chosen trial's launch profile (export, confirm) are registered here."""

from __future__ import annotations

import argparse
from collections.abc import Callable

HANDLERS: dict[str, Callable[[argparse.Namespace], int]] = {}


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the profile commands' parsers to the CLI."""
