"""The space file stored with its study: changes refused, `run` without --space resumes the open study."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.cli import main
from tuner.errors import ConfigError
from tuner.space.loader import load_space
from tuner.study.resume import SPACE_PATH, SPACE_TEXT, StoredStudy, choose_study, space_changes
from tuner.study.storage import open_study

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "search_spaces" / "tiny-fast-sim.yaml"


def _copy(tmp_path: Path, name: str = "space.yaml", **edits: str) -> Path:
    text = TINY.read_text()
    for old, new in edits.items():
        text = text.replace(old, new)
    path = tmp_path / name
    path.write_text(text)
    return path


def test_changes_are_named_key_by_key_and_comments_budget_and_gpus_do_not_count() -> None:
    before = "name: s\nversion: 1\ngate:\n  burst_size: 2\nbudget: {n_trials: 6}\nparams: [{name: a}]\n"
    after = "# a comment\nname: s\nversion: 1\ngate:\n  burst_size: 4\nbudget: {n_trials: 60}\ngpus: 0,1\n"
    assert space_changes(before, after) == ["gate.burst_size: 2 -> 4", "params: removed (was [{name: a}])"]
    assert space_changes(before, "# only a comment\n" + before) == []


def test_the_space_is_stored_with_a_new_study_and_a_changed_file_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/exp.db"
    path = _copy(tmp_path)
    study = open_study(load_space(path), url)
    assert study.user_attrs[SPACE_TEXT] == path.read_text()
    assert study.user_attrs[SPACE_PATH] == str(path.resolve())
    path.write_text(
        path.read_text().replace("burst_size: 2", "burst_size: 4").replace("n_trials: 6", "n_trials: 9")
    )
    with pytest.raises(
        ConfigError, match=r"changed since study 'tiny-fast-sim-v1' began \(gate.burst_size: 2 -> 4\)"
    ):
        open_study(load_space(path), url)
    path.write_text(path.read_text().replace("version: 1", "version: 2"))
    assert open_study(load_space(path), url).study_name == "tiny-fast-sim-v2"


def _stored(name: str, finished: int = 0, budget: int | None = 6, path: str | None = None) -> StoredStudy:
    return StoredStudy(
        name=name, space_path=path or str(TINY), space_text="x", finished=finished, budget=budget
    )


def test_choosing_the_study_to_resume() -> None:
    assert choose_study([_stored("a", 6), _stored("b", 2)], None, "db").name == "b"
    with pytest.raises(
        ConfigError, match=r"2 unfinished studies in db: a \(0/6 .*; b \(2/6.*expected --study NAME"
    ):
        choose_study([_stored("a"), _stored("b", 2)], None, "db")
    with pytest.raises(ConfigError, match="no unfinished study"):
        choose_study([_stored("a", 6)], None, "db")
    with pytest.raises(ConfigError, match="is gone; restore it"):
        choose_study([_stored("a", path="/no/such.yaml")], None, "db")
    assert choose_study([_stored("a", 6)], "a", "db").name == "a"


def test_run_without_space_lists_the_choices(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "exp.db"
    url = f"sqlite:///{db}"
    open_study(load_space(_copy(tmp_path, "one.yaml")), url)
    open_study(load_space(_copy(tmp_path, "two.yaml", **{"version: 1": "version: 2"})), url)
    assert main(["run", "--db", str(db), "--plain"]) == 2
    err = capsys.readouterr().err
    assert "2 unfinished studies" in err and "tiny-fast-sim-v1" in err and "tiny-fast-sim-v2" in err
    assert str(tmp_path / "two.yaml") in err


def test_seed_and_sampler_override_the_space(tmp_path: Path) -> None:
    from tuner.cli.run import _space_to_run
    from tuner.cli.run_options import RunOptions

    options = RunOptions(space=TINY, seed=7, sampler="tpe")
    space, name = _space_to_run(options, f"sqlite:///{tmp_path}/exp.db")
    assert (space.sampler.kind, space.sampler.seed, name) == ("tpe", 7, None)


def test_a_study_stopped_after_5_of_12_launches_is_unfinished_whatever_its_asks() -> None:
    import optuna
    from optuna.distributions import FloatDistribution

    from tuner.study.resume import launches_done

    study = optuna.create_study(directions=["maximize"])
    dist = {"x": FloatDistribution(0, 1)}

    def add(**attrs: object) -> None:
        study.add_trial(
            optuna.trial.create_trial(params={"x": 0.5}, distributions=dist, values=[1.0], user_attrs=attrs)
        )

    for _ in range(4):
        add(outcome="ok")
    for _ in range(6):
        add(pruned=True, forbidden=True, rule="forbidden")
    add(pruned=True, forbidden=False, rule="memory_model")
    add(dedup_of=0)  # reuses trial 0: the falsy trial number must still read as "not launched"
    study.set_user_attr("finalists", {"0": 1})  # one finalist repeat claimed: a launch of the budget
    assert launches_done(study) == 5
    stored = StoredStudy(name="s", space_path="x", space_text="", finished=launches_done(study), budget=12)
    assert stored.unfinished and "5/12 launches" in stored.line()
