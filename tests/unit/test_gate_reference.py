"""The reference-agreement check and the KV-canary signal (pure parts and the file)."""

from __future__ import annotations

import json
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
    logit_step,
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
    assert isinstance(book, ReferenceBook)
    assert book.path == tmp_path / "run" / "references" / "tiny-fast-sim-v1.json"
    assert not book.may_record  # only the study's own run records its reference


def test_a_one_off_trial_never_becomes_the_study_s_reference(tmp_path: Path) -> None:
    """`tuner trial` (no study) reads the study's reference but never writes it; the study's run does."""
    settings = ReferenceSettings(enabled=True)
    one_off = ReferenceBook(settings, tmp_path, study="s-v1", record=False)
    assert not one_off.record([out("p", (1,))], "m") and one_off.answers() is None
    assert not (tmp_path / "references").exists() and not (tmp_path / "reference.json").exists()
    study = ReferenceBook(settings, tmp_path, study="s-v1", record=True)
    assert study.record([out("p", (2,))], "m")
    assert one_off.answers() is not None and one_off.answers()[0] == (out("p", (2,)),)  # type: ignore[index]
    other = ReferenceBook(settings, tmp_path, study="other/v1", record=True)
    assert other.answers() is None  # another study in the same run directory has its own


def test_a_run_directory_of_an_earlier_release_keeps_its_reference(tmp_path: Path) -> None:
    write_reference(tmp_path / "reference.json", [out("p", (7,))], source="old", model="m")
    book = ReferenceBook(ReferenceSettings(enabled=True), tmp_path, study="s-v1", record=True)
    answers, source = book.answers() or ((), "")
    assert answers == (out("p", (7,)),) and source == "old"


def tie(prompt: str, ids: tuple[int, ...], top2: tuple[tuple[tuple[int, float], ...], ...]) -> GreedyOutput:
    return GreedyOutput(prompt=prompt, token_ids=ids, text="", top2=top2)


def test_a_bf16_near_tie_is_agreement_up_to_it_and_a_clear_difference_fails() -> None:
    """Real SGLang 0.5.17: torch_native vs triton first differed at token 23 of 24 on a near-tie."""
    clear = ((1, -0.01), (9, -5.0))
    near = ((3, -0.70), (8, -0.75))  # the reference's own top-1 / top-2 within 0.05 nats
    ref = tie("p", (1, 2, 3, 4), (clear, clear, near, clear))
    swapped = compare(ref, out("p", (1, 2, 8, 5)), 64, near_tie=0.2)
    assert swapped.agrees and swapped.near_tie_at == 2 and swapped.compared == 2
    assert swapped.gap is not None and abs(swapped.gap - 0.05) < 1e-9
    assert not compare(ref, out("p", (1, 2, 8, 5)), 64, near_tie=0.01).agrees  # the tolerance is stated
    assert not compare(ref, out("p", (1, 2, 7, 4)), 64, near_tie=0.2).agrees  # not the runner-up
    assert not compare(ref, out("p", (1, 9, 3, 4)), 64, near_tie=0.2).agrees  # a 5-nat gap is no tie
    assert not compare(out("p", (1, 2, 3, 4)), out("p", (1, 2, 8, 4)), 64, near_tie=0.2).agrees  # no logprobs
    check = ReferenceCheck(source="s", outputs=(), agreements=(swapped,), near_tie=0.2)
    assert check.passed and check.near_ties == 1


def test_where_the_reference_s_logits_are_coarse_a_swap_within_a_few_roundings_is_a_near_tie() -> None:
    """Real SGLang 0.5.17 on a tiny random-weight model (logits in the hundreds, bf16 steps of 0.5-2
    nats): torch_native against triton swapped the reference's top two at a gap of exactly 2.0."""
    coarse = [((1, 0.0), (9, -104.0)), ((1, 0.0), (9, -392.0)), ((1, -0.0025), (9, -6.0025)),
              ((1, 0.0), (9, -103.5)), ((1, -0.018), (9, -4.018)), ((1, 0.0), (9, -16.0)),
              ((1, 0.0), (9, -68.0)), ((1, 0.0), (9, -22.0))]  # fmt: skip
    last = ((1, -0.12692804634571075), (8, -2.1269280910491943))
    ids = (1,) * 9
    ref = tie("p", ids, (*coarse, last))
    assert logit_step(ref) == 0.5  # every gap a multiple of 1/2, not all of 1 (103.5)
    swapped = compare(ref, out("p", ids[:8] + (8,)), 64, near_tie=0.2)
    assert swapped.agrees and swapped.near_tie_at == 8 and swapped.tolerance == 2.0
    # a clear difference stays one: the first position's runner-up is 104 nats behind
    far = compare(ref, out("p", (9,) + ids[1:]), 64, near_tie=0.2)
    assert not far.agrees and far.first_mismatch == 0
    assert "gap 104.000 > 2" in (ReferenceCheck(source="s", outputs=(), agreements=(far,)).reason() or "")
    assert not compare(ref, out("p", ids[:8] + (8,)), 64, near_tie=0.0).agrees  # exact agreement asked
    # fine logits (a trained model, or fp32): no coarser grid, the stated tolerance holds
    gaps = (0.3, 1.7, 2.9, 0.45, 5.1, 0.77, 3.3, 1.1)
    fine = tie("p", ids, (*(((1, -0.01), (9, -0.01 - g)) for g in gaps), last))
    assert logit_step(fine) == 0.0
    assert not compare(fine, out("p", ids[:8] + (8,)), 64, near_tie=0.2).agrees
    assert logit_step(tie("p", (1, 1), (coarse[0], coarse[1]))) == 0.0  # two gaps tell no grid
    masked = tie("p", ids, (*coarse, ((1, 0.0), (9, float("-inf")))))
    assert logit_step(masked) == 0.5  # a runner-up at -inf is left out, not a crash


def test_real_sglang_outputs_torch_native_s_late_swap_is_a_near_tie_and_triton_agrees_exactly() -> None:
    """Greedy outputs of real SGLang 0.5.17 (one H100, a tiny random-weight Llama in bf16), per trial of one
    study, against that study's reference: torch_native was stored as a wrong answer at token 23 of 24."""
    folder = Path(__file__).resolve().parents[1] / "fixtures" / "real_sglang"
    reference, _ = read_reference(folder / "reference-0.5.17-h100.json")
    assert [logit_step(r) for r in reference] == [0.5, 0.5, 1.0]
    trials = json.loads((folder / "gate-outputs-0.5.17-h100.json").read_text())["trials"]
    checked = {}
    for trial in trials:
        outputs = [
            GreedyOutput(
                prompt=o["prompt"],
                token_ids=tuple(o["token_ids"]),
                text="",
                top2=tuple(tuple((int(t), float(lp)) for t, lp in pos) for pos in o["top2"]),
            )
            for o in trial["outputs"]
        ]
        found = agreements(reference, outputs, 24, near_tie=0.2)
        check = ReferenceCheck(source="s", outputs=(), agreements=found, near_tie=0.2)
        checked[trial["params"]["attention-backend"], trial["trial"]] = (check.passed, check.near_ties)
    assert checked[("torch_native/torch_native", 6)] == (True, 1)
    assert {v for (backend, _), v in checked.items() if backend.startswith("triton")} == {(True, 0)}
    assert len(checked) == 5


def test_top2_logprobs_round_trip_through_the_reference_file(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    ref = tie("p", (1, 2), (((1, -0.1), (5, -0.2)), ((2, -0.3), (6, -3.0))))
    write_reference(path, [ref], source="s", model="m")
    assert read_reference(path)[0] == (ref,)

