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


@dataclass(frozen=True, kw_only=True, slots=True)
class Agreement:
    """How one prompt's output compares with the reference: the first differing position, if any."""

    prompt: str
    compared: int  # positions compared (tokens, or characters when the server gave no ids)
    unit: str  # "token" | "char"
    first_mismatch: int | None  # 0-based; None = agrees over `compared` positions
    expected: str | None = None  # at the first mismatch
    got: str | None = None

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

    @property
    def passed(self) -> bool:
        return all(a.agrees for a in self.agreements)

    def reason(self) -> str | None:
        """One line on the first prompt that disagrees; None when all agree."""
        bad = [a for a in self.agreements if not a.agrees]
        if not bad:
            return None
        a = bad[0]
        return (
            f"reference mismatch: {len(bad)} of {len(self.agreements)} prompts disagree with {self.source}; "
            f"{a.prompt[:40]!r} first differs at {a.unit} {a.first_mismatch} of {a.compared} "
            f"(expected {a.expected!r}, got {a.got!r})"
        )


def compare(reference: GreedyOutput, output: GreedyOutput, tokens: int) -> Agreement:
    """Token by token over the first `tokens` positions (by characters when either side lacks ids)."""
    exp: Sequence[Any]
    got: Sequence[Any]
    if reference.token_ids is not None and output.token_ids is not None:
        exp, got, unit = reference.token_ids[:tokens], output.token_ids[:tokens], "token"
    else:
        exp, got, unit = reference.text, output.text, "char"
    length = max(len(exp), len(got))
    for i in range(length):
        e = exp[i] if i < len(exp) else None
        g = got[i] if i < len(got) else None
        if e != g:
            return Agreement(
                prompt=output.prompt,
                compared=length,
                unit=unit,
                first_mismatch=i,
                expected=_shown(e),
                got=_shown(g),
            )
    return Agreement(prompt=output.prompt, compared=length, unit=unit, first_mismatch=None)


def _shown(value: object) -> str:
    return "(end)" if value is None else str(value)


def agreements(
    reference: Sequence[GreedyOutput], outputs: Sequence[GreedyOutput], tokens: int
) -> tuple[Agreement, ...]:
    """One Agreement per prompt of `outputs`; a prompt the reference lacks is a ConfigError."""
    by_prompt = {r.prompt: r for r in reference}
    missing = [o.prompt for o in outputs if o.prompt not in by_prompt]
    if missing:
        raise ConfigError(
            f"reference: no reference answer for prompt(s) {missing!r}; re-record the reference"
        )
    return tuple(compare(by_prompt[o.prompt], o, tokens) for o in outputs)


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
        "answers": [{"prompt": o.prompt, "token_ids": o.token_ids, "text": o.text} for o in outputs],
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
            )
            for a in data["answers"]
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            f"reference file {path}: cannot read it ({exc}); expected one `tuner reference` wrote"
        ) from exc
    return answers, str(data.get("source") or path)


class ReferenceBook:
    """The reference answers of one study (or one command): read from a file, or recorded once."""

    def __init__(self, settings: ReferenceSettings, run_dir: Path | None) -> None:
        self.settings = settings
        if settings.source is ReferenceSource.FILE:
            assert settings.path is not None
            self.path: Path | None = Path(settings.path)
        else:
            self.path = None if run_dir is None else Path(run_dir) / "reference.json"

    def answers(self) -> tuple[tuple[GreedyOutput, ...], str] | None:
        """The reference and where it came from; None while `source: first` has recorded none yet."""
        if self.path is None or (self.settings.source is ReferenceSource.FIRST and not self.path.exists()):
            return None
        return read_reference(self.path)

    def record(self, outputs: Sequence[GreedyOutput], model: str | None) -> bool:
        """Make `outputs` the study's reference (source: first only); False when there is nowhere to."""
        if self.settings.source is not ReferenceSource.FIRST or self.path is None:
            return False
        write_reference(self.path, outputs, source="the first trial to pass the gate", model=model)
        return True
