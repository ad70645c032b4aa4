"""Every knob module of this package, found by its `KNOB` (so adding a knob is adding its module)."""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

import tuner.knobs
from tuner.knobs.protocol import Knob

_NOT_KNOBS = frozenset({"protocol", "registry"})


@cache
def knobs() -> tuple[Knob, ...]:
    """The knobs, in module-name order; a module whose KNOB breaks the protocol fails loudly here."""
    found: list[Knob] = []
    for info in sorted(pkgutil.iter_modules(tuner.knobs.__path__), key=lambda m: m.name):
        if info.name in _NOT_KNOBS or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"tuner.knobs.{info.name}")
        knob = getattr(module, "KNOB", None)
        if not isinstance(knob, Knob):
            raise TypeError(f"tuner.knobs.{info.name}: KNOB must implement tuner.knobs.protocol.Knob")
        found.append(knob)
    kinds = [k.kind for k in found]
    if len(set(kinds)) != len(kinds):
        raise TypeError(f"two knobs share a kind: {sorted(kinds)}")
    return tuple(found)


def knob_kinds() -> tuple[str, ...]:
    """The `kind:` values of the knobs a space selects by kind."""
    return tuple(k.kind for k in knobs() if k.flag is None)


@cache
def knob_flagged(flag: str) -> Knob | None:
    """The knob a plain param of flag `flag` selects (the knob of a flag in TrialConfig.flags), if any."""
    return next((k for k in knobs() if k.flag is not None and k.flag == flag), None)


def knob_of(kind: str) -> Knob:
    """The knob of a param kind; KeyError for none."""
    for knob in knobs():
        if knob.kind == kind:
            return knob
    raise KeyError(kind)


def knob_owning(dest: str) -> Knob | None:
    """The knob that sets option dest `dest`, if any."""
    return next((k for k in knobs() if dest in k.owned), None)


def knob_with_role(role: str) -> Knob:
    """The one knob of a physical role (the memory fraction, the CUDA graphs); KeyError for none or two."""
    found = [k for k in knobs() if k.role == role]
    if len(found) != 1:
        raise KeyError(f"{len(found)} knobs of role {role!r}")
    return found[0]


def knob_role(kind: str | None) -> str:
    """The physical role of the knob of a param's kind ("other" for a plain flag param: None)."""
    return "other" if kind is None else knob_of(kind).role
