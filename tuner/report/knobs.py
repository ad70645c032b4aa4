"""A trial's knobs for people: short names where they are unambiguous, one short line per trial (pure)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["compact_params", "param_legend"]


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
    """`mem = mem-fraction-static, ...` for the short names that differ from the param name."""
    short = _short_names(names)
    return ", ".join(f"{s} = {n}" for n, s in short.items() if s != n)
