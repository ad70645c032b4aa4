"""Greedy continuations through SGLang's native /generate: token ids and the top-2 logprobs per position,
read from any release's answer shape (an object or a one-element list; ids from `output_ids` or from
`meta_info.output_token_logprobs`), and refused when the answer is not of that shape."""

from __future__ import annotations

import httpx

from tuner.gate.reference import GreedyOutput

__all__ = ["greedy"]


async def greedy(client: httpx.AsyncClient, prompt: str, tokens: int) -> GreedyOutput:
    """The greedy continuation of a raw prompt through SGLang's native /generate (token ids when given)."""
    payload = {
        "text": prompt,
        "sampling_params": {"temperature": 0, "max_new_tokens": tokens},
        "return_logprob": True,  # meta_info.output_token_logprobs carries the ids where output_ids is absent
        "top_logprobs_num": 2,  # the top-1/top-2 gap per position tells a near-tie
        "stream": False,
    }
    response = await client.post("/generate", json=payload)
    response.raise_for_status()
    body = response.json()
    if isinstance(body, list) and body:
        body = body[0]
    if not isinstance(body, dict):
        raise ValueError(f"/generate answered {type(body).__name__} {str(body)[:60]!r}, not an object")
    ids = body.get("output_ids")
    meta = body.get("meta_info")
    meta = meta if isinstance(meta, dict) else {}
    if not isinstance(ids, list):
        logprobs = meta.get("output_token_logprobs")
        ids = [_token_id(entry) for entry in logprobs] if isinstance(logprobs, list) else None
    if isinstance(ids, list) and not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
        raise ValueError("/generate: output token ids are not all integers")
    token_ids = tuple(ids) if isinstance(ids, list) else None
    top2 = _top2(meta.get("output_top_logprobs"))
    return GreedyOutput(prompt=prompt, token_ids=token_ids, text=str(body.get("text", "")), top2=top2)


def _top2(value: object) -> tuple[tuple[tuple[int, float], ...], ...] | None:
    """SGLang's meta_info.output_top_logprobs (per position: [logprob, token id, text], most likely
    first) as (token id, logprob) pairs; None when absent or not of that shape."""
    if not isinstance(value, list):
        return None
    try:
        return tuple(tuple((int(entry[1]), float(entry[0])) for entry in (pos or [])[:2]) for pos in value)
    except (TypeError, ValueError, IndexError):
        return None


def _token_id(entry: object) -> object:
    """The token id of one `output_token_logprobs` entry ([logprob, id, text]); ValueError when short."""
    if not isinstance(entry, (list, tuple)) or len(entry) < 2:
        raise ValueError(f"/generate: a logprob entry {str(entry)[:40]!r} has no token id")
    return entry[1]
