"""The families of generated landscapes: what kind of deployment a seed draws, before the details.

| family       | workload                     | what decides the best                               |
|--------------|------------------------------|-----------------------------------------------------|
| mixed        | chat, long-prompt or decode  | any of the below, milder (the first generator's)    |
| kv-bound     | long prompts, tight memory   | KV capacity: the fraction, the KV dtype, queueing   |
| decode-bound | short prompts, long answers, | graph coverage of the running batch and the decode  |
|              | many clients                 | backend; many backends and pairs, failure causes    |
| slo-bound    | agentic: long context, a     | the SLOs: max running requests and the prefill      |
|              | TPOT limit, a free-VRAM floor| chunk trade throughput for TPOT; best on a boundary |

A family is the seed modulo the number of families, so the training and the test seeds hold every
family in equal shares. Every family may also draw an infeasible baseline, failures tied to one
role of a backend (prefill or decode) or to a KV dtype in mixed pairs, backends missing kernels for
the GPU, and a benchmark of more prompts than clients. Each family says how often its fraction range
is tight (its top just past where a drawn share of the memory groups run out: the failure causes
then span 20-30 in many landscapes, decode-bound the most with its many backends, pairs, graph sizes
and running caps) or loose (few causes); mixed is the mildest.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

FAMILIES = ("mixed", "kv-bound", "decode-bound", "slo-bound")


def family_of(seed: int) -> str:
    """The family a seed draws."""
    return FAMILIES[seed % len(FAMILIES)]


@dataclass(frozen=True, kw_only=True, slots=True)
class Shape:
    """A family's draw of the deployment's shape (the generator draws the details)."""

    family: str
    kind: str  # chat, long, decode, agentic
    input_len: int
    output_len: int
    concurrency: int
    prompts_per_client: int  # num_prompts = concurrency x this
    weights_share: tuple[float, float]  # weights per GPU as a share of its memory
    backends: tuple[int, ...]  # how many backends the space may pair (choices)
    mixed_pairs: tuple[int, ...]  # how many mixed pairs beside the same-backend ones (choices)
    victims: tuple[int, ...]  # how many backends get a NaN/garbage mechanism (choices)
    p_kv: float  # chance the KV dtype is a knob
    p_chunk: float
    p_running: float
    launch_overhead_ms: tuple[float, float]  # eager decode's per-step launch cost: graphs matter more
    p_role: float  # chance a failure mechanism holds in one role only
    slo: bool  # a TPOT limit and a free-VRAM floor that bind the best
    p_infeasible_baseline: float
    p_tight: float = 0.0  # chance the fraction range reaches past where memory groups run out
    tight_reach: tuple[float, float] = (0.5, 1.0)  # the share of memory groups that run out in the range
    p_gap: float = 0.0  # chance a backend built for the architecture lacks this chip's kernels (in a role)


def _kv_bound(rng: random.Random) -> Shape:
    return Shape(
        family="kv-bound",
        kind="long",
        input_len=rng.choice((4000, 8000, 12000)),
        output_len=rng.choice((64, 128, 256)),
        concurrency=rng.choice((16, 32, 64)),
        prompts_per_client=rng.choice((1, 2)),
        weights_share=(0.5, 0.75),
        backends=(3, 4),
        mixed_pairs=(2, 3, 4),
        victims=(1, 2, 2),
        p_kv=0.8,
        p_chunk=0.8,
        p_running=0.4,
        launch_overhead_ms=(1.5, 8.0),
        p_role=0.3,
        slo=False,
        p_infeasible_baseline=0.35,
        p_tight=0.9,
        tight_reach=(0.7, 1.0),
        p_gap=0.15,
    )


def _decode_bound(rng: random.Random) -> Shape:
    return Shape(
        family="decode-bound",
        kind="decode",
        input_len=rng.choice((128, 256, 512)),
        output_len=rng.choice((256, 384, 512)),
        concurrency=rng.choice((64, 128, 256)),
        prompts_per_client=rng.choice((1, 2)),
        weights_share=(0.35, 0.65),
        backends=(5, 5, 6),
        mixed_pairs=(4, 5, 6, 7),
        victims=(2, 3, 3, 4),
        p_kv=0.85,
        p_chunk=0.2,
        p_running=0.85,
        launch_overhead_ms=(6.0, 16.0),
        p_role=0.5,
        slo=False,
        p_infeasible_baseline=0.35,
        p_tight=0.9,
        tight_reach=(0.55, 0.95),
        p_gap=0.15,
    )


def _slo_bound(rng: random.Random) -> Shape:
    return Shape(
        family="slo-bound",
        kind="agentic",
        input_len=rng.choice((1024, 2048, 4096)),
        output_len=rng.choice((128, 256)),
        concurrency=rng.choice((32, 64, 128)),
        prompts_per_client=rng.choice((2, 3)),
        weights_share=(0.4, 0.7),
        backends=(3, 4),
        mixed_pairs=(2, 3, 4),
        victims=(1, 2, 2),
        p_kv=0.5,
        p_chunk=1.0,
        p_running=1.0,
        launch_overhead_ms=(2.0, 10.0),
        p_role=0.4,
        slo=True,
        p_infeasible_baseline=0.35,
        p_tight=0.9,
        tight_reach=(0.7, 1.0),
        p_gap=0.15,
    )


def _mixed(rng: random.Random) -> Shape:
    kind = rng.choice(("chat", "long", "decode"))
    conc = rng.choice((32, 64, 128, 256))
    return Shape(
        family="mixed",
        kind=kind,
        input_len={"chat": rng.choice((256, 512, 1024)), "long": rng.choice((4000, 8000)), "decode": 128}[
            kind
        ],
        output_len={"chat": rng.choice((64, 128)), "long": 64, "decode": rng.choice((192, 256))}[kind],
        concurrency=min(conc, 64) if kind == "long" else conc,
        prompts_per_client=rng.choice((1, 1, 2)),
        weights_share=(0.35, 0.72),
        backends=(4, 5) if kind == "decode" else (3, 4, 5),  # a decode-heavy one tries more backends
        mixed_pairs=(2, 3, 4, 5) if kind == "decode" else (1, 2, 3, 4),
        victims=(1, 2, 2),
        p_kv=0.5,
        p_chunk=0.5,
        p_running=0.5,
        launch_overhead_ms=(1.5, 14.0),
        p_role=0.2,
        slo=False,
        p_infeasible_baseline=0.25,
        p_tight=0.7,
        tight_reach=(0.5, 1.0),
        p_gap=0.15,
    )


_FAMILIES: dict[str, Callable[[random.Random], Shape]] = {
    "kv-bound": _kv_bound,
    "decode-bound": _decode_bound,
    "slo-bound": _slo_bound,
}


def shape(family: str, rng: random.Random) -> Shape:
    """The shape of one draw of `family` (any other name: a mixed draw)."""
    return _FAMILIES.get(family, _mixed)(rng)
