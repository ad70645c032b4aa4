"""The garbage detector: what broken numerics print, and what normal answers look like."""

from __future__ import annotations

import pytest

from tuner.gate.garbage import GarbageReason, estimate_tokens, inspect_content, inspect_finish, inspect_text

ESSAY = """A hash table stores key-value pairs in an array of buckets. To insert an item, the table
computes a hash of the key, a number derived from its bytes, and reduces it modulo the number of buckets
to pick a slot. Two different keys can land in the same slot; this is a collision. Separate chaining keeps
a short list in each bucket, while open addressing probes neighbouring slots (linear probing, quadratic
probing or double hashing) until it finds a free one. Lookups repeat the same computation, so on average
they touch one or two slots regardless of how many items are stored, which is why the expected cost of
insert, delete and search is constant. The load factor, items divided by buckets, governs performance: as
it grows, chains lengthen and probe sequences get longer. Most implementations therefore resize, allocating
a larger array and re-inserting every entry once the load factor passes a threshold such as 0.75. A good
hash function spreads keys uniformly and is cheap to compute; a poor one clusters keys and degrades every
operation toward linear time. Deletion under open addressing needs tombstones so that probe chains are not
broken. Python's dict, Java's HashMap and C++'s unordered_map are all hash tables."""

CODE = """def fib(n: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


if __name__ == "__main__":
    for i in range(10):
        print(i, fib(i))
"""

SANE = {
    "word": "Paris",
    "bold word": "**Paris**",
    "number": "42",
    "number with newlines": "42\n\n",
    "primes": "2, 3, 5, 7, 11",
    "fibonacci": "1, 1, 2, 3, 5, 8, 13, 21",
    "repeated digits": "4444",
    "thousand": "1,000,000",
    "essay": ESSAY,
    "code": CODE,
    "markdown table": "| key | value |\n|-----|-------|\n| a | 1 |\n| b | 2 |\n",
    "mentions NaN once": "In IEEE 754, 0/0 gives NaN and 1/0 gives inf; NaN compares unequal to itself.",
    "words containing nan/inf": "A banana gives information about infinite nanometres.",
    "chinese": "法国的首都是巴黎。",
    "japanese": "日本語のテキストです。これは普通の文章です。",
    "emoji with joiner": "Family: 👨\u200d👩\u200d👧 ok",
    "one trailing replacement char": "The capital is Par\ufffd",
    "yes yes": "Yes, yes, that is right.",
}


@pytest.mark.parametrize("text", list(SANE.values()), ids=list(SANE))
def test_normal_answers_are_not_garbage(text: str) -> None:
    assert inspect_content(text) is None
    assert (
        inspect_text(text, completion_tokens=None, finish_reason="stop", max_tokens=400, min_tokens=1) is None
    )


GARBAGE = {
    "empty": ("", GarbageReason.EMPTY),
    "whitespace only": (" \n\t ", GarbageReason.EMPTY),
    "bangs": ("!!!!!!!!", GarbageReason.NAN_MARKERS),
    "question marks": ("????????", GarbageReason.REPEATED),
    "the the": ("the the the the", GarbageReason.REPEATED),
    "word loop after an answer": ("Paris " + "is a city " * 30, GarbageReason.REPEATED),
    "char loop without spaces": ("hello " + "abc" * 100, GarbageReason.REPEATED),
    "single char run": ("x" * 2000, GarbageReason.REPEATED),
    "sentence loop": (
        "Sure. " + "The hash of the key picks a bucket in the array, and that is all there is to it. " * 6,
        GarbageReason.REPEATED,
    ),
    "dominant word": ("a b the c the d the e the f the the", GarbageReason.REPEATED),
    "nan words": ("nan nan nan", GarbageReason.NAN_MARKERS),
    "lone inf": ("inf", GarbageReason.NAN_MARKERS),
    "NaN": ("NaN", GarbageReason.NAN_MARKERS),
    "nan run without spaces": ("nannannannan", GarbageReason.NAN_MARKERS),
    "signed infs in a list": ("-inf, inf, -inf", GarbageReason.NAN_MARKERS),
    "mostly nan words": ("value nan nan nan nan", GarbageReason.NAN_MARKERS),
    "replacement chars": ("\ufffd\ufffd\ufffd", GarbageReason.REPLACEMENT_CHARS),
    "replacement chars inside text": (
        "Pa\ufffdr\ufffdis is \ufffdthe capital",
        GarbageReason.REPLACEMENT_CHARS,
    ),
    "lone replacement char": ("\ufffd", GarbageReason.REPLACEMENT_CHARS),
    "control chars": ("\x00\x01\x02abc", GarbageReason.CONTROL_CHARS),
    "private use area": ("\ue000\ue001\ue002\ue003", GarbageReason.CONTROL_CHARS),
}


@pytest.mark.parametrize(("text", "reason"), list(GARBAGE.values()), ids=list(GARBAGE))
def test_garbage_is_found_with_its_reason(text: str, reason: GarbageReason) -> None:
    finding = inspect_content(text)
    assert finding is not None
    assert finding.reason is reason
    assert finding.message
    assert finding.is_nan == (reason is GarbageReason.NAN_MARKERS)


def test_nan_words_outrank_repetition() -> None:
    finding = inspect_content("nan " * 50)
    assert finding is not None and finding.reason is GarbageReason.NAN_MARKERS


def test_repetition_message_names_the_unit() -> None:
    finding = inspect_content("????????????????")
    assert finding is not None
    assert "'?'" in finding.message and "16 times" in finding.message


def test_a_run_of_token_zero_is_the_nan_signature() -> None:
    finding = inspect_content("! ! !!!! !!")
    assert finding is not None and finding.is_nan and "token id 0" in finding.message
    assert inspect_content("Paris!") is None
    assert inspect_content("!!!") is None or not inspect_content("!!!").is_nan  # too short to tell


@pytest.mark.parametrize(
    ("finish", "tokens", "bad"),
    [
        ("stop", 3, False),
        ("length", 400, False),
        ("length", 250, False),  # half of max_tokens: plausible
        ("length", 12, True),  # stopped "for length" far below max_tokens
        ("length", None, False),  # no count: cannot tell
        ("abort", 400, True),
        (None, 5, True),
        ("tool_calls", 5, False),
    ],
)
def test_finish_reason(finish: str | None, tokens: int | None, bad: bool) -> None:
    finding = inspect_finish(finish, completion_tokens=tokens, max_tokens=400)
    assert (finding is not None) == bad
    if finding is not None:
        assert finding.reason is GarbageReason.BAD_FINISH


def test_bad_finish_on_sane_text() -> None:
    finding = inspect_text("Paris", completion_tokens=1, finish_reason="abort", max_tokens=256, min_tokens=1)
    assert finding is not None and finding.reason is GarbageReason.BAD_FINISH


def test_text_garbage_is_reported_before_the_finish() -> None:
    finding = inspect_text(
        "?" * 256, completion_tokens=256, finish_reason="length", max_tokens=256, min_tokens=1
    )
    assert finding is not None and finding.reason is GarbageReason.REPEATED


def test_empty_message_carries_the_finish_reason() -> None:
    finding = inspect_text("", completion_tokens=0, finish_reason="abort", max_tokens=256, min_tokens=1)
    assert finding is not None and finding.reason is GarbageReason.EMPTY
    assert "abort" in finding.message


def test_too_short_uses_the_server_count() -> None:
    finding = inspect_text(
        "Hash tables map keys.", completion_tokens=5, finish_reason="stop", max_tokens=400, min_tokens=100
    )
    assert finding is not None and finding.reason is GarbageReason.TOO_SHORT
    assert "5 tokens" in finding.message and "100" in finding.message
    assert (
        inspect_text(ESSAY, completion_tokens=230, finish_reason="stop", max_tokens=400, min_tokens=100)
        is None
    )


def test_too_short_prefers_answer_tokens_over_a_count_that_includes_reasoning() -> None:
    kwargs = dict(completion_tokens=380, finish_reason="stop", max_tokens=400, min_tokens=100)
    assert inspect_text("Hash tables map keys.", **kwargs) is None  # type: ignore[arg-type]
    finding = inspect_text("Hash tables map keys.", answer_tokens=5, **kwargs)  # type: ignore[arg-type]
    assert finding is not None and finding.reason is GarbageReason.TOO_SHORT


def test_too_short_estimates_when_the_server_gave_no_count() -> None:
    short = inspect_text(
        "Hash tables.", completion_tokens=None, finish_reason="stop", max_tokens=400, min_tokens=100
    )
    assert short is not None and short.reason is GarbageReason.TOO_SHORT
    assert (
        inspect_text(ESSAY, completion_tokens=None, finish_reason="stop", max_tokens=400, min_tokens=100)
        is None
    )


def test_estimate_tokens() -> None:
    assert estimate_tokens("Paris") == 1
    assert estimate_tokens("one two three") == 3
    assert estimate_tokens("x" * 400) == 100
