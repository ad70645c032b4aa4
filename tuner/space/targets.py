"""A param checked against what it sets: a knob object's choices or range ends against the release
(tuner.knobs), a plain flag's option (type, choices, switch or value)."""

from __future__ import annotations

from tuner.knobs.registry import knob_of, knob_owning
from tuner.sglang.knobs import (
    FlagContext,
    check_scalar,
    find_flag,
    is_switch,
    knob_options,
    owner_of,
    takes_list,
    unknown_flag_message,
)
from tuner.space.params import Param, ParamKind, Target, show_choice
from tuner.space.source import Section


def check_target(sec: Section, param: Param, ctx: FlagContext) -> None:
    """Raise the one-line ConfigError (file:line) when `param` cannot set what it targets."""
    if param.knob is not None:
        _check_knob(sec, param, ctx)
    elif param.target is Target.FLAG:
        _check_flag_param(sec, param, ctx)


def _check_knob(sec: Section, param: Param, ctx: FlagContext) -> None:
    """Each choice, or both ends of a range, as the knob judges it for the release."""
    knob, options = knob_of(param.knob or ""), knob_options(ctx)
    if param.kind in (ParamKind.FLOAT, ParamKind.INT):
        for key, end in (("low", param.low), ("high", param.high)):
            problem = knob.check(end, options)
            if problem:
                raise sec.error(key, f"{problem} (got {show_choice(end)})")
        return
    if param.kind is ParamKind.BOOL:
        kinds = [k for k, probe in (("float", 0.5), ("int", 2)) if knob.check(probe, options) is None]
        use = " or ".join([*kinds, "categorical"])
        raise sec.error("kind", f"{knob.name} takes values, so it cannot be kind bool: use kind {use}")
    for node, choice in zip(sec.seq("choices"), param.choices, strict=True):
        problem = knob.check(choice, options)
        if problem:
            raise sec.src.error(node, f"{param.name}.choices", f"{problem} (got {show_choice(choice)})"
                                if knob.flag is not None else problem)  # fmt: skip


def _check_flag_param(sec: Section, param: Param, ctx: FlagContext) -> None:
    key = "flag" if "flag" in sec else "name"
    flag = param.flag or ""
    spec = find_flag(ctx, flag)
    if spec is None:
        raise sec.error(key, unknown_flag_message(ctx, flag))
    if owner_of(spec) == "launcher":
        raise sec.error(key, f"--{flag} is set by the tuner for every trial (use the top-level host: key)")
    knob = knob_owning(spec.dest)
    if knob is not None:
        raise sec.error(
            key,
            f"--{flag} is set through the {knob.kind} knob; use a param of kind {knob.kind}"
            if knob.flag is None
            else f"--{flag} is the {knob.name} knob: write its flag as {knob.flag}",
        )
    if takes_list(spec):
        raise sec.error(key, f"--{flag} takes a list; only the cuda_graph kind searches lists")
    if param.kind is ParamKind.BOOL:
        if not is_switch(spec):
            raise sec.error(
                "kind", f"--{flag} takes a value of type {spec.value_type}, so it cannot be kind bool"
            )
        return
    if is_switch(spec):
        raise sec.error("kind", f"--{flag} is a switch; use kind bool")
    if param.kind in (ParamKind.FLOAT, ParamKind.INT):
        if spec.choices:
            raise sec.error(
                "kind", f"--{flag} has fixed choices ({', '.join(spec.choices)}); use kind categorical"
            )
        if spec.value_type == "str" or (param.kind is ParamKind.FLOAT and spec.value_type == "int"):
            raise sec.error(
                "kind", f"--{flag} takes a value of type {spec.value_type}, not kind {param.kind.value}"
            )
        return
    for node, choice in zip(sec.seq("choices"), param.choices, strict=True):
        if choice is None:
            continue  # null = leave SGLang's default
        problem = check_scalar(spec, choice)
        if problem:
            raise sec.src.error(
                node, f"{param.name}.choices", f"--{flag}: {problem} (got {show_choice(choice)})"
            )
