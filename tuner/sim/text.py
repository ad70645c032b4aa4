"""A fake tokenizer and deterministic answers (the gate prompts get right ones).

Tokens are words and punctuation marks, each with its leading whitespace, so
joining the pieces gives back the text and every count is deterministic.
"""

from __future__ import annotations

import random
import re
import zlib
from dataclasses import dataclass
from typing import Any

_PIECE = re.compile(r"\s*(?:\w+|[^\w\s])")
VOCAB_SIZE = 151_552
GARBAGE_TOKEN = "!"  # what NaN logits sanitized to -1e5 decode to: token 0


def tokenize(text: str) -> list[str]:
    """Pieces of `text`, each a word or punctuation mark with its leading whitespace."""
    return _PIECE.findall(text)


def count_tokens(text: str) -> int:
    return len(tokenize(text))


def chat_prompt_tokens(messages: list[dict[str, Any]]) -> int:
    """Prompt tokens of a chat: each message's content plus 4 template tokens, plus 3."""
    total = 3
    for message in messages:
        content = message.get("content") or ""
        if isinstance(content, list):  # OpenAI content parts
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        total += 4 + count_tokens(str(content))
    return total


def token_id(piece: str) -> int:
    return zlib.crc32(piece.encode()) % VOCAB_SIZE


_HASH_SENTENCES = (
    "A hash table stores key and value pairs in an array of buckets.",
    "To insert a key, the table runs a hash function over the key and takes the result modulo the "
    "number of buckets.",
    "The hash function should spread keys evenly, so that each bucket holds only a few entries.",
    "When two keys land in the same bucket, a collision happens.",
    "Separate chaining keeps a small linked list in every bucket, while open addressing probes the "
    "next free slot.",
    "Lookups repeat the same steps: hash the key, jump to its bucket, and compare the stored keys "
    "until the match is found.",
    "Because the work does not depend on how many entries the table holds, insert, lookup and "
    "delete take constant time on average.",
    "The load factor is the number of entries divided by the number of buckets.",
    "When the load factor grows past a threshold such as 0.75, the table allocates a larger array "
    "and rehashes every entry into it.",
    "Resizing is expensive once, but spread over many inserts its amortized cost stays constant.",
    "A poor hash function or a malicious input can put many keys in one bucket, and then operations "
    "slow down to linear time.",
    "For that reason many languages use randomized or cryptographic hash seeds.",
    "Hash tables power dictionaries in Python, maps in Go, caches, symbol tables in compilers and "
    "database indexes.",
)

_FILLER = [
    "the",
    "model",
    "answers",
    "this",
    "request",
    "with",
    "a",
    "steady",
    "stream",
    "of",
    "plain",
    "words",
    "that",
    "carry",
    "no",
    "special",
    "meaning",
    "but",
    "keep",
    "the",
    "length",
    "and",
    "pace",
    "of",
    "a",
    "real",
    "reply",
    "so",
    "that",
    "every",
    "client",
    "can",
    "measure",
    "the",
    "server",
    "as",
    "it",
    "would",
    "measure",
    "a",
    "real",
    "one",
    "while",
    "the",
    "text",
    "itself",
    "stays",
    "simple",
    "and",
    "predictable",
]


def _natural_answer(prompt: str, rng: random.Random) -> str:
    p = prompt.lower()
    if "capital of france" in p:
        return "The capital of France is Paris."
    if re.search(r"17\s*\+\s*25", p):
        return "42"
    if "prime" in p and ("five" in p or "5" in p):
        return "2, 3, 5, 7, 11"
    if "hash table" in p:
        words: list[str] = []
        i = 0
        while sum(len(tokenize(s)) for s in words) < 320:
            words.append(_HASH_SENTENCES[i % len(_HASH_SENTENCES)])
            i += 1
        return " ".join(words)
    length = 40 + rng.randrange(160)
    return " ".join(rng.choice(_FILLER) for _ in range(length)).capitalize() + "."


@dataclass(frozen=True, kw_only=True, slots=True)
class Answer:
    """The tokens a request will produce and why it stops."""

    pieces: tuple[str, ...]
    finish_reason: str  # "stop" or "length"


def answer(
    prompt: str, *, max_tokens: int, ignore_eos: bool, temperature: float, request_seed: int
) -> Answer:
    """Deterministic at temperature 0; filler varies with `request_seed` above 0."""
    seed = zlib.crc32(prompt.encode())
    if temperature > 0:
        seed ^= request_seed
    rng = random.Random(seed)
    pieces = tokenize(_natural_answer(prompt, rng))
    if ignore_eos:
        while len(pieces) < max_tokens:
            pieces.append(" " + rng.choice(_FILLER))
        return Answer(pieces=tuple(pieces[:max_tokens]), finish_reason="length")
    if len(pieces) >= max_tokens:
        return Answer(pieces=tuple(pieces[:max_tokens]), finish_reason="length")
    return Answer(pieces=tuple(pieces), finish_reason="stop")
