"""One trial, one set of figures in every view; per-GPU over the launch's GPUs; every non-ok trial
says why; the pick uses the study's own objectives and never rests silently on one noisy run."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from rich.console import Console
from support.reports import DISTS, frozen, make_row, study_data

from tuner.config import Outcome
from tuner.host import host_name
from tuner.report.context import front_points, tradeoff_lines
from tuner.report.detail import failure_views, failures_frame
from tuner.report.export import build_profile, choose_best, select
from tuner.report.frame import StudyData, trial_figures, trials_frame
from tuner.report.interactive import trials_table
from tuner.report.pareto import front_frame, pareto_front
from tuner.report.plots import pareto_plot, per_gpu_per_user_informative, per_gpu_per_user_plot
from tuner.report.profile import provenance
from tuner.report.status import running_lines, status_table
from tuner.report.verify import verify_lines

SPACE = (Path(__file__).resolve().parents[2] / "search_spaces" / "glm5-nvfp4-sm120-sim.yaml").read_text()


def _remeasured() -> StudyData:
    """Trial 0 measured 700 then re-measured 760 and 780 (median 760); trial 1 once at 600."""
    rows = [
        make_row(0, tput=700.0, kv=1_000_000, mem=0.8),
        make_row(1, tput=600.0, kv=1_200_000, mem=0.9),
        make_row(None, id=20, tput=760.0, confirm_of=1),
        make_row(None, id=21, tput=780.0, confirm_of=1),
    ]
    return replace(study_data(rows), space_text=SPACE)


def _text(table: object) -> str:
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(table)
    return console.file.getvalue()  # type: ignore[attr-defined, no-any-return]


def test_every_view_shows_the_median_of_a_remeasured_trial() -> None:
    data = _remeasured()
    figures = trial_figures(data, data.rows[0])
    assert (figures.get("output_throughput"), figures.runs) == (760.0, 3)
    assert figures.spread() == "median of 3 runs; out tok/s 700.0–780.0"
    front = pareto_front(data)
    frame = trials_frame(data, front).set_index("trial")
    assert frame.loc[0, "output_throughput"] == 760.0 and frame.loc[0, "runs"] == 3
    assert (frame.loc[0, "output_throughput_min"], frame.loc[0, "output_throughput_max"]) == (700.0, 780.0)
    assert front_frame(data, front).set_index("trial").loc[0, "output_throughput"] == 760.0
    fig = pareto_plot(trials_frame(data, front))
    xs = {float(x) for c in fig.axes[0].collections for x, _ in c.get_offsets()}
    assert 760.0 in xs and 700.0 not in xs
    table = trials_table(trials_frame(data, front), data.metric_names)
    assert table.loc[0, "output throughput (tok/s)"] == "760.0" and table.loc[0, "runs"].startswith(
        "median of 3"
    )
    lines = _text(status_table(data, front)).splitlines()
    row0 = next(line for line in lines if line.strip().startswith("0*"))
    assert "760" in row0 and "700" not in row0
    points = front_points(data)
    assert next(p for p in points if p.trials == (0,)).output_throughput == 760.0
    assert "median of 3 runs" in "\n".join(tradeoff_lines(points, 0))
    choice = choose_best(data, prefer="throughput")
    assert "760.0 tok/s" in choice.reason
    profile = build_profile(data, choice)
    assert profile.measured["output_throughput"] == 760.0 and profile.runs == 3
    assert any(
        line.startswith("measured (median of 3 runs): output throughput 760.0")
        for line in provenance(profile)
    )


def test_per_gpu_throughput_divides_by_the_launchs_gpus_not_the_hosts() -> None:
    host = tuple({"index": i, "name": "NVIDIA B200", "driver": "570"} for i in range(8))
    row = make_row(0, tput=800.0, gpus=host)
    tp4 = replace(row, argv=tuple(a if a != "1" else "4" for a in row.argv or ()))  # --tp-size 4
    dp2 = replace(row, id=2, trial_number=1, argv=(*(row.argv or ()), "--dp-size", "2"))
    data = study_data([tp4, dp2])
    frame = trials_frame(data).set_index("trial")
    assert frame.loc[0, "output_throughput_per_gpu"] == 200.0  # 800 over tp 4, not over the host's 8
    assert frame.loc[1, "output_throughput_per_gpu"] == 400.0  # tp 1 x dp 2
    profile = build_profile(data, select(data, trial=0))
    gpu_line = next(line for line in provenance(profile) if "GPUs:" in line)
    assert "4 x NVIDIA B200" in gpu_line and "8 x" not in gpu_line
    per_gpu_per_user_plot(frame.reset_index())  # plots the same column
    assert per_gpu_per_user_informative(frame.reset_index()) == ""  # 4 GPUs against 2: a trade-off
    same = trials_frame(study_data([row, replace(row, id=2, trial_number=1)]))
    assert "same GPUs at one load" in per_gpu_per_user_informative(same)  # a straight line: not drawn


def test_every_non_ok_trial_says_why_with_value_and_bound() -> None:
    rows = [
        make_row(0, tput=700.0),
        make_row(1, tput=800.0, min_free=2_041, feasible=False),
        replace(make_row(2, outcome=Outcome.CRASHED), failure_message=None, failure_phase=None),
    ]
    trials = [frozen(r) for r in rows]
    trials[1].user_attrs["c_slo:min_free_vram_mib>=2048"] = 7.0
    died = optuna.trial.create_trial(
        params={"mem-fraction-static": 0.7, "cuda_graph": "off"},
        distributions=DISTS,
        state=TrialState.FAIL,
        user_attrs={"host": "node-a", "pid": 4242},
    )
    died.number = 3
    retry = optuna.trial.create_trial(params=died.params, distributions=DISTS, values=[0.0, 0.0],
                                      user_attrs={"retry_of": 3})  # fmt: skip
    retry.number = 4
    data = replace(study_data(rows, [*trials, died, retry], optuna_front=False), space_text=SPACE)
    frame = trials_frame(data).set_index("trial")
    assert frame.loc[1, "why"] == "missed min_free_vram_mib = 2,041 MiB, bound >= 2,048 (7 short)"
    assert frame.loc[2, "why"] == "crashed (no message recorded)"
    assert "the tuner's own process died during this trial (pid 4242 on node-a)" in frame.loc[3, "why"]
    assert "asked again as #4" in frame.loc[3, "why"]
    # without the trial's own constraint values, the stored space's SLOs decide
    bare = replace(data, trials=(frozen(rows[0]), frozen(rows[1]), frozen(rows[2])))
    assert trials_frame(bare).set_index("trial").loc[1, "why"].startswith("missed min_free_vram_mib = 2,041")
    views = failure_views(data)
    assert [v.failure for v in views] == ["slo_violation", "crashed", "tuner_died"]
    for text in (failures_frame(data).to_csv(), *(f"{v.title} {v.message} {v.phase}" for v in views)):
        assert "nan" not in text.lower().replace("nan-", "") and "None" not in text


def test_status_marks_a_trial_whose_worker_on_this_host_is_gone_as_dead() -> None:
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead_pid = int(gone.stdout)
    row = make_row(0)
    running = [
        optuna.trial.create_trial(
            params={}, distributions={}, state=TrialState.RUNNING, user_attrs={"host": host_name(), "pid": p}
        )  # fmt: skip
        for p in (dead_pid, os.getpid())
    ]
    for i, t in enumerate(running, start=1):
        t.number = i
    data = study_data([row], [frozen(row), *running], optuna_front=False)
    lines = running_lines(data)
    assert lines[0].startswith(f"dead: trial 1: its worker (pid {dead_pid} on {host_name()}) is gone")
    assert lines[1].startswith("running: trial 2")
    table = _text(status_table(data, ()))
    assert "dead" in table and "running" in table


@pytest.mark.parametrize(
    ("names", "directions", "winner"),
    [
        (("output_throughput", "kv_tokens"), ("maximize", "maximize"), 1),
        (("output_throughput", "ttft_p99_ms"), ("maximize", "minimize"), 2),
        (("ttft_p99_ms", "kv_tokens"), ("minimize", "maximize"), 1),
        (("output_throughput_per_gpu", "output_throughput_per_user"), ("maximize", "maximize"), 0),
    ],
)
def test_front_status_and_export_use_the_studys_own_objectives(
    names: tuple[str, str], directions: tuple[str, str], winner: int
) -> None:
    """Three trials: #0 fastest, #1 most KV tokens, #2 lowest TTFT; the study's pair decides."""
    rows = [
        replace(
            make_row(0, tput=900.0, kv=1_000_000),
            metrics={
                **make_row(0).metrics,
                "output_throughput": 900.0,
                "ttft_p99_ms": 900.0,
                "concurrency": 4.0,
            },
        ),  # fmt: skip
        replace(
            make_row(1, tput=700.0, kv=2_000_000),
            metrics={
                **make_row(1).metrics,
                "output_throughput": 700.0,
                "ttft_p99_ms": 950.0,
                "concurrency": 4.0,
            },
        ),  # fmt: skip
        replace(
            make_row(2, tput=650.0, kv=900_000),
            metrics={
                **make_row(2).metrics,
                "output_throughput": 650.0,
                "ttft_p99_ms": 100.0,
                "concurrency": 4.0,
            },
        ),  # fmt: skip
    ]
    base = study_data(rows, optuna_front=False)
    data = replace(base, metric_names=names, directions=directions, best_numbers=None)
    front = pareto_front(data)
    by_pair = {
        ("output_throughput", "kv_tokens"): (0, 1),
        ("output_throughput", "ttft_p99_ms"): (0, 2),
        ("ttft_p99_ms", "kv_tokens"): (0, 1, 2),
        ("output_throughput_per_gpu", "output_throughput_per_user"): (0,),
    }
    assert front == by_pair[names]
    best = choose_best(data, prefer=names[1])
    assert best.row.trial_number == winner
    lines = tradeoff_lines(front_points(data), best.row.trial_number, names)
    assert len(lines) == len(front)
    heading = build_profile(data, best).context[2]
    for name in names:
        assert name.split("_")[0].upper() in heading.upper() or name.replace("_", " ") in heading
    assert "Pareto front (* above) over" not in _text(status_table(data, front))  # the table itself renders


def test_a_pick_on_one_noisy_measurement_warns_and_names_confirm() -> None:
    rows = [make_row(0, tput=900.0, kv=1_000_000)]
    trials = [frozen(rows[0])]
    trials[0].user_attrs["warning"] = (
        "noisy: other processes kept the client's event loop late (lag p99 9 ms)"
    )
    data = study_data(rows, trials)
    choice = choose_best(data)
    assert "measured once" in choice.warning and "tuner confirm" in choice.warning
    assert any(
        line.startswith("WARNING: trial 0 was measured once")
        for line in provenance(build_profile(data, choice))
    )
    again = study_data([*rows, make_row(None, id=9, tput=880.0, confirm_of=1)], trials)
    assert choose_best(again).warning == ""  # re-measured: the median decides, no warning


def test_every_export_names_a_verify_with_benchmark() -> None:
    lines = verify_lines(SPACE, ("--model-path", "/models/GLM-5"))
    assert lines[0].startswith(
        "verify with: python -m tuner bench --url http://127.0.0.1:30000 --input-len 128"
    )
    assert "--concurrency 64 --num-prompts 64" in lines[0]
    assert "python -m sglang.bench_serving --backend sglang" in lines[1]
    assert "--random-input-len 128 --random-output-len 16" in lines[1] and "--max-concurrency 64" in lines[1]
    assert lines[1].endswith("--tokenizer /models/GLM-5")
    assert "not stored" in verify_lines(None)[0]


def test_the_verify_commands_carry_the_studys_latency_constraints_as_goodput_bounds() -> None:
    text = SPACE + '\nconstraints: ["ttft_p99_ms <= 300", "tpot_p99_ms <= 40", "ttft_p50_ms <= 500"]\n'
    ours, theirs = verify_lines(text, ("--model-path", "/models/GLM-5"))
    assert ours.endswith("--goodput ttft:300 tpot:40")  # the tightest bound of each family
    assert "--goodput ttft:300 tpot:40 --tokenizer" in theirs
    assert "--goodput" not in " ".join(verify_lines(SPACE.replace("constraints:", "unused:")))


def test_the_front_cross_check_reads_what_optuna_holds_of_each_trial_median_or_first() -> None:
    """Trial 0 re-measured 700 -> median 760 (not amended: an earlier release), trial 1 750 -> 740
    (amended), trial 2 measured once at 745: Optuna's front is trial 2, that of neither reading alone."""
    rows = [
        make_row(0, tput=700.0), make_row(1, tput=750.0), make_row(2, tput=745.0),
        make_row(None, id=10, tput=760.0, confirm_of=1), make_row(None, id=11, tput=780.0, confirm_of=1),
        make_row(None, id=12, tput=740.0, confirm_of=2), make_row(None, id=13, tput=730.0, confirm_of=2),
    ]  # fmt: skip
    trials = [frozen(r) for r in rows if r.confirm_of is None]
    amended = optuna.trial.create_trial(params=dict(rows[1].params), distributions=DISTS,
                                        values=[740.0, 1_000_000.0], user_attrs=dict(trials[1].user_attrs),
                                        constraints={"failure": 0.0})  # fmt: skip
    amended.number = 1
    data = study_data(rows, [trials[0], amended, trials[2]])
    assert data.best_numbers == (2,)
    assert pareto_front(data) == (0,)  # strict: no contradiction; shown by medians (760 beats 745, 740)
