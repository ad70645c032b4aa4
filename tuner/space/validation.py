"""A space-file section validated by its settings model; every mistake is one ConfigError line.

The YAML nodes (with their line numbers) are turned into plain data, duplicate keys refused on
the way; the model validates the data; the first mistake in the file becomes
"<key path>: <what was expected> (got <value>) in <file>:<line>", its line found by following
the error's location back through the nodes.
"""

from __future__ import annotations

import typing
from collections.abc import Collection, Iterator
from enum import Enum
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from tuner.errors import ConfigError
from tuner.settings import MISTAKE, Settings, file_key
from tuner.space.source import Section, Source, python_value, show

M = TypeVar("M", bound=BaseModel)
Loc = tuple[str | int, ...]

_EXPECTED = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "finite_number": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "string_type": "a non-empty string",
    "string_too_short": "a non-empty string",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "dict_type": "a mapping",
    "tuple_type": "a list",
    "list_type": "a list",
    "path_type": "a path",
}
_BOUNDS = {"greater_than_equal": "≥", "greater_than": ">", "less_than_equal": "≤", "less_than": "<"}
_BOUND_CTX = {"greater_than_equal": "ge", "greater_than": "gt", "less_than_equal": "le", "less_than": "lt"}


def read_settings(model: type[M], sec: Section, *, skip: Collection[str] = ()) -> M:
    """`sec` validated by `model` (keys in `skip` are left to other readers); ConfigError on a mistake."""
    keys = [key for key in sec.names() if key not in skip]
    data = {key: to_data(sec.src, sec.value_node(key), sec.path(key)) for key in keys}
    try:
        return model.model_validate(
            data, context={"space_dir": sec.src.path.parent}, by_alias=True, by_name=False
        )
    except ValidationError as exc:
        raise first_mistake(exc, model, sec) from None


def to_data(src: Source, node: Node, where: str) -> Any:
    """The plain value of a node; mappings are checked for string keys and duplicates (merge keys applied)."""
    if isinstance(node, MappingNode):
        sec = Section(src, node, where, None)
        return {key: to_data(src, sec.value_node(key), sec.path(key)) for key in sec.names()}
    if isinstance(node, SequenceNode):
        return [to_data(src, item, f"{where}[{index}]") for index, item in enumerate(node.value)]
    return python_value(node)


def first_mistake(exc: ValidationError, model: type[BaseModel], sec: Section) -> ConfigError:
    """The mistake that comes first in the file, as one ConfigError line."""
    found = []
    for error in exc.errors():
        loc: Loc = (*error["loc"], *_at(error))
        node = _node_at(sec.node, loc, key=error["type"] == "extra_forbidden")
        found.append((node.start_mark.line, node.start_mark.column, loc, node, error))
    _, _, loc, node, error = min(found, key=lambda item: (item[0], item[1]))
    return sec.src.error(node, _path(sec.where, loc), _message(error, model, loc))


def _at(error: ErrorDetails) -> Loc:
    ctx = error.get("ctx") or {}
    return tuple(ctx.get("at", ())) if error["type"] == MISTAKE else ()


def _node_at(node: Node, loc: Loc, *, key: bool) -> Node:
    """The node `loc` names (its key for an unknown key), or the deepest one on its way."""
    key_node: Node | None = None
    for part in loc:
        if isinstance(node, MappingNode) and isinstance(part, str):
            entry = next(
                ((k, v) for k, v in node.value if isinstance(k, ScalarNode) and k.value == part), None
            )
            if entry is None:
                return node
            key_node, node = entry
        elif isinstance(node, SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            key_node, node = None, node.value[part]
        else:
            return node
    return key_node if key and key_node is not None else node


def _path(where: str, loc: Loc) -> str:
    out = where
    for part in loc:
        out = f"{out}[{part}]" if isinstance(part, int) else f"{out}.{part}" if out else part
    return out


def _message(error: ErrorDetails, model: type[BaseModel], loc: Loc) -> str:
    kind, ctx, got = error["type"], error.get("ctx") or {}, show(error.get("input"))
    if kind == MISTAKE:
        return str(ctx["message"])
    if kind == "missing":
        return "required key is missing"
    parent = _model_at(model, loc[:-1])
    if kind == "extra_forbidden":
        allowed = parent.file_keys() if parent is not None and issubclass(parent, Settings) else []
        return f"unknown key; allowed: {', '.join(allowed)}"
    field = _field(parent, loc[-1]) if parent is not None and loc else None
    if kind in ("literal_error", "enum"):
        choices = list(_choices(field.annotation)) if field is not None else []
        expected = ", ".join(choices) if choices else str(ctx.get("expected"))
        return f"expected one of {expected} (got {got})"
    if kind in _BOUNDS:
        return f"must be {_BOUNDS[kind]} {_number(ctx[_BOUND_CTX[kind]])} (got {_number(error.get('input'))})"
    override = _expected_of(field)
    if override is not None:
        return f"expected {override} (got {got})"
    if kind == "string_pattern_mismatch":
        return f"expected a string matching {ctx.get('pattern')} (got {got})"
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]} (got {got})"
    return f"{error['msg']} (got {got})"


def _number(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else show(value)


def _expected_of(field: FieldInfo | None) -> str | None:
    extra = field.json_schema_extra if field is not None else None
    return str(extra["expected"]) if isinstance(extra, dict) and "expected" in extra else None


def _field(model: type[BaseModel], key: str | int) -> FieldInfo | None:
    for name, field in model.model_fields.items():
        if key in (name, file_key(name, field.validation_alias)):
            return field
    return None


def _model_at(model: type[BaseModel], loc: Loc) -> type[BaseModel] | None:
    """The model that validates the value at `loc` (list indices skipped), if it is a model."""
    current: type[BaseModel] | None = model
    for part in loc:
        if isinstance(part, int):
            continue
        field = _field(current, part) if current is not None else None
        if field is None:
            return None
        current = next(_models_in(field.annotation), None)
    return current


def _models_in(annotation: object) -> Iterator[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for arg in typing.get_args(annotation):
        yield from _models_in(arg)


def _choices(annotation: object) -> Iterator[str]:
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        yield from (str(member.value) for member in annotation)
    elif typing.get_origin(annotation) is typing.Literal:
        yield from (str(arg) for arg in typing.get_args(annotation))
    else:
        for arg in typing.get_args(annotation):
            yield from _choices(arg)
