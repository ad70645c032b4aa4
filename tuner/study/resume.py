"""The space file stored with its study: resume without `--space`, refuse a file changed since the start.

When a study is created, the content and absolute path of its space file are stored as Optuna
study user attributes (`space_text`, `space_path`), in the database every worker shares. A later
`run` compares the file it is given with that content, key by key (comments and layout do not
count; the `budget` and `gpus` keys may change: they say how long and where to run, not what the
study searches); any other change is refused, naming it, unless `version:` was bumped, which makes
a new study. `run` without `--space` resumes the one unfinished study of the database from its
stored path.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import yaml

from tuner.errors import ConfigError
from tuner.secrets import readable_space_text, redact_space_text, secret_values
from tuner.space.loader import SearchSpace
from tuner.study import finalists

SPACE_TEXT = "space_text"
SPACE_PATH = "space_path"
FREE_KEYS = ("budget", "gpus")  # may change between runs of one study
MAX_SHOWN = 8


@dataclass(frozen=True, kw_only=True, slots=True)
class StoredStudy:
    """A study of the database as `run` without `--space` sees it."""

    name: str
    space_path: str | None
    space_text: str | None
    finished: int  # launches finished, as the budget counts them (asks told without a launch are free)
    budget: int | None  # the stored space's budget.n_trials; None = no trial cap

    @property
    def unfinished(self) -> bool:
        return self.budget is None or self.finished < self.budget

    def line(self) -> str:
        budget = f"{self.finished}/{self.budget}" if self.budget else f"{self.finished}/∞"
        return f"{self.name} ({budget} launches; space {self.space_path or 'not stored'})"


def space_changes(before: str, after: str) -> list[str]:
    """What differs between two space files, key by key ("gate.burst_size: 2 -> 4"); free keys ignored."""
    old, new = _mapping(before), _mapping(after)
    for key in FREE_KEYS:
        old.pop(key, None)
        new.pop(key, None)
    return _diff(old, new, "")


def _mapping(text: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return {"(unparsable)": text}
    return dict(data) if isinstance(data, Mapping) else {"(top)": data}


def _diff(old: Any, new: Any, where: str) -> list[str]:
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        out: list[str] = []
        for key in dict.fromkeys([*old, *new]):
            path = f"{where}.{key}" if where else str(key)
            if key not in new:
                out.append(f"{path}: removed (was {_show(old[key])})")
            elif key not in old:
                out.append(f"{path}: added ({_show(new[key])})")
            else:
                out.extend(_diff(old[key], new[key], path))
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [
            line
            for i, (a, b) in enumerate(zip(old, new, strict=True))
            for line in _diff(a, b, f"{where}[{i}]")
        ]
    return [] if old == new else [f"{where}: {_show_change(old, new)}"]


def _dumped(value: Any) -> str:
    dumped = str(yaml.safe_dump(value, default_flow_style=True, width=10_000))
    return dumped.strip().removesuffix("...").strip()


def _show(value: Any) -> str:
    text = _dumped(value)
    return text if len(text) <= 80 else text[:79] + "…"


def _show_change(old: Any, new: Any) -> str:
    """`old -> new`; long values are cut around where they first differ, so the change stays visible."""
    a, b = _dumped(old), _dumped(new)
    if len(a) <= 80 and len(b) <= 80:
        return f"{a} -> {b}"
    first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    start = max(0, first - 20)

    def window(text: str) -> str:
        cut = text[start : start + 60]
        return ("…" if start else "") + cut + ("…" if start + 60 < len(text) else "")

    return f"{window(a)} -> {window(b)}"


def remember_space(study: optuna.Study, space: SearchSpace) -> None:
    """Store the space file with a new study; for a resumed one, refuse a file that changed since."""
    path = Path(space.path)
    if not path.is_file():
        return  # a space built in code: nothing to store or compare
    text = _redacted(path.read_text(), space)
    stored = study.user_attrs.get(SPACE_TEXT)
    if not isinstance(stored, str):
        study.set_user_attr(SPACE_TEXT, text)
        study.set_user_attr(SPACE_PATH, str(path.resolve()))
        return
    # a study stored by an older version: its placeholders made readable and today's rule applied
    changes = space_changes(redact_space_text(readable_space_text(stored)), text)
    if changes:
        shown = "; ".join(changes[:MAX_SHOWN]) + (
            f"; +{len(changes) - MAX_SHOWN} more" if len(changes) > MAX_SHOWN else ""
        )
        raise ConfigError(
            f"{path}: changed since study {study.study_name!r} began ({shown}); expected the same "
            f"search: restore the file, or bump `version:` (now {space.version!r}) to start a new study"
        )


def _redacted(text: str, space: SearchSpace) -> str:
    """The space file as stored: values of secret-looking keys and URL passwords a quoted placeholder."""
    argv = [part for name, value in space.fixed_flags for part in (f"--{name}", str(value))]
    return redact_space_text(text, secret_values(argv, space.env))


def stored_studies(storage: optuna.storages.BaseStorage) -> list[StoredStudy]:
    """Every study of the storage with its stored space (if any) and progress."""
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        summaries = optuna.get_all_study_summaries(storage, include_best_trial=False)
    for summary in summaries:
        attrs = summary.user_attrs
        text = attrs.get(SPACE_TEXT)
        path = attrs.get(SPACE_PATH)
        study = optuna.load_study(study_name=summary.study_name, storage=storage)
        finished = launches_done(study)
        out.append(
            StoredStudy(
                name=summary.study_name,
                space_path=path if isinstance(path, str) else None,
                space_text=readable_space_text(text) if isinstance(text, str) else None,
                finished=finished,
                budget=_budget(text) if isinstance(text, str) else None,
            )
        )
    return out


def launches_done(study: optuna.Study) -> int:
    """Finished launches and claimed finalist repeats: what `run`'s budget counts, never asks."""
    done = study.get_trials(deepcopy=False)  # finalists.launch_counts keeps the concluded launches
    state = study.user_attrs.get(finalists.STATE_ATTR) or {}
    return finalists.launch_counts(done, state)[0]


def _budget(text: str) -> int | None:
    budget = _mapping(text).get("budget")
    trials = budget.get("n_trials") if isinstance(budget, Mapping) else None
    return trials if isinstance(trials, int) else None


def choose_study(studies: list[StoredStudy], name: str | None, where: str) -> StoredStudy:
    """The study `run` without `--space` resumes: `name`, else the only unfinished one (else ConfigError)."""
    if name is not None:
        found = next((s for s in studies if s.name == name), None)
        if found is None:
            known = ", ".join(s.name for s in studies) or "none"
            raise ConfigError(f"--study {name}: no such study in {where} (studies: {known})")
        chosen = found
    else:
        open_ones = [s for s in studies if s.unfinished and s.space_text is not None]
        if not open_ones:
            done = "; ".join(s.line() for s in studies) or "no study at all"
            raise ConfigError(
                f"run: no unfinished study with a stored space file in {where} ({done}); "
                f"expected --space FILE to start one"
            )
        if len(open_ones) > 1:
            choices = "; ".join(s.line() for s in open_ones)
            raise ConfigError(
                f"run: {len(open_ones)} unfinished studies in {where}: {choices}; "
                f"expected --study NAME (or --space FILE) to say which"
            )
        chosen = open_ones[0]
    if chosen.space_path is None or chosen.space_text is None:
        raise ConfigError(f"study {chosen.name}: no space file stored with it; expected --space FILE")
    if not Path(chosen.space_path).is_file():
        raise ConfigError(
            f"study {chosen.name}: its space file {chosen.space_path} is gone; restore it "
            f"(`python -m tuner studies --show-space {chosen.name}` prints the stored content)"
        )
    return chosen
