"""Configurations a launch has already measured: knobs that could not have mattered to its benchmark.

A closed loop of C clients never has more than C requests in flight. A launch whose scheduler ran
all C at once (its batch log lines), retracted none, and never filled more than USAGE_BOUND of its
KV pool was bound by neither its running-request cap nor its KV pool. The same configuration with

- any running-request cap that still admits C requests,
- any memory fraction whose KV pool (the memory model's prediction) holds the same peak within the
  same bound,
- CUDA graphs captured up to C or beyond, where its own were,

runs the same schedule, so the same throughput up to the benchmark's noise: a twin, measured in all
but name. What differs between twins -- their memory, free VRAM and chance to start -- is modelled
apart (tuner.search.feasible, tuner.search.plane). Pure functions over the candidates' params.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from tuner.search.candidates import graph_bs

USAGE_BOUND = 0.9  # a KV pool filled past this share may have held requests back (admission reserves ahead)
# A launch whose own running-request cap (below the clients) held its batch, and nothing else: the same
# cap with other fractions and graph sizes that still hold that batch runs the same schedule too.
CAPPED = False
FLEXIBLE = frozenset({"running", "fraction", "graphs"})


@dataclass(frozen=True, kw_only=True, slots=True)
class Loaded:
    """A measured launch and what its scheduler did under the benchmark."""

    index: int  # its candidate row
    peak_running: int | None
    peak_kv_usage: float | None  # the largest share of its KV pool in use at once
    retractions: int | None
    kv_pool: int | None  # its KV pool in tokens, as the server reported it


def unbound(launch: Loaded, clients: int) -> bool:
    """Whether neither the running-request cap nor the KV pool held the launch's batch back
    (`clients`: the batch the launch could run: the benchmark's clients, or its own cap below them)."""
    return (
        launch.peak_running is not None
        and launch.peak_running >= clients
        and launch.retractions == 0
        and launch.peak_kv_usage is not None
        and launch.peak_kv_usage <= USAGE_BOUND
        and bool(launch.kv_pool)
    )


def twins_of(
    params: Sequence[Mapping[str, object]],
    roles: Mapping[str, str],
    clients: int,
    launches: Sequence[Loaded],
    kv_pool: Sequence[float | None],
) -> NDArray[np.int64]:
    """Per candidate, the row of a launch whose measurement it shares (-1: none). `roles`: each
    param's physical role; `kv_pool`: each candidate's KV pool in tokens as the memory model
    predicts it (None: not known)."""
    out = np.full(len(params), -1, dtype=np.int64)
    batch = {launch.index: _batch(params[launch.index], roles, clients) for launch in launches}
    sources = [launch for launch in launches if batch[launch.index] and unbound(launch, batch[launch.index])]
    if not sources:
        return out
    fixed = [name for name in roles if roles[name] not in FLEXIBLE]
    groups: dict[tuple[str, ...], list[int]] = {}
    for i, p in enumerate(params):
        groups.setdefault(_key(p, fixed), []).append(i)
    for launch in sources:
        own = params[launch.index]
        need = float(launch.peak_kv_usage or 0.0) * float(launch.kv_pool or 0) / USAGE_BOUND
        for i in groups.get(_key(own, fixed), []):
            if out[i] >= 0 or i == launch.index:
                continue
            ran = batch[launch.index]
            if all(
                _same_run(name, roles[name], own, params[i], clients, ran, need, kv_pool[i]) for name in roles
            ):
                out[i] = launch.index
    return out


def _batch(p: Mapping[str, object], roles: Mapping[str, str], clients: int) -> int:
    """The batch a launch's limits let run: the clients, or (CAPPED) its own running cap below them;
    0 where its cap is below the clients and CAPPED is off."""
    out = clients
    for name, role in roles.items():
        cap = p.get(name)
        if role == "running" and isinstance(cap, int) and not isinstance(cap, bool) and 0 < cap < out:
            out = cap if CAPPED else 0
    return out


def _key(p: Mapping[str, object], names: Sequence[str]) -> tuple[str, ...]:
    return tuple(str(p.get(name)) for name in names)


def _same_run(
    name: str,
    role: str,
    own: Mapping[str, object],
    other: Mapping[str, object],
    clients: int,
    ran: int,
    need: float,
    pool: float | None,
) -> bool:
    """Whether `other` runs `own`'s schedule as far as knob `name` goes (`ran`: the batch `own` ran)."""
    a, b = own.get(name), other.get(name)
    if role not in FLEXIBLE or a == b:
        return a == b
    if role == "running":  # two caps admit the same batch only when both admit every client
        return _admits(a, clients) and _admits(b, clients)
    if role == "fraction":
        return pool is not None and pool >= need
    # graphs: both replay the whole running batch
    return (graph_bs(a) or 0) >= ran and (graph_bs(b) or 0) >= ran


def _admits(cap: object, clients: int) -> bool:
    if cap is None:
        return False  # SGLang's own cap, sized from the KV pool: not known here
    return isinstance(cap, int) and not isinstance(cap, bool) and cap >= clients
