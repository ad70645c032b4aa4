"""What the correctness gate asks and expects (the `gate:` section of a space file).

Each model declares its keys, defaults and bounds once (see tuner.settings). In a space file a
prompt that gives only the name of a built-in prompt (and maybe some of its keys) is that
built-in prompt with those keys changed.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, ValidationInfo, field_validator, model_validator

from tuner.settings import Duration, Regex, Settings, mistake, non_empty, space_dir

MAX_BURST = 4_096  # simultaneous gate requests: past SGLang's largest CUDA graph (1,024) nothing new is seen
MAX_GATE_TOKENS = 1 << 20  # tokens of one gate answer: more than any released context window


class GatePrompt(Settings):
    """A prompt with a checkable answer, asked at temperature 0."""

    name: str = Field(min_length=1)
    prompt: str = Field(min_length=1)
    expect: str | None = Field(default=None, min_length=1)  # substring, case-insensitive
    expect_regex: Regex | None = None
    max_tokens: int = Field(default=64, ge=1, le=MAX_GATE_TOKENS)
    min_tokens: int = Field(default=1, ge=0, le=MAX_GATE_TOKENS)  # an answer shorter than this is garbage

    @model_validator(mode="before")
    @classmethod
    def _from_built_in(cls, data: Any, info: ValidationInfo) -> Any:
        if space_dir(info) is None or not isinstance(data, dict) or not isinstance(data.get("name"), str):
            return data
        base = {p.name: p for p in DEFAULT_PROMPTS}.get(data["name"])
        if base is not None:
            return {**base.model_dump(), **data}
        if "prompt" not in data:
            names = ", ".join(p.name for p in DEFAULT_PROMPTS)
            raise mistake(f"required for a new prompt (built-in names: {names})", at=("prompt",))
        return data

    @model_validator(mode="after")
    def _min_below_max(self) -> GatePrompt:
        if self.min_tokens > self.max_tokens:
            raise mistake(
                f"min_tokens must be ≤ max_tokens {self.max_tokens} (got {self.min_tokens})",
                at=("min_tokens",),
            )
        return self


DEFAULT_PROMPTS: tuple[GatePrompt, ...] = (
    GatePrompt(
        name="capital",
        prompt="What is the capital of France? Answer in one word.",
        expect="Paris",
        max_tokens=256,
    ),
    GatePrompt(
        name="arithmetic",
        prompt="What is 17 + 25? Answer with the number only.",
        expect_regex=r"\b42\b",
        max_tokens=256,
    ),
    GatePrompt(
        name="list",
        prompt="List the first five prime numbers, separated by commas.",
        expect_regex=r"2\D+3\D+5\D+7\D+11",
        max_tokens=256,
    ),
    GatePrompt(
        name="long",
        prompt="Write a detailed explanation, about 300 words long, of how a hash table works.",
        expect_regex=r"(?i)hash",
        max_tokens=400,
        min_tokens=100,
    ),
)


class ReferenceSource(str, Enum):
    """Where the reference answers of the agreement check come from."""

    FIRST = "first"  # the greedy outputs of the study's first trial to pass the gate (baselines run first)
    FILE = "file"  # a file (`python -m tuner reference` writes one from a trial or a running server)


DEFAULT_REFERENCE_PROMPTS: tuple[str, ...] = (
    "The history of the printing press begins",
    "def fibonacci(n):",
    "1, 2, 3, 5, 8, 13,",
    "Once upon a time, in a small village by the sea,",
    "The three laws of thermodynamics state that",
)


class ReferenceSettings(Settings):
    """Reference agreement: greedy outputs must equal a trusted configuration's, token by token.

    Raw prompts through SGLang's native /generate at temperature 0 (no chat template, no expected
    answer), so it works with any model: base, code, chat, any language.
    """

    enabled: bool = False
    source: ReferenceSource = Field(default=ReferenceSource.FIRST, strict=False)
    path: Path | None = Field(default=None, strict=False)  # with source: file; relative to the space file
    prompts: Annotated[tuple[str, ...], non_empty("reference prompt")] = Field(
        default=DEFAULT_REFERENCE_PROMPTS, strict=False
    )
    # the compared length: greedy tokens generated per prompt
    tokens: int = Field(default=64, ge=1, le=MAX_GATE_TOKENS)
    # A first difference where the reference's own top-1 and top-2 tokens are within this many nats is
    # a near-tie, not a failure: bf16 keeps 8 significant bits, so a logit of magnitude ~10-30 is
    # rounded by ~0.04-0.1, and kernels that reduce in another order differ by a few such roundings;
    # where the reference's own logits are coarser, a few of their roundings (reference.logit_step).
    near_tie: float = Field(default=0.2, ge=0.0)

    @model_validator(mode="before")
    @classmethod
    def _file_path(cls, data: Any, info: ValidationInfo) -> Any:
        folder = space_dir(info)
        if folder is None or not isinstance(data, dict):
            return data
        source, path = data.get("source", ReferenceSource.FIRST.value), data.get("path")
        if source == ReferenceSource.FILE.value and path is None:
            raise mistake("source: file needs a path to the reference file", at=("path",))
        if isinstance(path, str) and path and not Path(path).is_absolute():
            return {**data, "path": str(folder / path)}
        return data


class GateSettings(Settings):
    """The gate of one trial: prompts, the burst size, the reference check, and its time limit."""

    enabled: bool = True
    prompts: tuple[GatePrompt, ...] = Field(default=DEFAULT_PROMPTS, strict=False)  # empty: reference only
    reference: ReferenceSettings = Field(default_factory=ReferenceSettings)
    # None = the largest captured CUDA-graph batch (≥ 8)
    burst_size: int | None = Field(default=None, ge=1, le=MAX_BURST)
    timeout_s: Duration = Field(default=600.0, gt=0, validation_alias="timeout")

    @model_validator(mode="after")
    def _something_to_check(self) -> GateSettings:
        if self.enabled and not self.prompts and not self.reference.enabled:
            why = "expected at least one prompt (or reference.enabled: true, or enabled: false)"
            raise mistake(why, at=("prompts",))
        return self

    @field_validator("prompts")
    @classmethod
    def _names_differ(cls, prompts: tuple[GatePrompt, ...]) -> tuple[GatePrompt, ...]:
        for index, p in enumerate(prompts):
            if any(q.name == p.name for q in prompts[:index]):
                raise mistake(f"duplicate gate prompt {p.name!r}", at=(index, "name"))
        return prompts
