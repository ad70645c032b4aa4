"""`run --parallel`: GPU sets, worker command lines, the worker event protocol, exit codes, `status`."""

from __future__ import annotations

import argparse
import io
from datetime import timedelta
from pathlib import Path

import optuna
import pytest

from tuner.cli.parallel import exit_code, gpu_sets_for, node_gpus, worker_argv
from tuner.cli.worker_events import PhaseChanged, TrialStarted, event_hooks, parse_event
from tuner.config import Outcome, Phase
from tuner.errors import ConfigError
from tuner.report.frame import StudyData
from tuner.report.status import running_lines
from tuner.sglang.options import builtin_table
from tuner.space.loader import load_space
from tuner.study.events import TrialEvent
from tuner.study.parallel import gpus_per_launch, split_gpus

ROOT = Path(__file__).resolve().parents[2]
TP2 = ROOT / "tests" / "fixtures" / "spaces" / "tiny-tp2-8gpu-sim.yaml"


def test_sets_are_disjoint_in_order_and_leftovers_stay_unused() -> None:
    assert split_gpus(range(8), 2, 4) == ((0, 1), (2, 3), (4, 5), (6, 7))  # type: ignore[arg-type]
    assert split_gpus((3, 5, 6, 7, 1), 2, 2) == ((3, 5), (6, 7))
    too_few = r"--parallel 3: 3 trials of 4 GPU\(s\) need 12 GPUs but the node offers 8"
    with pytest.raises(ConfigError, match=too_few):
        split_gpus(tuple(range(8)), 4, 3)
    with pytest.raises(ConfigError, match="duplicate"):
        split_gpus((0, 0, 1, 2), 1, 2)


@pytest.mark.parametrize(
    ("argv", "gpus"),
    [
        (["--tp-size", "2"], 2),
        (["--tp-size", "2", "--pp-size", "2"], 4),
        (["--tp-size", "2", "--dp-size", "2"], 4),
        (["--tp-size", "4", "--dp-size", "4", "--enable-dp-attention"], 4),  # DP ranks share the TP GPUs
        (["--tp-size", "8", "--nnodes", "2"], 4),
        ([], 1),
    ],
)
def test_a_launch_takes_tp_x_pp_x_dp_gpus_per_node(argv: list[str], gpus: int) -> None:
    assert gpus_per_launch(["--model-path", "m", *argv], builtin_table("0.5.9")) == gpus


def test_the_space_decides_the_set_size_and_the_node_its_gpus() -> None:
    space = load_space(TP2)
    assert node_gpus(space, None) == tuple(range(8))  # the space's gpus
    assert node_gpus(space, (4, 5, 6, 7)) == (4, 5, 6, 7)  # --gpus wins
    assert gpu_sets_for(space, tuple(range(8)), 4) == ((0, 1), (2, 3), (4, 5), (6, 7))
    assert space.budget.parallel == 4


def test_a_worker_is_the_parents_run_on_one_set_with_events_on_stdout() -> None:
    args = argparse.Namespace(
        space=None, trials=8, timeout=90.0, warm_start="old", warm_start_db="sqlite:///o.db", verbose=True,
        seed=5, sampler=None,
    )
    argv = worker_argv(args, space=TP2, db_url="sqlite:///x.db", study="s-v1", gpus=(2, 3))
    text = " ".join(argv[1:])
    assert text.startswith("-m tuner -v run --space ")
    for part in ("--db sqlite:///x.db", "--study s-v1", "--gpus 2,3", "--parallel 1", "--worker-events",
                 "--trials 8", "--timeout 90s", "--seed 5", "--warm-start old", "--warm-start-db sqlite:///o.db"):
        assert part in text


def test_worker_events_round_trip_and_other_lines_are_not_events() -> None:
    out = io.StringIO()
    hooks = event_hooks(out)
    assert hooks.on_start and hooks.on_phase and hooks.on_trial
    hooks.on_start(7, 3)
    hooks.on_phase(7, Phase.BENCH, "c4")
    event = TrialEvent(number=7, outcome=Outcome.OOM, values=(0.0, 1.5), feasible=False, reused_from=None,
                       message="CUDA out of memory", duration_s=2.5, overhead_s=0.1)
    hooks.on_trial(event)
    parsed = [parse_event(line) for line in out.getvalue().splitlines()]
    phase = PhaseChanged(trial=7, phase=Phase.BENCH, detail="c4")
    assert parsed == [TrialStarted(trial=7, done=3), phase, event]
    assert parse_event("2026-12-01 INFO tuner.gate.run: gate passed") is None
    assert parse_event('@event {"kind": "phase", "trial": 1}') is None  # malformed: not an event


def test_exit_code_is_130_when_stopped_else_the_first_failure() -> None:
    assert exit_code([0, 0, 0], interrupted=False) == 0
    assert exit_code([0, 130, 0], interrupted=False) == 130
    assert exit_code([0, -15], interrupted=False) == 130
    assert exit_code([0, 0], interrupted=True) == 130
    assert exit_code([0, 2, 1], interrupted=False) == 2


def test_status_lists_every_running_trial_with_its_gpus() -> None:
    study = optuna.create_study()
    for gpus in ([0, 1], [2, 3]):
        trial = study.ask()
        trial.set_user_attr("host", "node1")
        trial.set_user_attr("pid", 100 + gpus[0])
        trial.set_user_attr("gpus", gpus)
    study.tell(study.ask(), 1.0)
    data = StudyData(name="s", url="sqlite://", rows=(), trials=tuple(study.trials), metric_names=(),
                     directions=("minimize",), best_numbers=None)
    start = study.trials[0].datetime_start
    assert start is not None
    lines = running_lines(data, now=start + timedelta(seconds=12))
    assert len(lines) == 2
    assert lines[0] == "running: trial 0 on node1 pid 100, GPUs 0,1, for 12 s"
    assert "trial 1 on node1 pid 102, GPUs 2,3" in lines[1]
