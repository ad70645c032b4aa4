"""`run`'s options: every one the parser knows is a RunOptions field and reaches `--parallel` workers."""

from __future__ import annotations

import argparse
from dataclasses import fields, replace
from pathlib import Path

import pytest

from tuner.cli import build_parser
from tuner.cli.parallel import worker_argv
from tuner.cli.run_options import RunOptions
from tuner.errors import ConfigError, ExitCode, InfrastructureError, StoreError, TunerError

# A value other than the default for every field: a new `run` option fails here until it has one.
GIVEN = RunOptions(
    space=Path("/spaces/a b.yaml"),
    db="postgresql+psycopg://u@db/tuner",
    study="glm5-v2",
    trials=12,
    timeout=5400.5,
    plain=True,
    gpus=(4, 5, 6, 7),
    parallel=2,
    worker_events=True,
    warm_start="glm5-v1",
    warm_start_db="sqlite:////data/old.db",
    seed=7,
    sampler="gp",
)


def _run_actions() -> list[argparse.Action]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return [a for a in sub.choices["run"]._actions if a.dest != "help"]


def _parse(argv: list[str]) -> RunOptions:
    return RunOptions.from_args(build_parser().parse_args(["run", *argv]))


def test_every_run_option_is_a_field_named_like_its_flag() -> None:
    names = {f.name for f in fields(RunOptions)}
    for action in _run_actions():
        assert action.dest in names, f"run option {action.option_strings} has no RunOptions field"
        assert "--" + action.dest.replace("_", "-") in action.option_strings
    assert names == {a.dest for a in _run_actions()}


def test_every_field_differs_from_its_default_in_the_sample() -> None:
    default = RunOptions()
    assert all(getattr(GIVEN, f.name) != getattr(default, f.name) for f in fields(RunOptions))


def test_options_round_trip_through_argv() -> None:
    assert _parse(GIVEN.argv()) == GIVEN
    assert _parse([]) == RunOptions() and RunOptions().argv() == []
    small = replace(GIVEN, timeout=0.25, trials=None, plain=False)
    assert _parse(small.argv()) == small


def test_a_worker_gets_every_option_with_its_own_gpus_and_events() -> None:
    argv = worker_argv(
        GIVEN, space=Path("/s.yaml"), db_url="sqlite:///x.db", study="s-v1", gpus=(2, 3), verbose=True
    )
    assert argv[1:5] == ["-m", "tuner", "-v", "run"]
    worker = _parse(argv[5:])
    expected = replace(
        GIVEN, space=Path("/s.yaml"), db="sqlite:///x.db", study="s-v1", gpus=(2, 3), parallel=1
    )
    assert worker == expected


@pytest.mark.parametrize(
    ("error", "code"),
    [(TunerError, 1), (StoreError, 1), (ConfigError, 2), (InfrastructureError, 3)],
)
def test_exit_codes_come_from_one_table(error: type[TunerError], code: int) -> None:
    assert error.exit_code == code and isinstance(error.exit_code, ExitCode)
    assert ExitCode.INTERRUPTED == 130
