"""`run`'s options, built once from the parsed command line and turned back into one for workers.

`run --parallel N` starts N ordinary `run` workers; each gets the parent's options with its own
GPU set, so every option of `run` must reach it. `RunOptions.argv` writes every field back as
the flag `run` parses it from (the field name with dashes), so a new option is one argument in
`cli.run.register_run` and one field here; tests/unit/test_run_options.py fails when they differ.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields
from decimal import Decimal
from pathlib import Path


@dataclass(frozen=True, kw_only=True, slots=True)
class RunOptions:
    """Everything `python -m tuner run` was told; None = not given (the space or database decides)."""

    space: Path | None = None
    db: str | None = None
    study: str | None = None
    trials: int | None = None
    timeout: float | None = None  # seconds
    plain: bool = False
    gpus: tuple[int, ...] | None = None
    parallel: int | None = None
    worker_events: bool = False
    warm_start: str | None = None
    warm_start_db: str | None = None
    seed: int | None = None
    sampler: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> RunOptions:
        """The options of a parsed `run` command line (fields it lacks keep their defaults)."""
        given = {f.name: getattr(args, f.name) for f in fields(cls) if hasattr(args, f.name)}
        return cls(**given)

    def argv(self) -> list[str]:
        """`run`'s arguments that parse back into these options (options not given are left out)."""
        out: list[str] = []
        for f in fields(self):
            value = getattr(self, f.name)
            flag = "--" + f.name.replace("_", "-")
            if value is None or value is False:
                continue
            if value is True:
                out.append(flag)
            else:
                out += [flag, _text(value)]
        return out


def _text(value: object) -> str:
    if isinstance(value, float):  # seconds as plain digits: exact, and no exponent a duration refuses
        return format(Decimal(repr(value)), "f")
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return str(value)
