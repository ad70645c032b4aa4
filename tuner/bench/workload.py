"""The requests of a load point: random token-id or word prompts, ShareGPT and JSONL files.

Pure apart from reading the dataset file. No tokenizer is needed:

- RANDOM on /v1/completions sends token-id prompts, so the declared input
  length is exact (SGLang's `random-ids` with `--tokenize-prompt`).
- RANDOM on /v1/chat/completions sends text of common English words, about
  one token per word; the declared length is approximate and the chat
  template adds more. `usage.prompt_tokens` (recorded per request) is the truth.
- File prompts declare ≈ len(text)/4 tokens unless the row says otherwise.

Lengths of RANDOM follow SGLang: uniform integers on [max(1, int(L·ratio)), L],
so ratio 1.0 is fixed length and 0.0 is SGLang's default [1, L] draw.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from tuner.bench.settings import Api, Workload, WorkloadKind
from tuner.errors import BenchmarkError
from tuner.private import read_regular

TOKEN_ID_LOW = 100  # clear of the special tokens at the start of common vocabularies
TOKEN_ID_HIGH = 30_000  # the ids drawn when the served model's vocabulary is not known
CHARS_PER_TOKEN = 4.0  # rough English average, for declared lengths of text prompts
WARMUP_OUTPUT_CAP = 32  # SGLang caps warmup output the same way

_WORDS = (  # noqa: SIM905 - a word list reads better as text
    "the of and to in is was for on that with as by at from his her an which are this be were has "
    "had not but they one all their been more when there some time can would other into them its "
    "only first new two may after over also many most these such made water people years way long "
    "could then each about through back state work part city world great during found place small "
    "under every last three down little well where never before large still high good without among "
    "between against city house light river stone garden market letter number music paper road "
    "school table window winter summer morning evening story friend family mountain island forest"
).split()


@dataclass(frozen=True, kw_only=True, slots=True)
class RequestSpec:
    """One request to send: its prompt, declared input length and requested output length."""

    index: int
    prompt: str | tuple[int, ...]  # token ids only for /v1/completions
    input_tokens: int  # declared (dataset) length: what SGLang counts as input
    output_tokens: int  # max_tokens / max_completion_tokens to request


@dataclass(frozen=True, kw_only=True, slots=True)
class DatasetRow:
    """One prompt read from a file."""

    prompt: str | tuple[int, ...]
    input_tokens: int | None = None
    output_tokens: int | None = None
    where: str = ""  # file:line, for messages


def random_lengths(length: int, ratio: float, count: int, rng: np.random.Generator) -> np.ndarray:
    """SGLang's draw: uniform integers on [max(1, int(length·ratio)), length]."""
    if length < 1:
        raise BenchmarkError(f"workload length must be ≥ 1 (got {length})")
    low = max(1, int(length * ratio))
    return rng.integers(low, length + 1, size=count)


def build_requests(
    workload: Workload,
    count: int,
    *,
    seed: int | None = None,
    rows: tuple[DatasetRow, ...] | None = None,
    vocab_size: int | None = None,
) -> tuple[RequestSpec, ...]:
    """`count` requests for the workload; same seed, same requests. Files are read unless `rows` is given.

    `vocab_size` is the served model's (its embedding rows): random token ids stay below it, since an
    id past the embedding table kills the server (a CUDA index assert) whatever its configuration.
    """
    rng = np.random.default_rng(workload.seed if seed is None else seed)
    if workload.kind is WorkloadKind.RANDOM:
        return _random_requests(workload, count, rng, token_id_range(vocab_size))
    if rows is None:
        rows = load_dataset(workload)
    order = rng.permutation(len(rows))
    specs = []
    for i in range(count):
        row = rows[int(order[i % len(order)])]
        declared = row.input_tokens if row.input_tokens is not None else _estimate_tokens(row.prompt)
        out = row.output_tokens if row.output_tokens is not None else workload.output_len
        specs.append(RequestSpec(index=i, prompt=row.prompt, input_tokens=declared, output_tokens=out))
    return tuple(specs)


def warmup_specs(requests: tuple[RequestSpec, ...], count: int) -> tuple[RequestSpec, ...]:
    """The first `count` prompts (cycled) with output capped at 32 tokens, indexed from 0."""
    if not requests or count <= 0:
        return ()
    return tuple(
        RequestSpec(
            index=i,
            prompt=requests[i % len(requests)].prompt,
            input_tokens=requests[i % len(requests)].input_tokens,
            output_tokens=min(WARMUP_OUTPUT_CAP, requests[i % len(requests)].output_tokens),
        )
        for i in range(count)
    )


MAX_DATASET_BYTES = 4 << 30  # ShareGPT V3 is ~650 MB; a dataset past 4 GiB would not fit in memory


def load_dataset(workload: Workload) -> tuple[DatasetRow, ...]:
    """Read the workload's file (ShareGPT JSON or JSONL); raises BenchmarkError naming file:line."""
    if workload.path is None:
        raise BenchmarkError(f"workload kind {workload.kind.value!r} needs a path")
    path = Path(workload.path)
    try:
        raw = read_regular(path, MAX_DATASET_BYTES)  # /dev/zero, a FIFO: refused, not read forever
    except OSError as exc:
        raise BenchmarkError(f"cannot read dataset {path}: {exc.strerror or exc}") from exc
    parse = parse_sharegpt if workload.kind is WorkloadKind.SHAREGPT else parse_jsonl
    rows = parse(raw, str(path))
    if not rows:
        raise BenchmarkError(f"dataset {path} has no usable prompt")
    return rows


def parse_sharegpt(raw: bytes, name: str = "<sharegpt>") -> tuple[DatasetRow, ...]:
    """ShareGPT JSON: a list of {"conversations": [{"from": "human", "value": ...}, {"from": "gpt", ...}]}.

    The prompt is the first human turn of each conversation; entries without one are
    skipped, as SGLang does. The output length comes from the workload (like SGLang's
    --sharegpt-output-len), since counting the reply's tokens needs a tokenizer.
    """
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BenchmarkError(f"{name}: not JSON ({exc})") from exc
    if not isinstance(data, list):
        raise BenchmarkError(f"{name}: expected a JSON list of conversations (got {type(data).__name__})")
    rows = []
    for i, entry in enumerate(data):
        turns = entry.get("conversations") if isinstance(entry, dict) else None
        if not isinstance(turns, list):
            continue
        for turn in turns:
            if isinstance(turn, dict) and turn.get("from") in ("human", "user"):
                value = turn.get("value")
                if isinstance(value, str) and value.strip():
                    rows.append(DatasetRow(prompt=value, where=f"{name}: entry {i}"))
                break
    return tuple(rows)


def parse_jsonl(raw: bytes, name: str = "<jsonl>") -> tuple[DatasetRow, ...]:
    """One JSON object per line with `prompt` or `text` (a string, or token ids for `prompt`).

    Optional per-line lengths: output from `output_len` / `max_tokens` /
    `max_completion_tokens` / `output_tokens`, input from `input_len` / `prompt_len` /
    `input_tokens`. Blank lines are skipped; anything else wrong names file:line.
    """
    rows = []
    for lineno, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{name}:{lineno}"
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise BenchmarkError(f"{where}: not a JSON object ({exc})") from exc
        if not isinstance(obj, dict):
            raise BenchmarkError(f"{where}: expected a JSON object (got {type(obj).__name__})")
        prompt = _prompt_of(obj, where)
        rows.append(
            DatasetRow(
                prompt=prompt,
                input_tokens=_int_field(obj, ("input_len", "prompt_len", "input_tokens"), where),
                output_tokens=_int_field(obj, _OUTPUT_KEYS, where),
                where=where,
            )
        )
    return tuple(rows)


_OUTPUT_KEYS = ("output_len", "max_tokens", "max_completion_tokens", "output_tokens")


def _is_token_ids(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(type(v) is int for v in value)


def _prompt_of(obj: dict[str, Any], where: str) -> str | tuple[int, ...]:
    for key in ("prompt", "text"):
        value = obj.get(key)
        if isinstance(value, str) and value:
            return value
        if isinstance(value, list) and _is_token_ids(value):
            return tuple(value)
    raise BenchmarkError(
        f"{where}: expected a non-empty string (or token ids) in 'prompt' or 'text' (got keys {sorted(obj)})"
    )


def _int_field(obj: dict[str, Any], keys: tuple[str, ...], where: str) -> int | None:
    for key in keys:
        if key in obj and obj[key] is not None:
            value = obj[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise BenchmarkError(f"{where}: {key} must be a positive integer (got {value!r})")
            return int(value)
    return None


def _estimate_tokens(prompt: str | tuple[int, ...]) -> int:
    if isinstance(prompt, tuple):
        return len(prompt)
    return max(1, round(len(prompt) / CHARS_PER_TOKEN))


def token_id_range(vocab_size: int | None) -> tuple[int, int]:
    """[low, high) of random prompt token ids: clear of the leading special tokens, inside the vocabulary."""
    if vocab_size is None:
        return TOKEN_ID_LOW, TOKEN_ID_HIGH
    if vocab_size < 2:
        raise BenchmarkError(f"the served model's vocabulary has {vocab_size} tokens: no random prompt fits")
    high = min(TOKEN_ID_HIGH, vocab_size)
    return min(TOKEN_ID_LOW, high // 2), high


def _random_requests(
    workload: Workload,
    count: int,
    rng: np.random.Generator,
    ids: tuple[int, int] = (TOKEN_ID_LOW, TOKEN_ID_HIGH),
) -> tuple[RequestSpec, ...]:
    in_lens = random_lengths(workload.input_len, workload.range_ratio, count, rng)
    out_lens = random_lengths(workload.output_len, workload.range_ratio, count, rng)
    specs = []
    for i in range(count):
        n_in = int(in_lens[i])
        prompt: str | tuple[int, ...]
        if workload.api is not Api.CHAT:
            prompt = tuple(int(t) for t in rng.integers(ids[0], ids[1], size=n_in))
        else:
            words = rng.integers(0, len(_WORDS), size=n_in)
            prompt = " ".join(_WORDS[int(w)] for w in words)
        specs.append(RequestSpec(index=i, prompt=prompt, input_tokens=n_in, output_tokens=int(out_lens[i])))
    return tuple(specs)
