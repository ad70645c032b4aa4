"""Every configuration a space can launch, and how alike two configurations are knob by knob.

    candidates(space, limit, rng) -> Candidates   params dicts (space naming), TrialConfigs, features

The space is discrete in practice (steps, choices), so the search scores every candidate rather
than optimising a continuous proxy. Ranges without a step get `GRID` points (geometric when
`log`); conditions are honoured; forbidden combinations and backend pairs outside a pair
param's choices are left out. A space larger than `limit` is thinned to a seeded sample.

Features, one block per knob (the surrogate's kernel compares knobs block by block):
  cat  the value's level (two configurations alike when equal)
  num  the value on [0, 1] (linear, or log for log ranges and positive choices); a knob's choices
       by their size on its axis (a KV dtype's bytes per element); graphs: off 0, the largest
       captured batch on [0.25, 1]
A backend pair is three categorical features (prefill, decode, the pair), so what is learnt about
a backend in one pair carries over to the others that use it.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tuner.config import TrialConfig
from tuner.knobs.protocol import ROLES as KNOB_ROLES
from tuner.knobs.registry import knob_of, knob_owning
from tuner.space.params import Param, ParamKind, clean_float, condition_holds, split_backend_pair
from tuner.space.sampling import config_from_params, forbidden_reason

if TYPE_CHECKING:
    from tuner.space.loader import SearchSpace

GRID = 9  # points of a range without a step
COVERAGE = False  # graphs also featured by the share of the running batch they cover (_coverage)
COVERS = False  # graphs also featured by whether they cover the running batch (a level: yes / no)
MAX_CANDIDATES = 6000


@dataclass(frozen=True, kw_only=True, slots=True)
class Block:
    """The features of one knob: categorical columns and numeric columns (indexes into the arrays)."""

    name: str
    cat: tuple[int, ...]
    num: tuple[int, ...]
    role: str = "other"  # what the knob is physically (ROLES): which failure mechanisms it takes part in
    product: bool = False  # alike only when alike in every feature (an interaction), not on average


# A knob's physical role (tuner.knobs.protocol.ROLES): the memory fraction, CUDA graphs, the attention
# backends, the KV dtype, the prefill chunk, the running-request cap, or anything else.
ROLES = KNOB_ROLES


def by_role(blocks: tuple[Block, ...] | list[Block]) -> list[Block]:
    """The blocks with a backend pair split into one block per feature (prefill, decode, the pair),
    so a model can weigh what the prefill and the decode backend each do (a failure or a speed tied
    to one role is not spread over the other)."""
    out: list[Block] = []
    for b in blocks:
        if b.role == "backends" and len(b.cat) > 1:
            out += [Block(name=f"{b.name}[{i}]", cat=(c,), num=(), role=b.role) for i, c in enumerate(b.cat)]
        else:
            out.append(b)
    return out


def role_of(p: Param) -> str:
    """The physical role of a param (ROLES): its knob's, or that of the knob owning its flag's option
    (a plain param on --attention-backend is a backend); "other" for any other flag."""
    if p.knob is not None:
        return knob_of(p.knob).role
    owner = knob_owning((p.flag or p.name).replace("-", "_"))
    return "other" if owner is None else owner.role


@dataclass(frozen=True, kw_only=True, slots=True)
class Candidates:
    """The launchable configurations of a space, with their features."""

    params: tuple[dict[str, object], ...]  # space naming (a backend pair as "prefill/decode")
    configs: tuple[TrialConfig, ...]
    keys: tuple[str, ...]  # canonical params text, to match trials
    cat: tuple[tuple[int, ...], ...]  # per candidate: level per categorical column (-1: inactive)
    num: tuple[tuple[float, ...], ...]  # per candidate: value per numeric column (-1: inactive)
    blocks: tuple[Block, ...]

    def index(self) -> dict[str, int]:
        return {k: i for i, k in enumerate(self.keys)}


def params_key(params: Mapping[str, object]) -> str:
    """A canonical text of a params dict in space naming (floats rounded)."""
    clean = {k: (round(v, 9) if isinstance(v, float) else v) for k, v in params.items()}
    return json.dumps(clean, sort_keys=True, default=str)


def values_of(p: Param) -> list[Any]:
    """Every value of a knob the search considers."""
    if p.is_discrete:
        return list(p.choices)
    assert p.low is not None and p.high is not None
    low, high = float(p.low), float(p.high)
    if p.step is not None:
        count = int(math.floor((high - low) / float(p.step) + 1e-9)) + 1
        raw = [low + i * float(p.step) for i in range(count)]
    elif p.log and low > 0:
        raw = [low * (high / low) ** (i / (GRID - 1)) for i in range(GRID)]
    else:
        raw = [low + (high - low) * i / (GRID - 1) for i in range(GRID)]
    if p.kind is ParamKind.INT:
        return sorted({int(round(v)) for v in raw})
    return [clean_float(p, v) for v in raw]


def _expand(params: tuple[Param, ...], i: int, values: dict[str, Any], out: list[dict[str, Any]]) -> None:
    if len(out) > 50 * MAX_CANDIDATES:
        return
    if i == len(params):
        out.append(dict(values))
        return
    p = params[i]
    if not condition_holds(p, values):
        _expand(params, i + 1, values, out)
        return
    for v in values_of(p):
        values[p.name] = v
        _expand(params, i + 1, values, out)
    values.pop(p.name, None)


def candidates(space: SearchSpace, *, limit: int = MAX_CANDIDATES, seed: int = 0) -> Candidates:
    """The space's launchable configurations (a seeded sample of `limit` when there are more)."""
    found: list[dict[str, Any]] = []
    _expand(tuple(space.params), 0, {}, found)
    found = [p for p in found if forbidden_reason(space, p) is None]
    if len(found) > limit:
        found = random.Random(seed).sample(found, limit)
    blocks, columns = _layout(space)
    caps = running_caps(space)
    cats: list[tuple[int, ...]] = []
    nums: list[tuple[float, ...]] = []
    for params in found:
        c, n = _features(params, columns, caps)
        cats.append(c)
        nums.append(n)
    return Candidates(
        params=tuple(found),
        configs=tuple(config_from_params(space, p) for p in found),
        keys=tuple(params_key(p) for p in found),
        cat=tuple(cats),
        num=tuple(nums),
        blocks=blocks,
    )


# a column: (param name, how to read the value) -- "level", "prefill", "decode", "graphs", "num", "size"
_Column = tuple[Param, str, dict[Any, int] | tuple[float, float, bool]]


def _layout(space: SearchSpace) -> tuple[tuple[Block, ...], tuple[list[_Column], list[_Column]]]:
    cat_cols: list[_Column] = []
    num_cols: list[_Column] = []
    blocks: list[Block] = []
    for p in space.params:
        c0, n0 = len(cat_cols), len(num_cols)
        values = values_of(p)
        levels = {json.dumps(v, default=str): i for i, v in enumerate(values)}
        if p.kind is ParamKind.BACKEND_PAIR:
            roles = [split_backend_pair(str(v)) for v in values]
            for role, side in (("prefill", 0), ("decode", 1)):
                names = dict.fromkeys(r[side] for r in roles)
                cat_cols.append((p, role, {name: i for i, name in enumerate(names)}))
            cat_cols.append((p, "level", levels))
        elif p.kind is ParamKind.CUDA_GRAPH:
            cat_cols.append((p, "level", levels))
            cat_cols.append((p, "graphs", {False: 0, True: 1}))
            sizes = [s for s in (graph_bs(v) for v in values) if s]
            if len(sizes) > 1:
                num_cols.append((p, "graph_bs", (math.log(min(sizes)), math.log(max(sizes)), True)))
            batch = running_batch(space)
            if sizes and batch and COVERAGE:
                num_cols.append((p, "graph_cover", (float(batch), 0.0, False)))
            if sizes and batch and COVERS:
                cat_cols.append((p, "covers", (float(batch), 0.0, False)))
        elif p.kind in (ParamKind.FLOAT, ParamKind.INT):
            assert p.low is not None and p.high is not None
            log = p.log and float(p.low) > 0
            num_cols.append((p, "num", _span(float(p.low), float(p.high), log)))
        else:
            cat_cols.append((p, "level", levels))
            axis = [s for s in (_size(p, v) for v in values) if s is not None]
            if len(axis) == len(values) and len(set(axis)) > 1:
                num_cols.append((p, "size", _span(min(axis), max(axis), min(axis) > 0)))
        blocks.append(
            Block(
                name=p.name,
                cat=tuple(range(c0, len(cat_cols))),
                num=tuple(range(n0, len(num_cols))),
                role=role_of(p),
            )  # fmt: skip
        )
    return tuple(blocks), (cat_cols, num_cols)


def _size(p: Param, value: Any) -> float | None:
    """A discrete value's place on its knob's axis (`Knob.size`: a KV dtype's bytes per element), or
    the number it is for a plain param; None: none (null, a name, a knob's "no limit")."""
    if p.knob is not None:
        size = knob_of(p.knob).size(value)
    else:
        size = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    return size if size is not None and math.isfinite(size) else None


def _number(p: Param, how: str, value: Any) -> float:
    """A numeric column's raw value: the largest captured batch, a knob's size, or the number."""
    if how == "graph_bs":
        return float(graph_bs(value) or 0)
    if how == "size":
        return _size(p, value) or 0.0
    return float(value)


def _span(low: float, high: float, log: bool) -> tuple[float, float, bool]:
    return (math.log(low), math.log(high), True) if log else (low, high, False)


def graph_bs(value: Any) -> int | None:
    """The largest batch a graph setting captures (None: off, or SGLang's own list)."""
    text = str(value)
    if text.startswith("max:"):
        return int(text[4:])
    if text.startswith("bs:"):
        return max(int(v) for v in text[3:].split(","))
    return None


def running_batch(space: SearchSpace) -> int | None:
    """The decode batch a closed-loop benchmark keeps running: its largest concurrency (None: an open
    loop only, whose batch the request rate sets)."""
    found = [lp.concurrency for lp in space.bench.load_points if lp.concurrency]
    return max(found) if found else None


def _coverage(params: Mapping[str, Any], value: Any, batch: float, caps: tuple[str, ...]) -> float:
    """The share of the running decode batch the captured graphs cover: SGLang replays a graph only
    for a batch no larger than the largest captured one and runs larger batches eagerly, so what
    counts is the largest captured batch against the batch that runs (the benchmark's concurrency,
    capped by max running requests). -1: SGLang's own default list (its size is the release's)."""
    bs = graph_bs(value)
    if str(value) == "off":
        return 0.0
    if not bs:
        return -1.0
    return min(1.0, bs / capped_batch(params, batch, caps))


def running_caps(space: SearchSpace | None) -> tuple[str, ...]:
    """The names of the space's knobs that bound the running batch (max running requests)."""
    return () if space is None else tuple(p.name for p in space.params if role_of(p) == "running")


def capped_batch(params: Mapping[str, Any], batch: float, caps: Sequence[str]) -> float:
    """The decode batch that runs: the clients' `batch`, capped by every running-request cap in `params`."""
    for cap in caps:
        limit = params.get(cap)
        if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
            batch = min(batch, float(limit))
    return batch


def _features(
    params: Mapping[str, Any], columns: tuple[list[_Column], list[_Column]], caps: tuple[str, ...]
) -> tuple[tuple[int, ...], tuple[float, ...]]:
    cat_cols, num_cols = columns
    cats: list[int] = []
    for p, how, table in cat_cols:
        if p.name not in params:
            cats.append(-1)
            continue
        v = params[p.name]
        if how == "covers":
            assert isinstance(table, tuple)
            share = _coverage(params, v, table[0], caps)
            cats.append(-1 if share < 0 else int(share >= 1.0))
            continue
        assert isinstance(table, dict)
        if how == "prefill" or how == "decode":
            cats.append(table[split_backend_pair(str(v))[0 if how == "prefill" else 1]])
        elif how == "graphs":
            cats.append(table[str(v) != "off"])
        else:
            cats.append(table.get(json.dumps(v, default=str), -1))
    nums: list[float] = []
    for p, how, span in num_cols:
        assert isinstance(span, tuple)
        if p.name not in params:
            nums.append(-1.0)
            continue
        v = params[p.name]
        if how == "graph_cover":
            nums.append(_coverage(params, v, span[0], caps))
            continue
        x = _number(p, how, v)
        low, high, log = span
        if how == "graph_bs" and x <= 0:
            nums.append(0.0)
            continue
        x = math.log(x) if log else x
        unit = 0.0 if high <= low else min(1.0, max(0.0, (x - low) / (high - low)))
        nums.append(0.25 + 0.75 * unit if how == "graph_bs" else unit)  # graphs on sit apart from off
    return tuple(cats), tuple(nums)
