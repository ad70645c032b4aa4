"""Does a model's output look like the product of broken numerics? (pure)

Checks that need no expected answer: empty output, literal NaN/inf
markers, U+FFFD replacement characters, control characters, one short
unit repeated over most of the text, one word dominating the text, a
finish reason that makes no sense, and an answer shorter than asked for.
Thresholds are set so that ordinary answers ("Paris", "42",
"2, 3, 5, 7, 11", an essay, a code listing) pass; each is a named constant
with the reason for its value.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from enum import Enum


class GarbageReason(str, Enum):
    """Why an output was judged garbage."""

    EMPTY = "empty"
    NAN_MARKERS = "nan_markers"
    REPLACEMENT_CHARS = "replacement_chars"
    CONTROL_CHARS = "control_chars"
    REPEATED = "repeated"
    BAD_FINISH = "bad_finish"
    TOO_SHORT = "too_short"


@dataclass(frozen=True, kw_only=True, slots=True)
class GarbageFinding:
    """A reason code and a short human message."""

    reason: GarbageReason
    message: str

    @property
    def is_nan(self) -> bool:
        """True when the text itself spells NaN/inf: evidence of NaN, not just of garbage."""
        return self.reason is GarbageReason.NAN_MARKERS


# A lone U+FFFD can be a multi-byte character cut by max_tokens; three, or
# one in twenty characters, is a broken detokenization or broken logits.
REPLACEMENT_MIN_COUNT = 3
REPLACEMENT_MIN_FRACTION = 0.05
# "Mostly" non-printable: a stray control character in long text is tolerated.
CONTROL_MIN_FRACTION = 0.3
CONTROL_MIN_COUNT = 8
# A unit repeated at least REPEAT_MIN_TIMES in a row over at least
# REPEAT_MIN_COVER of the text; units are up to REPEAT_MAX_UNIT_CHARS
# characters or REPEAT_MAX_UNIT_WORDS words. Four back-to-back copies of a
# unit covering half the text does not happen in essays, lists or code.
REPEAT_MAX_UNIT_CHARS = 32
REPEAT_MAX_UNIT_WORDS = 48
REPEAT_MIN_TIMES = 4
REPEAT_MIN_COVER = 0.5
REPEAT_MIN_SPAN_CHARS = 8  # "11", "!!" and "4444" are not garbage on their own
# One word making up this share of a text of at least WORD_MIN_COUNT words.
WORD_MIN_COUNT = 8
WORD_MAX_SHARE = 0.5
# NaN words mixed with other text: at least this many and this share of words.
NAN_MIN_WORDS = 3
NAN_MIN_SHARE = 0.5
# finish_reason "length" with fewer than this share of max_tokens: the server stopped early.
LENGTH_MIN_SHARE = 0.5
# Finish reasons that say the request did not complete normally.
BAD_FINISH_REASONS = frozenset({"abort", "error"})

_REPEAT_CHARS = re.compile(rf"(.{{1,{REPEAT_MAX_UNIT_CHARS}}}?)\1{{{REPEAT_MIN_TIMES - 1},}}", re.DOTALL)
_REPEAT_WORDS = re.compile(rf"(.{{1,{REPEAT_MAX_UNIT_WORDS}}}?)\1{{{REPEAT_MIN_TIMES - 1},}}", re.DOTALL)
_NAN_WORD = re.compile(r"[-+]?(?:nan|inf(?:inity)?)", re.IGNORECASE)
_NAN_FILLER = re.compile(r"[\s\W_]+")
_WORD_STRIP = "\"'`.,;:!?()[]{}<>*-_=+|/\\"
_PLAIN_SPACE = frozenset(" \n\r\t")
_BAD_CATEGORIES = frozenset({"Cc", "Cs", "Co", "Cn"})


def estimate_tokens(text: str) -> int:
    """A rough token count when the server reported none: max(words, chars / 4)."""
    return max(len(text.split()), len(text) // 4)


def inspect_text(
    text: str,
    *,
    completion_tokens: int | None,
    finish_reason: str | None,
    max_tokens: int,
    min_tokens: int,
    answer_tokens: int | None = None,
) -> GarbageFinding | None:
    """The first garbage sign in one finished output, or None if it looks sane.

    `completion_tokens` is the server's count for the whole completion (it
    is compared with max_tokens); `answer_tokens` is the answer's own count
    when a reasoning part shares the completion (compared with min_tokens;
    defaults to completion_tokens, else an estimate from the text).
    """
    finding = inspect_content(text, finish_reason=finish_reason)
    if finding is not None:
        return finding
    finding = inspect_finish(finish_reason, completion_tokens=completion_tokens, max_tokens=max_tokens)
    if finding is not None:
        return finding
    tokens = answer_tokens if answer_tokens is not None else completion_tokens
    if tokens is None:
        tokens = estimate_tokens(text)
    if tokens < min_tokens:
        return GarbageFinding(
            reason=GarbageReason.TOO_SHORT,
            message=f"answer has {tokens} tokens, fewer than the {min_tokens} asked for",
        )
    return None


def inspect_content(text: str, *, finish_reason: str | None = None) -> GarbageFinding | None:
    """The first garbage sign in the text alone (no finish or length checks)."""
    stripped = text.strip()
    if not stripped:
        suffix = f" (finish_reason {finish_reason!r})" if finish_reason is not None else ""
        return GarbageFinding(reason=GarbageReason.EMPTY, message=f"empty output{suffix}")
    for check in (
        _nan_markers,
        _token_zero_run,
        _replacement_chars,
        _control_chars,
        _repeated_unit,
        _dominant_word,
    ):
        finding = check(stripped)
        if finding is not None:
            return finding
    return None


def inspect_finish(
    finish_reason: str | None, *, completion_tokens: int | None, max_tokens: int
) -> GarbageFinding | None:
    """A finish reason that makes no sense for a completed request, or None."""
    if finish_reason is None:
        return GarbageFinding(reason=GarbageReason.BAD_FINISH, message="no finish_reason in the response")
    if finish_reason in BAD_FINISH_REASONS:
        return GarbageFinding(reason=GarbageReason.BAD_FINISH, message=f"finish_reason {finish_reason!r}")
    if (
        finish_reason == "length"
        and completion_tokens is not None
        and completion_tokens < max_tokens * LENGTH_MIN_SHARE
    ):
        return GarbageFinding(
            reason=GarbageReason.BAD_FINISH,
            message=f"finish_reason 'length' after {completion_tokens} of {max_tokens} tokens",
        )
    return None


def nan_signature(text: str) -> str | None:
    """Why an output is NaN's (all NaN/inf words, or a run of token id 0), or None: the checks that hold
    for any prompt, also random ones whose honest continuations loop."""
    stripped = text.strip()
    for check in (_nan_markers, _token_zero_run):
        finding = check(stripped) if stripped else None
        if finding is not None:
            return finding.message
    return None


def _excerpt(text: str, chars: int = 24) -> str:
    return repr(text[:chars] + ("…" if len(text) > chars else ""))


# Greedy decoding over NaN logits picks token id 0 every step; in the Llama, GLM,
# Qwen and DeepSeek vocabularies id 0 decodes to "!". A run of it is the
# classic signature of NaN logits, not ordinary garbage.
TOKEN_ZERO = "!"
TOKEN_ZERO_MIN_RUN = 4


def _token_zero_run(text: str) -> GarbageFinding | None:
    squeezed = "".join(text.split())
    if len(squeezed) >= TOKEN_ZERO_MIN_RUN and set(squeezed) == {TOKEN_ZERO}:
        return GarbageFinding(
            reason=GarbageReason.NAN_MARKERS,
            message=f"output is {len(squeezed)} x {TOKEN_ZERO!r} (token id 0: the signature of NaN logits)",
        )
    return None


def _nan_markers(text: str) -> GarbageFinding | None:
    # The whole output is NaN/inf words ("nan", "NaN NaN", "nannannan", "-inf, inf").
    if not _NAN_FILLER.sub("", _NAN_WORD.sub("", text)) and _NAN_WORD.search(text):
        return GarbageFinding(
            reason=GarbageReason.NAN_MARKERS, message=f"output is NaN/inf markers: {_excerpt(text)}"
        )
    words = [w.strip(_WORD_STRIP) for w in text.split()]
    words = [w for w in words if w]
    markers = sum(1 for w in words if _NAN_WORD.fullmatch(w))
    if markers >= NAN_MIN_WORDS and markers >= NAN_MIN_SHARE * len(words):
        return GarbageFinding(
            reason=GarbageReason.NAN_MARKERS,
            message=f"{markers} of {len(words)} words are NaN/inf: {_excerpt(text)}",
        )
    return None


def _replacement_chars(text: str) -> GarbageFinding | None:
    visible = sum(1 for c in text if not c.isspace())
    count = text.count("\ufffd")
    if text.endswith("\ufffd") and count < visible:
        count -= 1  # one trailing U+FFFD: a multi-byte character cut short by max_tokens
    if count >= REPLACEMENT_MIN_COUNT or (count and count >= REPLACEMENT_MIN_FRACTION * visible):
        return GarbageFinding(
            reason=GarbageReason.REPLACEMENT_CHARS,
            message=f"{count} U+FFFD replacement characters in {visible}",
        )
    return None


def _control_chars(text: str) -> GarbageFinding | None:
    chars = [c for c in text if c not in _PLAIN_SPACE]
    bad = sum(1 for c in chars if unicodedata.category(c) in _BAD_CATEGORIES)
    if bad and (bad >= CONTROL_MIN_COUNT or bad >= CONTROL_MIN_FRACTION * len(chars)):
        return GarbageFinding(
            reason=GarbageReason.CONTROL_CHARS,
            message=f"{bad} of {len(chars)} characters are control or unassigned: {_excerpt(text)}",
        )
    return None


def _repeated_unit(text: str) -> GarbageFinding | None:
    # Characters first (catches "!!!!", "abcabc", loops without spaces), then
    # words mapped to one symbol each (catches a repeated sentence cheaply).
    # Whitespace runs count as one space, and a trailing space closes the last
    # unit, so "the the the the" is four repeats of "the ".
    flat = " ".join(text.split()) + " "
    found = _longest_repeat(_REPEAT_CHARS, flat)
    if found is not None and found[1] >= REPEAT_MIN_SPAN_CHARS:
        unit, span = found
        return _repeat_finding(unit, span // len(unit), span / len(flat))
    words = text.split()
    ids: dict[str, str] = {}
    coded = "".join(ids.setdefault(w, chr(0x10000 + len(ids))) for w in words)
    found = _longest_repeat(_REPEAT_WORDS, coded)
    if found is not None:
        unit, span = found
        by_id = {v: k for k, v in ids.items()}
        return _repeat_finding(" ".join(by_id[c] for c in unit), span // len(unit), span / len(coded))
    return None


def _longest_repeat(pattern: re.Pattern[str], flat: str) -> tuple[str, int] | None:
    best: re.Match[str] | None = None
    for match in pattern.finditer(flat):
        if best is None or len(match.group(0)) > len(best.group(0)):
            best = match
    if best is None:
        return None
    span = len(best.group(0))
    if span < REPEAT_MIN_COVER * len(flat):
        return None
    return best.group(1), span


def _repeat_finding(unit: str, times: int, cover: float) -> GarbageFinding:
    return GarbageFinding(
        reason=GarbageReason.REPEATED,
        message=f"{_excerpt(unit)} repeated {times} times over {100 * cover:.0f}% of the text",
    )


def _dominant_word(text: str) -> GarbageFinding | None:
    words = [w.strip(_WORD_STRIP).casefold() for w in text.split()]
    words = [w for w in words if w]
    if len(words) < WORD_MIN_COUNT:
        return None
    word, count = Counter(words).most_common(1)[0]
    if count < WORD_MAX_SHARE * len(words):
        return None
    return GarbageFinding(
        reason=GarbageReason.REPEATED,
        message=f"the word {word!r} is {count} of {len(words)} words",
    )
