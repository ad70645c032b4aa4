"""The failure-aware search through `python -m tuner run` on a small scenario with failures.

tests/fixtures/spaces/tiny-failing-sim.yaml: fa3 does not run on the simulated GPU, flashmla_sparse
computes garbage, and the fraction has OOM boundaries. Every launch is checked against the rules
its earlier launches proved, the way `tuner.search` defines them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from optuna.trial import FrozenTrial, TrialState

from tuner.config import Outcome
from tuner.search.rules import RuleKind, covering, derive_rules
from tuner.search.told import concluded
from tuner.space import load_space
from tuner.store.figures import figures_over
from tuner.store.sql import SqlStore
from tuner.study.learn import evidence_of
from tuner.study.learn import launched as was_launched

pytestmark = pytest.mark.integration

SPACE = Path(__file__).resolve().parents[1] / "fixtures" / "spaces" / "tiny-failing-sim.yaml"
STUDY = "tiny-failing-sim-v1"


def run(tmp: Path, *extra: str) -> subprocess.Popen[str]:
    cmd = [
        sys.executable,
        "-m",
        "tuner",
        "run",
        "--space",
        str(SPACE),
        "--db",
        str(tmp / "exp.db"),
        "--plain",
        *extra,
    ]
    return subprocess.Popen(cmd, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(proc: subprocess.Popen[str]) -> str:
    out = proc.communicate(timeout=240)[0]
    assert proc.returncode == 0, out
    return out


def trials(tmp: Path) -> list[FrozenTrial]:
    study = optuna.load_study(study_name=STUDY, storage=f"sqlite:///{tmp / 'exp.db'}")
    return list(study.get_trials(deepcopy=False))


def launched(all_trials: list[FrozenTrial]) -> list[FrozenTrial]:
    return [t for t in all_trials if concluded(t) and was_launched(t.user_attrs)]


def proven_bad_launches(all_trials: list[FrozenTrial]) -> list[tuple[int, str]]:
    """Launches covered by a rule that earlier launches had proved."""
    space = load_space(SPACE)
    evidence = [e for t in launched(all_trials) if (e := evidence_of(space, t)) is not None]
    bad = []
    for i, ev in enumerate(evidence):
        rule = covering(derive_rules(evidence[:i]), ev.knobs)
        if rule is not None:
            bad.append((ev.trial, rule.describe()))
    return bad


@pytest.fixture(scope="module")
def studied(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One whole study of the failing space (10 launches, 2 of them finalist repeats)."""
    tmp = tmp_path_factory.mktemp("failing")
    return tmp, finish(run(tmp))


def test_a_study_never_launches_where_a_failure_already_proved_it_would_fail(
    studied: tuple[Path, str],
) -> None:
    tmp_path, out = studied
    all_trials = trials(tmp_path)
    assert proven_bad_launches(all_trials) == []
    ours = launched(all_trials)
    assert len(ours) + 2 == 10, out  # the budget counts launches: 8 searched + 2 finalist repeats
    fa3 = [t for t in ours if "fa3" in str(t.params)]
    # fa3's traceback names the backend and the role it failed in, so one failed launch per role bans
    # it in every pair using it in that role
    space = load_space(SPACE)
    rules = derive_rules([e for t in ours if (e := evidence_of(space, t)) is not None])
    roles = {r.role for r in rules if r.kind is RuleKind.BACKEND and r.backend == "fa3"}
    assert roles and len(fa3) == len(roles), [t.params for t in fa3]
    rows = SqlStore(f"sqlite:///{tmp_path / 'exp.db'}").trials(STUDY)
    pruned = [r for r in rows if r.outcome is Outcome.PRUNED and r.launch is None]
    assert pruned and all("trial " in (r.failure_message or "") or "forbidden" in (r.failure_message or "")
                          for r in pruned)  # fmt: skip
    repeats = [r for r in rows if r.confirm_of is not None]
    assert len(repeats) == 2 and len({r.confirm_of for r in repeats}) == 1
    assert "not launched:" in out and "pruned by" in out  # pruned asks are counted and grouped by rule


def test_failures_reach_optuna_without_placeholder_values(studied: tuple[Path, str]) -> None:
    tmp_path, _ = studied
    all_trials = trials(tmp_path)
    rows = {r.trial_number: r for r in SqlStore(f"sqlite:///{tmp_path / 'exp.db'}").trials(STUDY)
            if r.confirm_of is None}  # fmt: skip
    failed = [t for t in all_trials if (r := rows.get(t.number)) is not None and not r.outcome.measured]
    assert any(r.launch is not None for r in rows.values() if not r.outcome.measured)  # a launch failed
    assert failed and [t for t in all_trials if t.values is not None and not any(t.values)] == []
    for t in failed:  # a FAIL (launched) or PRUNED (not) with its verdict, the outcome in its attrs
        row = rows[t.number]
        assert t.state is (TrialState.FAIL if row.launch is not None else TrialState.PRUNED), t
        assert t.values is None and concluded(t) and t.user_attrs["outcome"] == row.outcome.value
        assert t.constraints["failure"] > 0
    study = optuna.load_study(study_name=STUDY, storage=f"sqlite:///{tmp_path / 'exp.db'}")
    assert study.best_trials and all(rows[t.number].feasible for t in study.best_trials)


def test_a_remeasured_trial_shows_its_median_in_optuna(studied: tuple[Path, str]) -> None:
    tmp_path, _ = studied
    rows = SqlStore(f"sqlite:///{tmp_path / 'exp.db'}").trials(STUDY)
    original = next(r for r in rows if r.id == next(x.confirm_of for x in rows if x.confirm_of is not None))
    figures = figures_over(rows, original)
    assert figures.runs == 3
    trial = trials(tmp_path)[original.trial_number or 0]
    assert trial.values == pytest.approx([figures.values["output_throughput"], figures.values["kv_tokens"]])
    attrs = trial.user_attrs
    assert attrs["output_throughput"] == pytest.approx(figures.values["output_throughput"])
    assert attrs["measurements"] == 3 and attrs["measured_range"] == figures.spread()


@pytest.mark.chaos  # two workers at once, then a resume: run with the storms (make chaos)
def test_two_workers_and_a_resume_never_launch_the_same_configuration_twice(tmp_path: Path) -> None:
    workers = [run(tmp_path, "--trials", "6") for _ in range(2)]
    for w in workers:
        finish(w)
    finish(run(tmp_path, "--trials", "9"))  # resumed: draws new suggestions, replays none
    keys = [t.user_attrs["cfg_hash"] for t in launched(trials(tmp_path))]
    assert len(keys) == len(set(keys)), keys
    rows = SqlStore(f"sqlite:///{tmp_path / 'exp.db'}").trials(STUDY)
    spans: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        if r.launch is not None:
            spans.setdefault(r.config_hash, []).append((r.started_at.timestamp(), r.finished_at.timestamp()))
    for key, runs in spans.items():
        runs.sort()
        assert all(b[0] >= a[1] for a, b in zip(runs, runs[1:], strict=False)), (key, runs)


def test_a_warm_start_begins_with_what_the_earlier_study_learned(tmp_path: Path) -> None:
    finish(run(tmp_path, "--trials", "6"))
    earlier = trials(tmp_path)
    feasible = [t for t in launched(earlier) if t.user_attrs.get("feasible")]
    out = finish(run(tmp_path, "--study", "fresh", "--trials", "4", "--warm-start", STUDY))
    later = optuna.load_study(study_name="fresh", storage=f"sqlite:///{tmp_path / 'exp.db'}").get_trials()
    assert later[0].user_attrs.get("warm_start") or later[0].user_attrs.get("baseline"), out
    warm = [t for t in later if t.user_attrs.get("warm_start")]
    assert {str(sorted(t.params.items())) for t in warm} <= {str(sorted(t.params.items())) for t in feasible}
    space = load_space(SPACE)
    old = [e for t in launched(earlier) if (e := evidence_of(space, t)) is not None]
    new = [e for t in launched(later) if (e := evidence_of(space, t)) is not None]
    for i, ev in enumerate(new):
        assert covering(derive_rules([*old, *new[:i]]), ev.knobs) is None, ev
