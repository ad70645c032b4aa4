"""What the correctness gate asks and expects (from the space file)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class GatePrompt:
    """A prompt with a checkable answer, asked at temperature 0."""

    name: str
    prompt: str
    expect: str | None = None  # substring, case-insensitive
    expect_regex: str | None = None
    max_tokens: int = 64
    min_tokens: int = 1  # an answer shorter than this is garbage


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


@dataclass(frozen=True, kw_only=True, slots=True)
class GateSettings:
    """The gate of one trial: prompts, the burst size, and its time limit."""

    prompts: tuple[GatePrompt, ...] = DEFAULT_PROMPTS
    burst_size: int | None = None  # None = the largest captured CUDA-graph batch size (at least 8)
    timeout_s: float = 600.0
    enabled: bool = True
