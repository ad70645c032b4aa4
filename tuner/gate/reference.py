"""Reference agreement: a trial's greedy outputs against a trusted configuration's, token by token.

Pure values and comparison, plus the reference file (JSON) and `ReferenceBook`, which hands the
reference to the gate and, for `source: first`, records the first gate-passing trial's outputs
as the reference of the study (a file in the study's run directory, shared by its workers on
one host). Greedy decoding of one model on one set of weights is deterministic up to numerics:
a disagreement early in an answer, or many of them, is a broken kernel, a corrupted KV cache or
a wrong configuration that a keyword check cannot see.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.errors import ConfigError
from tuner.gate.settings import ReferenceSettings, ReferenceSource
from tuner.private import atomic_open, read_regular
from tuner.sglang.logs import KV_CANARY_MARK

CANARY_MARK = KV_CANARY_MARK
FILE_FORMAT = 1


@dataclass(frozen=True, kw_only=True, slots=True)
class GreedyOutput:
    """One prompt's greedy continuation: token ids (None when the server gave none) and text."""

    prompt: str
    token_ids: tuple[int, ...] | None
    text: str
    # per position, the two most likely (token id, logprob) as the server saw them (top_logprobs_num 2);
    # None when the server gave none. A reference's own top-1/top-2 gap tells a near-tie.
    top2: tuple[tuple[tuple[int, float], ...], ...] | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Agreement:
    """How one prompt's output compares with the reference: the first differing position, if any."""

    prompt: str
    compared: int  # positions compared (tokens, or characters when the server gave no ids)
    unit: str  # "token" | "char"
    first_mismatch: int | None  # 0-based; None = agrees over `compared` positions
    expected: str | None = None  # at the first mismatch
    got: str | None = None
    near_tie_at: int | None = None  # the outputs part at a near-tie here (agreeing before it): not a failure
    gap: float | None = None  # the reference's top-1/top-2 logprob gap at the first difference
    tolerance: float | None = None  # the near-tie tolerance at this prompt (nats; logit_step widens it)

    @property
    def agrees(self) -> bool:
        return self.first_mismatch is None


@dataclass(frozen=True, kw_only=True, slots=True)
class ReferenceCheck:
    """The agreement part of a gate result."""

    source: str  # where the reference came from (file path, "first trial", ...)
    outputs: tuple[GreedyOutput, ...]  # this server's greedy outputs (the next reference, or evidence)
    agreements: tuple[Agreement, ...] = ()  # empty when this run recorded the reference
    recorded: bool = False  # this run's outputs became the reference
    burst: tuple[Agreement, ...] = ()  # the same prompts asked at once (batched decode) against the reference
    near_tie: float = 0.0  # the tolerance the comparisons used (nats)

    @property
    def passed(self) -> bool:
        return all(a.agrees for a in (*self.agreements, *self.burst))

    @property
    def near_ties(self) -> int:
        return sum(a.near_tie_at is not None for a in (*self.agreements, *self.burst))

    def reason(self) -> str | None:
        """One line on the first prompt that disagrees; None when all agree."""
        for where, group in (("", self.agreements), (" in the burst", self.burst)):
            bad = [a for a in group if not a.agrees]
            if not bad:
                continue
            a = bad[0]
            tie = self.near_tie if a.tolerance is None else a.tolerance
            gap = "" if a.gap is None else f"; the reference's top-1/top-2 gap {a.gap:.3f} > {tie:g}"
            return (
                f"reference mismatch{where}: {len(bad)} of {len(group)} prompts disagree with {self.source}; "
                f"{a.prompt[:40]!r} first differs at {a.unit} {a.first_mismatch} of {a.compared} "
                f"(expected {a.expected!r}, got {a.got!r}{gap})"
            )
        return None


def compare(
    reference: GreedyOutput, output: GreedyOutput, tokens: int, *, near_tie: float = 0.0
) -> Agreement:
    """Token by token over the first `tokens` positions (by characters when either side lacks ids).

    A first difference at a near-tie is agreement up to there: the two tokens are the reference's
    own top-1 and top-2 there, with logprobs within `near_tie` (nats) of each other (a correct kernel
    in another reduction order may swap them; what follows a swap is another continuation, so
    nothing after it is compared), or within TIE_STEPS roundings of the reference's logits where
    those are coarser (`logit_step`). The output's own logprobs are not trusted for this.
    """
    exp: Sequence[Any]
    got: Sequence[Any]
    if reference.token_ids is not None and output.token_ids is not None:
        exp, got, unit = reference.token_ids[:tokens], output.token_ids[:tokens], "token"
    else:
        exp, got, unit = reference.text, output.text, "char"
    length = max(len(exp), len(got))
    tolerance = max(near_tie, TIE_STEPS * logit_step(reference)) if near_tie > 0 else 0.0
    for i in range(length):
        e = exp[i] if i < len(exp) else None
        g = got[i] if i < len(got) else None
        if e != g:
            gap = _tie_gap(reference, i, e, g) if unit == "token" else None
            tie = gap is not None and gap <= tolerance * (1 + 1e-6)
            return Agreement(
                prompt=output.prompt,
                compared=i if tie else length,
                unit=unit,
                first_mismatch=None if tie else i,
                expected=_shown(e),
                got=_shown(g),
                near_tie_at=i if tie else None,
                gap=gap,
                tolerance=tolerance,
            )
    return Agreement(prompt=output.prompt, compared=length, unit=unit, first_mismatch=None)


TIE_STEPS = 4  # a near-tie: within this many roundings of the logits (kernels reducing in another order)
MIN_GAPS = 8  # fewer top-1/top-2 gaps cannot tell a grid from chance (all multiples of 2q: odds 2^-n)
_STEPS = tuple(2.0**e for e in range(4, -11, -1))  # the grids tried, 16 nats down to 2^-10


def logit_step(reference: GreedyOutput) -> float:
    """The rounding step of the reference's logits, read from its own top-1/top-2 gaps (0: none seen).

    bf16 keeps 8 significant bits: a logit of magnitude 2^e lies on a grid of 2^(e-7), so the gap of
    two logits is a multiple of the finer grid of the two, and over a whole answer every gap is a
    multiple of the step of its smallest magnitudes: the largest power of two dividing them all. A
    trained model's logits (~10-30) have a step of 1/16-1/8 nats, within the default tolerance; a
    model whose logits run to hundreds (random weights, no final norm) has steps of 1-2 nats, where
    a correct kernel swaps tokens at gaps the default tolerance would call a clear difference. Logits
    kept in fp32 show no grid (0)."""
    gaps = [abs(t[0][1] - t[1][1]) for t in reference.top2 or () if len(t) >= 2]
    gaps = [g for g in gaps if 0 < g < math.inf]  # a runner-up at -inf (a masked token) tells no grid
    if len(gaps) < MIN_GAPS:
        return 0.0
    for q in _STEPS:
        if all(abs(g / q - round(g / q)) <= 1e-3 + 1e-6 * g / q for g in gaps):
            return q
    return 0.0


def _tie_gap(reference: GreedyOutput, i: int, e: object, g: object) -> float | None:
    """The reference's logprob gap at position i when the two tokens are its top-1 and top-2 there."""
    top = reference.top2[i] if reference.top2 is not None and i < len(reference.top2) else ()
    if len(top) >= 2 and {top[0][0], top[1][0]} == {e, g}:
        return abs(top[0][1] - top[1][1])
    return None


def _shown(value: object) -> str:
    return "(end)" if value is None else str(value)


def agreements(
    reference: Sequence[GreedyOutput], outputs: Sequence[GreedyOutput], tokens: int, *, near_tie: float = 0.0
) -> tuple[Agreement, ...]:
    """One Agreement per prompt of `outputs`; a prompt the reference lacks is a ConfigError."""
    by_prompt = {r.prompt: r for r in reference}
    missing = [o.prompt for o in outputs if o.prompt not in by_prompt]
    if missing:
        raise ConfigError(
            f"reference: no reference answer for prompt(s) {missing!r}; re-record the reference"
        )
    return tuple(compare(by_prompt[o.prompt], o, tokens, near_tie=near_tie) for o in outputs)


def canary_lines(lines: Sequence[str]) -> tuple[str, ...]:
    """The KV-canary violation lines among server log lines (SGLang 0.5.13+, `--kv-canary log`)."""
    return tuple(line for line in lines if CANARY_MARK in line)


# ------------------------------------------------------------------------------------ the file


def write_reference(path: Path, outputs: Sequence[GreedyOutput], *, source: str, model: str | None) -> None:
    """Write the reference file atomically (JSON: source, model, answers with token ids and text)."""
    data = {
        "format": FILE_FORMAT,
        "source": source,
        "model": model,
        "answers": [
            {"prompt": o.prompt, "token_ids": o.token_ids, "text": o.text, "top2": o.top2} for o in outputs
        ],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(path) as fh:  # a random O_EXCL temporary file, then a rename: no planted symlink
        fh.write(json.dumps(data, indent=1) + "\n")


MAX_REFERENCE_BYTES = 64 << 20  # greedy answers of a few prompts: kilobytes


def read_reference(path: Path) -> tuple[tuple[GreedyOutput, ...], str]:
    """(answers, source) of a reference file; ConfigError naming the file when it is unreadable."""
    try:
        data = json.loads(read_regular(path, MAX_REFERENCE_BYTES))  # not a FIFO or a device
        answers = tuple(
            GreedyOutput(
                prompt=str(a["prompt"]),
                token_ids=tuple(int(t) for t in a["token_ids"]) if a.get("token_ids") is not None else None,
                text=str(a.get("text", "")),
                top2=_top2(a.get("top2")),
            )
            for a in data["answers"]
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            f"reference file {path}: cannot read it ({exc}); expected one `tuner reference` wrote"
        ) from exc
    return answers, str(data.get("source") or path)


def _top2(value: Any) -> tuple[tuple[tuple[int, float], ...], ...] | None:
    """The top-2 logprobs of a reference file's answer (absent in files of earlier releases)."""
    if not isinstance(value, list):
        return None
    return tuple(tuple((int(t), float(lp)) for t, lp in pos) for pos in value)


class ReferenceBook:
    """The reference answers of one study: read from a file, or (`source: first`) recorded once.

    A study's reference belongs to the study: it is kept per study name under the run directory
    (`references/<study>.json`), and only the study's own run records it (`record=True`); a one-off
    `tuner trial` or `confirm` reads the study's reference when there is one and never writes it.
    A run directory of an earlier release kept one `reference.json`; it is still read.
    """

    def __init__(
        self,
        settings: ReferenceSettings,
        run_dir: Path | None,
        *,
        study: str | None = None,
        record: bool = True,
    ) -> None:
        self.settings = settings
        self.may_record = record
        self.legacy: Path | None = None
        if settings.source is ReferenceSource.FILE:
            assert settings.path is not None
            self.path: Path | None = Path(settings.path)
        elif run_dir is None:
            self.path = None
        else:
            self.legacy = Path(run_dir) / "reference.json"
            own = Path(run_dir) / "references" / f"{_file_name(study)}.json" if study is not None else None
            self.path = own or self.legacy

    def _readable(self) -> Path | None:
        if self.path is not None and self.path.exists():
            return self.path
        if self.legacy is not None and self.legacy.exists():
            return self.legacy
        return None

    def answers(self) -> tuple[tuple[GreedyOutput, ...], str] | None:
        """The reference and where it came from; None while `source: first` has recorded none yet."""
        if self.settings.source is ReferenceSource.FILE:
            assert self.path is not None
            return read_reference(self.path)
        path = self._readable()
        return None if path is None else read_reference(path)

    def record(self, outputs: Sequence[GreedyOutput], model: str | None) -> bool:
        """Make `outputs` the study's reference (source: first, the study's own run only); False when not."""
        if self.settings.source is not ReferenceSource.FIRST or self.path is None or not self.may_record:
            return False
        source = "the first trial of the study to pass the gate"
        write_reference(self.path, outputs, source=source, model=model)
        return True


def _file_name(study: str) -> str:
    """A study name as a file name (names are the user's: anything but letters, digits, `.-_` becomes `_`)."""
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in study) or "study"
