"""Reading the searched part of a space file: params, conditions, forbidden combinations, baselines."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Any

from yaml.nodes import MappingNode, Node, ScalarNode

from tuner.knobs.registry import knob_flagged, knob_kinds, knob_of, knob_owning
from tuner.secrets import is_secret_flag, is_secret_name, redact_shapes
from tuner.sglang.knobs import (
    FlagContext,
    find_flag,
)
from tuner.space.params import (
    PARAM_NAME,
    RESERVED_NAMES,
    Condition,
    Param,
    ParamKind,
    Target,
    condition_holds,
    encode_value,
    same_value,
    show_choice,
)
from tuner.space.source import Section, Source, python_value, show
from tuner.space.targets import check_target

_KIND_KEYS = {
    ParamKind.FLOAT: ("name", "kind", "flag", "low", "high", "step", "log", "when"),
    ParamKind.INT: ("name", "kind", "flag", "low", "high", "step", "log", "when"),
    ParamKind.CATEGORICAL: ("name", "kind", "flag", "choices", "when"),
    ParamKind.BOOL: ("name", "kind", "flag", "when"),
    ParamKind.BACKEND_PAIR: ("name", "kind", "choices", "when"),
    ParamKind.CUDA_GRAPH: ("name", "kind", "choices", "when"),
}
# A knob object's shape -> the param kind that samples it (tuner.knobs.protocol).
_SHAPES = {"pair": ParamKind.BACKEND_PAIR, "graphs": ParamKind.CUDA_GRAPH}  # "written": the kind written
_KNOB_KEYS = ("name", "kind", "choices", "when")


@dataclass(frozen=True, kw_only=True, slots=True)
class Forbidden:
    """A combination never to launch: every listed param holds one of its listed values."""

    matches: tuple[Condition, ...]
    reason: str
    source: str = ""


MAX_PARAMS = 256  # searched knobs of one space: SGLang has ~300 flags in all
MAX_CHOICES = 1_024  # choices of one param: more is a range, and the search could not cover them


def parse_params(src: Source, nodes: list[Node], ctx: FlagContext) -> tuple[Param, ...]:
    """Every `params:` entry, in order, with conditions checked against the params before it."""
    params: list[Param] = []
    targets: dict[str, str] = {}  # target key -> param name
    if len(nodes) > MAX_PARAMS:
        raise src.error(
            nodes[MAX_PARAMS], "params", f"more than {MAX_PARAMS} searched params (got {len(nodes):,})"
        )
    for index, node in enumerate(nodes):
        where = f"params[{index}]"
        kind_sec = Section(src, node, where, None)
        kinds = dict.fromkeys([*(k.value for k in ParamKind), *knob_kinds()])
        kind_text = kind_sec.get_choice("kind", list(kinds))
        knob = knob_of(kind_text) if kind_text in knob_kinds() else None
        kind = _SHAPES[knob.shape] if knob is not None else ParamKind(kind_text)
        sec = Section(src, node, where, _KNOB_KEYS if knob is not None else _KIND_KEYS[kind])
        param = _parse_param(sec, kind, params, ctx, knob=kind_text if knob is not None else None)
        if any(p.name == param.name for p in params):
            first = next(p for p in params if p.name == param.name)
            raise sec.error("name", f"duplicate param name {param.name!r} (first defined at {first.source})")
        target_key = param.flag
        if param.knob is not None:
            target_key = param.knob
            clash = next((targets[d] for d in sorted(knob_of(param.knob).owned) if d in targets), None)
            if clash is not None:
                raise sec.error("kind", f"{param.name} sets the same SGLang setting as param {clash!r}")
        if param.target is Target.FLAG:
            spec = find_flag(ctx, param.flag or "")
            target_key = spec.dest if spec else target_key
        if target_key in targets:
            raise sec.error(
                "name", f"{param.name} sets the same SGLang setting as param {targets[target_key]!r}"
            )
        targets[target_key or ""] = param.name
        for dest in knob_of(param.knob).owned if param.knob is not None else ():
            targets[dest] = param.name
        params.append(param)
    return tuple(params)


def _parse_param(
    sec: Section, kind: ParamKind, earlier: list[Param], ctx: FlagContext, *, knob: str | None = None
) -> Param:
    flag = sec.get_str("flag", None, pattern=r"[a-z0-9][a-z0-9-]*", what="a flag name without dashes")
    default = knob_of(knob).name if knob is not None else flag
    name = sec.get_str("name", default, pattern=PARAM_NAME, what="a param name")
    if name is None:
        raise sec.error("name", "required key is missing (or give flag:)")
    if name in RESERVED_NAMES:
        raise sec.error("name", f"{name!r} is reserved; choose another param name")
    sec.where = name  # messages now read "<param name>: ..."
    if is_secret_name(name) or (flag is not None and is_secret_flag(flag)):
        raise sec.error(
            "name",
            f"{flag or name} takes a credential, which is never searched (it would be stored and shown "
            "with every trial); set it in fixed: or env: from ${VAR}",
        )
    target = Target.FLAG if knob is None else Target.KNOB
    if target is Target.FLAG:
        flag = flag or name
        flagged = knob_flagged(flag)
        if flagged is not None:  # a knob a plain param selects by its flag, read as the kind written
            knob, target = flagged.kind, Target.KNOB
        elif kind is ParamKind.CATEGORICAL and (pair := _pair_of_one(flag)) is not None:
            # `--attention-backend X` runs both phases on X: the pair knob's one-name choice.
            knob, target, kind, flag = pair, Target.KNOB, ParamKind.BACKEND_PAIR, None
    source = sec.src.where(sec.node)
    when = _parse_when(sec, earlier)
    if kind in (ParamKind.FLOAT, ParamKind.INT):
        low, high, step, log = _parse_range(sec, kind)
        param = Param(
            name=name,
            kind=kind,
            target=target,
            flag=flag,
            low=low,
            high=high,
            step=step,
            log=log,
            when=when,
            source=source,
            knob=knob,
        )
    elif kind is ParamKind.BOOL:
        param = Param(
            name=name, kind=kind, target=target, flag=flag, choices=(False, True), when=when, source=source,
            knob=knob,
        )  # fmt: skip
    else:
        param = Param(name=name, kind=kind, target=target, flag=flag, when=when, source=source, knob=knob)
        param = _with_choices(sec, param)
    check_target(sec, param, ctx)
    return param


def _pair_of_one(flag: str) -> str | None:
    """The kind of the pair knob whose one flag for both members is `flag`, if any."""
    dest = flag.replace("-", "_")
    knob = knob_owning(dest)
    if knob is None or knob.shape != "pair" or knob.dests.get("both") != (dest,):
        return None
    return knob.kind


def _parse_range(sec: Section, kind: ParamKind) -> tuple[Any, Any, Any, bool]:
    getter = sec.get_int if kind is ParamKind.INT else sec.get_float
    low, high = getter("low"), getter("high")
    step = getter("step", None)
    log = sec.get_bool("log", False)
    if low > high:
        raise sec.error("high", f"high must be ≥ low {low:g} (got {high:g})")
    if low == high:
        raise sec.error("high", f"empty range: low and high are both {low:g}; use a fixed flag instead")
    if step is not None:
        if step <= 0:
            raise sec.error("step", f"step must be > 0 (got {step:g})")
        if log:
            raise sec.error("step", "step cannot be combined with log: true")
        k = (high - low) / step
        if abs(k - round(k)) > 1e-6:
            raise sec.error("step", f"step {step:g} does not divide the range [{low:g}, {high:g}]")
    if log and low <= 0:
        raise sec.error("low", f"log: true needs low > 0 (got {low:g})")
    return low, high, step, log


def _with_choices(sec: Section, param: Param) -> Param:
    nodes = sec.seq("choices")
    if not nodes:
        raise sec.error("choices", "expected a non-empty list of choices")
    if len(nodes) > MAX_CHOICES:
        raise sec.error(
            "choices", f"at most {MAX_CHOICES:,} choices (got {len(nodes):,}): search a range instead"
        )
    choices: list[Any] = []
    for node in nodes:
        raw = python_value(node)
        try:
            value = encode_value(param, raw)
        except ValueError as exc:
            raise sec.src.error(node, f"{param.name}.choices", f"expected {exc} (got {show(raw)})") from None
        if isinstance(value, str) and redact_shapes(value) != value:
            raise sec.src.error(
                node,
                f"{param.name}.choices",
                "a choice shaped like a credential (a token, a key) is never searched",
            )
        if any(same_value(value, c) for c in choices):
            raise sec.src.error(node, f"{param.name}.choices", f"duplicate choice {show_choice(value)}")
        choices.append(value)
    return Param(**{**_fields(param), "choices": tuple(choices)})


def _fields(param: Param) -> dict[str, Any]:
    return {f.name: getattr(param, f.name) for f in fields(param)}


def _parse_when(sec: Section, earlier: list[Param]) -> tuple[Condition, ...]:
    cond_sec = sec.section("when", None)
    if cond_sec is None:
        return ()
    return _conditions(cond_sec, earlier, what="condition")


def _conditions(sec: Section, params: list[Param], *, what: str) -> tuple[Condition, ...]:
    out: list[Condition] = []
    by_name = {p.name: p for p in params}
    for key in sec.names():
        ref = by_name.get(key)
        if ref is None:
            known = ", ".join(by_name) or "none"
            later = " (params may only depend on params defined before them)" if what == "condition" else ""
            raise sec.error(key, f"{what} on unknown param {key!r}{later}; known: {known}", at_key=True)
        if ref.kind is ParamKind.FLOAT:
            raise sec.error(key, f"{what} on float param {key!r}; only discrete params can be matched")
        node = sec.value_node(key)
        raw_nodes = node.value if not isinstance(node, (ScalarNode, MappingNode)) else [node]
        values: list[Any] = []
        for item in raw_nodes:
            raw = python_value(item)
            try:
                value = encode_value(ref, raw)
            except ValueError as exc:
                raise sec.src.error(item, sec.path(key), f"expected {exc} (got {show(raw)})") from None
            if not ref.contains(value):
                raise sec.src.error(
                    item,
                    sec.path(key),
                    f"{show_choice(value)} is not a value of {key}; expected {ref.describe()}",
                )
            values.append(value)
        if not values:
            raise sec.error(key, "expected a value or a non-empty list of values")
        out.append(Condition(param=key, values=tuple(values)))
    if not out:
        raise sec.src.error(sec.node, sec.where, f"empty {what}")
    return tuple(out)


def parse_forbidden(src: Source, nodes: list[Node], params: tuple[Param, ...]) -> tuple[Forbidden, ...]:
    """The `forbidden:` list: mappings of param -> value(s), with an optional `reason:`."""
    out = []
    for index, node in enumerate(nodes):
        sec = Section(src, node, f"forbidden[{index}]", None)
        reason = sec.get_str("reason", None)
        if reason is not None:
            del sec.entries["reason"]
        matches = _conditions(sec, list(params), what="forbidden combination")
        if _covers_everything(matches, params):
            raise src.error(
                node,
                f"forbidden[{index}]",
                "forbids every configuration of the space (each listed param with all its choices); "
                "expected a narrower combination",
            )
        text = ", ".join(f"{c.param}={'|'.join(show_choice(v) for v in c.values)}" for c in matches)
        out.append(
            Forbidden(
                matches=matches, reason=reason or f"forbidden combination {text}", source=src.where(node)
            )
        )
    return tuple(out)


def _covers_everything(matches: tuple[Condition, ...], params: tuple[Param, ...]) -> bool:
    """Every listed param is always active and the rule lists all of its choices."""
    by_name = {p.name: p for p in params}
    for cond in matches:
        param = by_name.get(cond.param)
        if param is None or param.when or not param.choices:
            return False
        if not all(any(same_value(choice, v) for v in cond.values) for choice in param.choices):
            return False
    return bool(matches)


def forbidden_match(forbidden: tuple[Forbidden, ...], params: Mapping[str, Any]) -> Forbidden | None:
    for entry in forbidden:
        if all(
            c.param in params and any(same_value(params[c.param], v) for v in c.values) for c in entry.matches
        ):
            return entry
    return None


def parse_baselines(
    src: Source, nodes: list[Node], params: tuple[Param, ...], forbidden: tuple[Forbidden, ...]
) -> tuple[Mapping[str, object], ...]:
    """The `baselines:` list: full param mappings, encoded, to be tried first."""
    out: list[Mapping[str, object]] = []
    by_name = {p.name: p for p in params}
    for index, node in enumerate(nodes):
        where = f"baselines[{index}]"
        sec = Section(src, node, where, None)
        values: dict[str, Any] = {}
        for key in sec.names():
            param = by_name.get(key)
            if param is None:
                raise sec.error(key, f"unknown param {key!r}; known: {', '.join(by_name)}", at_key=True)
            raw = sec.raw(key)
            try:
                value = encode_value(param, raw)
            except ValueError as exc:
                raise sec.error(key, f"expected {exc} (got {show(raw)})") from None
            if not param.contains(value):
                raise sec.error(
                    key, f"{show_choice(value)} is outside the space; expected {param.describe()}"
                )
            values[key] = value
        ordered: dict[str, Any] = {}
        for param in params:
            active = condition_holds(param, ordered)
            if active and param.name not in values:
                raise src.error(node, f"{where}.{param.name}", "missing; a baseline gives every active param")
            if not active and param.name in values:
                raise sec.error(
                    param.name,
                    f"{param.name} is not used when its condition fails ({_show_when(param)}); remove it",
                )
            if active:
                ordered[param.name] = values[param.name]
        hit = forbidden_match(forbidden, ordered)
        if hit is not None:
            raise src.error(node, where, f"baseline is forbidden by {hit.source} ({hit.reason})")
        out.append(MappingProxyType(ordered))
    return tuple(out)


def _show_when(param: Param) -> str:
    return ", ".join(f"{c.param} in {'|'.join(show_choice(v) for v in c.values)}" for c in param.when)
