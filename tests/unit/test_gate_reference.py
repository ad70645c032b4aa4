"""The reference-agreement check and the KV-canary signal (pure parts and the file)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.errors import ConfigError
from tuner.gate.checks import GateVerdict, summarize
from tuner.gate.reference import (
    GreedyOutput,
    ReferenceBook,
    ReferenceCheck,
    agreements,
    compare,
    read_reference,
    write_reference,
)
from tuner.gate.settings import GateSettings, ReferenceSettings, ReferenceSource
from tuner.sglang.logs import nan_lines

CANARY = (
    "[2026-12-01 03:00:00 TP0] kv_canary violation: launch_tag=HEAD fail_reason=verify_real_kv_hash "
    "slot_idx=17 position=5 stored_token=100 expected_token=100"
)


def out(prompt: str, ids: tuple[int, ...] | None, text: str = "") -> GreedyOutput:
    return GreedyOutput(prompt=prompt, token_ids=ids, text=text)


def test_agreeing_outputs_and_the_first_position_of_disagreement() -> None:
    ref = out("p", (1, 2, 3, 4, 5))
    assert compare(ref, out("p", (1, 2, 3, 4, 5)), 64).agrees
    late = compare(ref, out("p", (1, 2, 3, 9, 5)), 64)
    assert (late.first_mismatch, late.unit, late.expected, late.got, late.compared) == (
        3,
        "token",
        "4",
        "9",
        5,
    )
    short = compare(ref, out("p", (1, 2)), 64)
    assert (short.first_mismatch, short.expected, short.got) == (2, "3", "(end)")
    assert compare(ref, out("p", (1, 2, 3, 9)), 3).agrees  # only the configured length counts


def test_without_token_ids_the_text_is_compared_by_character() -> None:
    a = compare(out("p", None, "the cat"), out("p", (1,), "the bat"), 64)
    assert (a.unit, a.first_mismatch) == ("char", 4)


def test_the_check_reason_names_prompt_position_and_source() -> None:
    ref = (out("def f(n):", (1, 2, 3)), out("Once", (4, 5, 6)))
    got = (out("def f(n):", (1, 2, 3)), out("Once", (4, 7, 6)))
    check = ReferenceCheck(source="refs.json", outputs=got, agreements=agreements(ref, got, 64))
    assert not check.passed
    assert check.reason() == (
        "reference mismatch: 1 of 2 prompts disagree with refs.json; 'Once' first differs at token 1 of 3 "
        "(expected '5', got '7')"
    )
    with pytest.raises(ConfigError, match="no reference answer"):
        agreements(ref[:1], got, 64)


def test_reference_file_round_trips_and_a_bad_one_is_named(tmp_path: Path) -> None:
    path = tmp_path / "refs.json"
    write_reference(path, [out("p", (1, 2), "a b")], source="trial 3", model="m")
    answers, source = read_reference(path)
    assert answers == (out("p", (1, 2), "a b"),) and source == "trial 3"
    path.write_text("{")
    with pytest.raises(ConfigError, match=f"reference file {path}"):
        read_reference(path)


def test_the_book_records_the_first_passing_trial_once(tmp_path: Path) -> None:
    book = ReferenceBook(ReferenceSettings(enabled=True), tmp_path)
    assert book.answers() is None
    assert book.record([out("p", (1,))], "m")
    answers, source = book.answers() or ((), "")
    assert answers == (out("p", (1,)),) and "first trial" in source
    fixed = ReferenceBook(
        ReferenceSettings(enabled=True, source=ReferenceSource.FILE, path=tmp_path / "x"), None
    )
    assert not fixed.record([out("p", (1,))], "m")


def test_kv_canary_lines_are_read_as_garbage_before_nan() -> None:
    lines = nan_lines(["INFO ready", CANARY, "Detected errors during sampling! NaN in the logits."])
    assert len(lines) == 2
    verdict, reason = summarize([], lines)
    assert verdict is GateVerdict.GARBAGE
    assert reason is not None and reason.startswith("KV-cache canary violation in server log: ")


def test_a_gate_of_reference_only_needs_no_known_answer_prompts() -> None:
    GateSettings(prompts=(), reference=ReferenceSettings(enabled=True))
    with pytest.raises(ValueError, match="at least one prompt"):
        GateSettings(prompts=())


def test_a_study_s_gate_stage_carries_its_reference_book(tmp_path: Path) -> None:
    from dataclasses import replace

    from tuner.session import trial_session
    from tuner.space.loader import load_space

    space = load_space(Path(__file__).resolve().parents[2] / "search_spaces" / "tiny-fast-sim.yaml")
    gate = space.gate.model_copy(update={"reference": ReferenceSettings(enabled=True)})
    space = replace(space, gate=gate, log_dir=tmp_path / "run")
    with trial_session(space) as ctx:
        book = ctx.gate.keywords["reference"]  # type: ignore[attr-defined]
    assert isinstance(book, ReferenceBook) and book.path == tmp_path / "run" / "reference.json"
