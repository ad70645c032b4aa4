"""A trial's knobs for people: short names where they are unambiguous, one short line per trial (pure)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from tuner.knobs.registry import knob_with_role
from tuner.space.sampling import DECODE_KEY, PREFILL_KEY, decode_key

__all__ = ["compact_params", "fraction_param", "param_legend"]


def fraction_param(names: Iterable[str], space_text: str | None = None) -> str | None:
    """The param that searches the memory fraction, if any: the one whose flag (as the stored space
    file writes it, else its name) is the fraction knob's flag."""
    flag = knob_with_role("fraction").flag
    flags = _param_flags(space_text)
    return next((n for n in names if flags.get(n, n) == flag), None)


def _param_flags(space_text: str | None) -> dict[str, str]:
    """Param name -> its `flag:` in a stored space file (none where it is absent or unreadable)."""
    try:
        loaded = yaml.safe_load(space_text) if space_text else None
    except yaml.YAMLError:
        return {}
    params = loaded.get("params") if isinstance(loaded, Mapping) else None
    entries = params if isinstance(params, list) else []
    return {
        str(p["name"]): str(p["flag"])
        for p in entries
        if isinstance(p, Mapping) and "name" in p and "flag" in p
    }


def _short_names(names: Iterable[str]) -> dict[str, str]:
    """The first word of each param name where that is unambiguous, else the last part of a dotted
    name (`sparse_backends.prefill` -> `prefill`) where that is, else the whole name."""
    names = list(names)
    first = {n: n.replace("_", "-").split("-")[0] for n in names}
    last = {n: n.rsplit(".", 1)[-1] for n in names if "." in n}
    counts = Counter([*first.values(), *last.values()])
    out = {}
    for n in names:
        if counts[first[n]] == 1:
            out[n] = first[n]
        elif n in last and counts[last[n]] == 1:
            out[n] = last[n]
        else:
            out[n] = n
    return out


def _show_value(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        value = ",".join(str(v) for v in value)
    text = str(value)
    head, colon, items = text.rpartition(":") if ":" in text else ("", "", text)
    parts = items.split(",")
    if len(parts) > 4:  # a CUDA-graph batch list: first..last(count)
        return f"{head}{colon}{parts[0]}..{parts[-1]}({len(parts)})"
    return text


def compact_params(params: Mapping[str, Any], short: Mapping[str, str] | None = None) -> str:
    """`mem=0.65 cuda=max:8 attention=fa3/flashinfer`: a trial's knobs in one short line (a backend
    pair sampled per role shown as the one value the space wrote)."""
    joined = joined_pairs(params)
    short = short or _short_names(joined)
    return " ".join(f"{short.get(k, k)}={_show_value(v)}" for k, v in joined.items())


def param_legend(names: Iterable[str]) -> str:
    """`cuda = cuda_graph, ...` for the short names that differ from the param name."""
    short = _short_names(pair_names(names))
    return ", ".join(f"{s} = {n}" for n, s in short.items() if s != n)


def pair_names(names: Iterable[str]) -> list[str]:
    """Param names with a backend pair's per-role params (`N.prefill`, `N.decode...`) as the one `N`."""
    names = list(names)
    pairs = {n[: -len(PREFILL_KEY)] for n in names if n.endswith(PREFILL_KEY)}
    out: list[str] = []
    for n in names:
        pair = next((p for p in pairs if n == p + PREFILL_KEY or n.startswith(p + DECODE_KEY)), None)
        if pair is None or pair not in out:
            out.append(n if pair is None else pair)
    return out


def joined_pairs(params: Mapping[str, Any]) -> dict[str, Any]:
    """A trial's params with each backend pair sampled per role joined: "fa3" for one backend in both
    roles, else "prefill/decode" (the decode param is `N.decode.<prefill>`, or `N.decode` as an
    earlier release sampled it)."""
    out: dict[str, Any] = {}
    for name in pair_names(params):
        prefill = params.get(name + PREFILL_KEY)
        if name in params or prefill is None:
            out[name] = params.get(name)
            continue
        decode = params.get(decode_key(name, str(prefill)), params.get(name + DECODE_KEY))
        out[name] = prefill if decode is None or decode == prefill else f"{prefill}/{decode}"
    return out
