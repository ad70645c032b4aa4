"""A trial's knobs for people: short names where they are unambiguous, one short line per trial (pure)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from tuner.knobs.registry import knob_with_role

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
    """`mem=0.65 cuda=max:8 chunked=4096`: a trial's knobs in one short line."""
    short = short or _short_names(params)
    return " ".join(f"{short.get(k, k)}={_show_value(v)}" for k, v in params.items())


def param_legend(names: Iterable[str]) -> str:
    """`cuda = cuda_graph, ...` for the short names that differ from the param name."""
    short = _short_names(names)
    return ", ".join(f"{s} = {n}" for n, s in short.items() if s != n)
