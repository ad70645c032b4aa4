"""The log classifier over real SGLang logs posted in public issues (tests/fixtures/real_logs).

Each fixture is classified the way ServerProcess does it: the lines as they came, the exit
status and the phase the tuner would be in (launch unless the index says otherwise). The
index gives the source of every excerpt and what it must be classified as.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tuner.config import Phase
from tuner.sglang.log_prefix import FORMATS, apply_prefix
from tuner.sglang.logs import STAGE_NAMES, LogState, classify_failure

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "real_logs"
INDEX: dict[str, dict[str, Any]] = yaml.safe_load((FIXTURES / "INDEX.yaml").read_text(encoding="utf-8"))


def mismatches(name: str, entry: dict[str, Any]) -> list[str]:
    """What the classifier got wrong on one fixture (empty: all right)."""
    lines = (FIXTURES / f"{name}.log").read_text(encoding="utf-8").splitlines()
    expect = entry["expect"]
    wrong = []
    if "retractions" in expect:
        counted = LogState.from_lines(lines).retractions
        if counted != expect["retractions"]:
            wrong.append(f"retractions {counted} != {expect['retractions']}")
    if expect.get("outcome") is None:
        return wrong
    verdict = classify_failure(
        lines, exit_code=entry.get("exit_code", -9), phase=Phase(entry.get("phase", "launch"))
    )
    if verdict.outcome.value != expect["outcome"]:
        wrong.append(f"outcome {verdict.outcome.value} != {expect['outcome']}")
    stage = expect.get("stage")
    if stage and stage not in verdict.message and STAGE_NAMES.get(stage) != verdict.stage:
        wrong.append(f"stage {stage!r}: neither in {verdict.message!r} nor {verdict.stage!r}")
    if expect.get("message") and expect["message"] not in verdict.message:
        wrong.append(f"message {expect['message']!r} not in {verdict.message!r}")
    for key, got in (("backend", verdict.backend), ("role", verdict.role)):
        if key in expect and got != expect[key]:
            wrong.append(f"{key} {got!r} != {expect[key]!r}")
    return wrong


def test_index_and_fixtures_match() -> None:
    logs = {path.stem for path in FIXTURES.glob("*.log")}
    assert logs == set(INDEX), "every fixture has an index entry and every entry a fixture"
    for name, entry in INDEX.items():
        assert entry["source"].startswith("https://github.com/"), name
        assert "version" in entry and "expect" in entry, name
        assert 1 <= len((FIXTURES / f"{name}.log").read_text(encoding="utf-8").splitlines()) <= 80, name


@pytest.mark.parametrize("name", sorted(INDEX))
def test_real_log_is_classified_as_expected(name: str) -> None:
    assert mismatches(name, INDEX[name]) == []


def test_corpus_covers_the_failure_classes() -> None:
    outcomes = {entry["expect"].get("outcome") for entry in INDEX.values()}
    assert {"oom", "unsupported", "capture_failed", "nan", "bad_flag", "crashed", None} <= outcomes
    assert len(INDEX) >= 25


@pytest.mark.parametrize("prefix", sorted(FORMATS))
def test_every_fixture_classifies_the_same_under_each_collector_prefix(prefix: str) -> None:
    """Kubernetes CRI, RFC 3339 timestamps, Ray, compose, console exports, bracketed pids: stripped first."""
    for name, entry in INDEX.items():
        lines = (FIXTURES / f"{name}.log").read_text(encoding="utf-8").splitlines()
        kwargs = {"exit_code": entry.get("exit_code", -9), "phase": Phase(entry.get("phase", "launch"))}
        plain = classify_failure(lines, **kwargs)
        wrapped = classify_failure([apply_prefix(prefix, line, n) for n, line in enumerate(lines)], **kwargs)
        got = (wrapped.outcome, wrapped.stage, wrapped.backend, wrapped.role, wrapped.message)
        assert got == (plain.outcome, plain.stage, plain.backend, plain.role, plain.message), name
        if "retractions" in entry["expect"]:
            wrapped_lines = [apply_prefix(prefix, line, n) for n, line in enumerate(lines)]
            assert LogState.from_lines(wrapped_lines).retractions == entry["expect"]["retractions"], name


def test_the_corpus_covers_the_platforms() -> None:
    platforms = {entry.get("platform", "cuda") for entry in INDEX.values()}
    assert {"cuda", "rocm", "ascend"} <= platforms
