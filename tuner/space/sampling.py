"""Using a SearchSpace: Optuna suggestions, params dicts to TrialConfigs, --set overrides, enumeration.

suggest(space, trial)            -> (TrialConfig, params)   define-by-run, conditions honoured
config_from_params(space, p)     -> TrialConfig             baselines, --set, retries, export
parse_set_overrides(space, kvs)  -> params                  "name=value" strings from the command line
enumerate_choices(space)         -> params dicts covering every choice and both ends of each range
forbidden_reason(space, params)  -> why a combination must not be launched, or None
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from tuner.config import TrialConfig
from tuner.errors import ConfigError
from tuner.knobs.registry import knob_of
from tuner.settings import show
from tuner.space.build import Forbidden, forbidden_match
from tuner.space.params import (
    Param,
    ParamKind,
    clean_float,
    condition_holds,
    encode_value,
    parse_text,
    show_choice,
    split_backend_pair,
)

if TYPE_CHECKING:
    import optuna


class SearchSpace(Protocol):
    """What sampling reads of a space (tuner.space.loader.SearchSpace is one; the loader imports
    this module, so it is named by its shape, not imported)."""

    @property
    def params(self) -> tuple[Param, ...]: ...
    @property
    def forbidden(self) -> tuple[Forbidden, ...]: ...
    @property
    def baselines(self) -> tuple[Mapping[str, object], ...]: ...
    @property
    def study_name(self) -> str: ...


def suggest(
    space: SearchSpace, trial: optuna.trial.BaseTrial, *, fixed: Mapping[str, object] | None = None
) -> tuple[TrialConfig, dict[str, object]]:
    """Ask `trial` for every active param (define-by-run) and build the TrialConfig.

    `fixed`: the params the trial was enqueued with, if any (a backend pair enqueued per role by an
    earlier release is asked per role again, so that the trial is the one enqueued).
    """
    values: dict[str, Any] = {}
    for p in space.params:
        if not condition_holds(p, values):
            continue
        if p.kind in (ParamKind.FLOAT, ParamKind.INT):
            assert p.low is not None and p.high is not None
            if p.kind is ParamKind.FLOAT:
                values[p.name] = trial.suggest_float(p.name, p.low, p.high, step=p.step, log=p.log)
            else:
                step = int(p.step or 1)
                values[p.name] = trial.suggest_int(p.name, int(p.low), int(p.high), step=step, log=p.log)
        elif p.kind is ParamKind.BACKEND_PAIR:
            prefills, decodes = role_choices(p.choices)
            prefill = trial.suggest_categorical(p.name + PREFILL_KEY, prefills)
            if p.name + DECODE_KEY in (fixed or {}):  # enqueued per role by an earlier release
                decode = trial.suggest_categorical(p.name + DECODE_KEY, decodes)
            else:
                paired = decodes_of(p.choices, prefill)
                decode = trial.suggest_categorical(decode_key(p.name, prefill), paired)
            values[p.name] = f"{prefill}/{decode}"
        else:
            values[p.name] = trial.suggest_categorical(p.name, p.choices)
    return _build(space, values), values


# A backend pair is sampled as the prefill backend (one categorical over the space's prefill backends,
# shared by every pair, so what the sampler learns of a prefill backend carries over), then the decode
# backend among those the space pairs with that prefill backend (one categorical per prefill backend,
# `name.decode.<prefill>`): every pair asked is one the space allows. What a failure teaches about a
# backend reaches every pair using it through the failure rules. The previous release sampled the
# decode backend as one categorical over all of them (`name.decode`), so that some asks were pairs
# outside the choices; its studies still resume and warm-start: their params are joined back
# (`joined_params`), and a trial it enqueued per role is asked per role.
PREFILL_KEY, DECODE_KEY = ".prefill", ".decode"


def decode_key(name: str, prefill: str) -> str:
    """The param of the decode backend paired with this prefill backend."""
    return f"{name}{DECODE_KEY}.{prefill}"


def decodes_of(pairs: Iterable[Any], prefill: str) -> list[str]:
    """The decode backends the pair param's choices pair with `prefill`, in order."""
    return [d for p, d in (split_backend_pair(str(code)) for code in pairs) if p == prefill]


def role_choices(pairs: Iterable[Any]) -> tuple[list[str], list[str]]:
    """The prefill and the decode backends of a pair param's choices, in order of first use."""
    prefills: list[str] = []
    decodes: list[str] = []
    for code in pairs:
        prefill, decode = split_backend_pair(str(code))
        if prefill not in prefills:
            prefills.append(prefill)
        if decode not in decodes:
            decodes.append(decode)
    return prefills, decodes


def joined_params(space: SearchSpace, params: Mapping[str, object]) -> dict[str, object]:
    """Params as the space names them: a pair sampled per role (`name.prefill`, `name.decode`, by an
    earlier release or enqueued by one) joined."""
    out = dict(params)
    for p in space.params:
        if p.kind is not ParamKind.BACKEND_PAIR:
            continue
        prefill, decode = out.pop(p.name + PREFILL_KEY, None), out.pop(p.name + DECODE_KEY, None)
        for key in [k for k in out if k.startswith(p.name + DECODE_KEY + ".")]:
            value = out.pop(key)
            if key == decode_key(p.name, str(prefill)):
                decode = value
        if p.name not in out and prefill is not None and decode is not None:
            out[p.name] = f"{prefill}/{decode}"
    return out


def sampler_params(space: SearchSpace, params: Mapping[str, object]) -> dict[str, object]:
    """Params as the sampler names them (for enqueueing): each backend pair as its prefill backend and
    the decode backend of that prefill backend."""
    out = joined_params(space, params)
    for p in space.params:
        if p.kind is ParamKind.BACKEND_PAIR and isinstance(out.get(p.name), str):
            prefill, decode = split_backend_pair(str(out.pop(p.name)))
            out[p.name + PREFILL_KEY], out[decode_key(p.name, prefill)] = prefill, decode
    return out


def config_from_params(space: SearchSpace, params: Mapping[str, object]) -> TrialConfig:
    """The TrialConfig of a full params dict; ConfigError for unknown names, missing or bad values.

    Params whose condition does not hold are ignored (a `--set` may switch a parent off).
    """
    params = joined_params(space, params)
    known = {p.name for p in space.params}
    unknown = [k for k in params if k not in known]
    if unknown:
        raise ConfigError(f"unknown param {unknown[0]!r} for {space.study_name}; known: {', '.join(known)}")
    values: dict[str, Any] = {}
    for p in space.params:
        if not condition_holds(p, values):
            continue
        if p.name not in params:
            raise ConfigError(f"param {p.name!r} is missing; expected {p.describe()} ({p.source})")
        value = params[p.name]
        try:
            value = encode_value(p, value)
        except ValueError as exc:
            raise ConfigError(f"param {p.name}: expected {exc} (got {show(value)}) ({p.source})") from None
        if not p.contains(value):
            raise ConfigError(
                f"param {p.name}: {show_choice(value)} is outside the space; "
                f"expected {p.describe()} ({p.source})"
            )
        values[p.name] = value
    return _build(space, values)


def _build(space: SearchSpace, values: Mapping[str, Any]) -> TrialConfig:
    """The TrialConfig of the active params' values: each knob sets its own (fields or flags), every
    other param its flag (null: SGLang's default); flags in param order, as the launch keys have them."""
    config = TrialConfig()
    for p in space.params:
        if p.name not in values:
            continue
        value = values[p.name]
        if p.kind is ParamKind.FLOAT:
            value = clean_float(p, float(value))
        if p.knob is not None:
            config = knob_of(p.knob).apply(value, config)
        elif value is not None:
            config = replace(config, flags=(*config.flags, (p.flag or p.name, value)))
    return config


def forbidden_reason(space: SearchSpace, params: Mapping[str, object]) -> str | None:
    """Why this combination must not be launched (a `forbidden:` entry matches, or a backend pair
    that is not among its param's choices), or None."""
    params = joined_params(space, params)
    for p in space.params:
        if p.kind is ParamKind.BACKEND_PAIR and p.name in params and params[p.name] not in p.choices:
            return f"backend pair {params[p.name]} is not among the choices of {p.name} ({p.source})"
    hit = forbidden_match(space.forbidden, params)
    return None if hit is None else f"{hit.reason} ({hit.source})"


def parse_set_overrides(space: SearchSpace, items: Iterable[str]) -> dict[str, object]:
    """`["mem-fraction-static=0.9", "cuda_graph=off"]` -> encoded params; ConfigError on any bad item."""
    out: dict[str, object] = {}
    by_name = {p.name: p for p in space.params}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: expected NAME=VALUE")
        param = by_name.get(key)
        if param is None:
            raise ConfigError(f"--set {item!r}: unknown param {key!r}; known: {', '.join(by_name)}")
        if key in out:
            raise ConfigError(f"--set {item!r}: {key} is set twice")
        try:
            value = parse_text(param, text)
        except ValueError as exc:
            raise ConfigError(f"--set {item!r}: expected {exc} for {key}") from None
        if not param.contains(value):
            raise ConfigError(
                f"--set {item!r}: {show_choice(value)} is outside the space of {key}; "
                f"expected {param.describe()} ({param.source})"
            )
        out[key] = value
    return out


def enumerate_choices(space: SearchSpace) -> Iterator[dict[str, object]]:
    """Params dicts, baselines first, that together hold every choice and both ends of every range.

    Combinations a `forbidden:` entry matches are skipped or varied; duplicates are dropped.
    """
    seen: set[str] = set()

    def fresh(values: dict[str, object]) -> bool:
        key = json.dumps(values, sort_keys=True, default=str)
        if key in seen:
            return False
        seen.add(key)
        return True

    for baseline in space.baselines:
        values = dict(baseline)
        if fresh(values):
            yield values
    for p in space.params:
        for value in p.ends():
            found = _complete(space, {p.name: value})
            if found is not None and fresh(found):
                yield found


def _complete(space: SearchSpace, pinned: dict[str, Any]) -> dict[str, object] | None:
    """A full params dict holding `pinned` (and what its conditions need), avoiding forbidden combos."""
    wanted = dict(pinned)
    by_name = {p.name: p for p in space.params}
    stack = [by_name[n] for n in pinned]
    while stack:  # make the conditions of pinned params (and theirs) hold
        p = stack.pop()
        for cond in p.when:
            if cond.param not in wanted:
                wanted[cond.param] = cond.values[0]
                stack.append(by_name[cond.param])
    base = _fill(space, wanted, {})
    if base is None or forbidden_match(space.forbidden, base) is None:
        return base
    for p in space.params:  # vary one free param at a time until nothing forbidden matches
        if p.name in wanted:
            continue
        for alt in p.ends()[1:]:
            candidate = _fill(space, wanted, {p.name: alt})
            if candidate is not None and forbidden_match(space.forbidden, candidate) is None:
                return candidate
    return None


def _fill(
    space: SearchSpace, wanted: Mapping[str, Any], extra: Mapping[str, Any]
) -> dict[str, object] | None:
    values: dict[str, object] = {}
    for p in space.params:
        if not condition_holds(p, values):
            if p.name in wanted:
                return None
            continue
        values[p.name] = wanted.get(p.name, extra.get(p.name, p.ends()[0]))
    return values
