"""Line-aware reading of space files: YAML nodes with their marks, sections and typed getters.

Every getter raises ConfigError with "<key path>: <what was expected> (got <value>) in <file>:<line>".
Duplicate keys and unknown keys are errors (PyYAML silently keeps the last of two equal keys).
The run settings are validated by their models (tuner.space.validation); the searched part
(params, forbidden, baselines) and the fixed launch are read with `Section`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from tuner.errors import ConfigError
from tuner.private import read_regular
from tuner.settings import parse_duration, show

__all__ = ["Section", "Source", "parse_duration", "python_value", "read_source", "show"]

MISSING: Any = object()


def python_value(node: Node) -> Any:
    """The plain Python value of a node, as yaml.safe_load would build it."""
    constructor = yaml.constructor.SafeConstructor()
    return constructor.construct_object(node, deep=True)


class Source:
    """One space file: its name for messages and its root node."""

    def __init__(self, path: Path, display: str, root: MappingNode) -> None:
        self.path = path
        self.display = display
        self.root = root

    def where(self, node: Node) -> str:
        return f"{self.display}:{node.start_mark.line + 1}"

    def error(self, node: Node, key: str, message: str) -> ConfigError:
        prefix = f"{key}: " if key else ""
        return ConfigError(f"{prefix}{message} in {self.where(node)}")


MAX_BYTES = 1 << 20  # a space file is a page of settings; more is a mistake (or /dev/zero)
MAX_DEPTH = 64  # nesting of mappings and lists; a real space needs about 6
MAX_VALUES = 100_000  # values once aliases are expanded; a real space has a few hundred (alias bombs)
INT_LIMIT = 2**63  # integers the store and SGLang can hold: |n| < 2**63
# Tags a space file may carry: YAML's own plain types. Anything else (!!python/object/apply, custom
# tags) is refused before any value is built.
SAFE_TAGS = frozenset(
    f"tag:yaml.org,2002:{name}"
    for name in ("str", "int", "float", "bool", "null", "map", "seq", "timestamp", "binary", "merge", "value")
)


def read_text(path: Path, display: str) -> str:
    """The file's text: a regular file of at most MAX_BYTES of UTF-8, else ConfigError."""
    try:
        data = read_regular(path, MAX_BYTES)  # a FIFO or a device is refused, not waited on
    except OSError as exc:
        if exc.errno == 27:
            raise ConfigError(f"space file is larger than {MAX_BYTES // 1024} KiB in {display}") from None
        raise ConfigError(f"cannot read space file {display}: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"space file is not UTF-8 text (byte 0x{data[exc.start]:02x}) in {display}:{line}"
        ) from None


def read_source(path: str | Path) -> Source:
    """Compose the YAML of `path` into nodes, keeping marks; the root must be a mapping."""
    path = Path(path)
    display = str(path)
    text = read_text(path, display)
    if "\x00" in text:
        nul_line = text[: text.index("\x00")].count("\n") + 1
        raise ConfigError(f"space file holds a NUL byte (a binary file?) in {display}:{nul_line}")
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"not valid YAML ({problem}) in {display}{line}") from exc
    except RecursionError:
        too_deep = f"nested too deeply (more than {MAX_DEPTH} levels)"
        raise ConfigError(f"space file is {too_deep} in {display}") from None
    if root is not None:
        _check_nodes(root, display)
        _check_expanded_size(root, display)
    if root is None:
        raise ConfigError(f"space file is empty; expected a mapping of settings in {display}:1")
    if not isinstance(root, MappingNode):
        raise ConfigError(f"space file must be a mapping of settings in {display}:{root.start_mark.line + 1}")
    return Source(path, display, root)


def _check_nodes(root: Node, display: str) -> None:
    """Refuse tags other than YAML's plain types and nesting deeper than MAX_DEPTH (no recursion)."""
    stack: list[tuple[Node, int, str]] = [(root, 1, "")]
    seen: set[int] = set()
    while stack:
        node, depth, key = stack.pop()
        where = f"{display}:{node.start_mark.line + 1}"
        if depth > MAX_DEPTH:
            raise ConfigError(f"space file is nested too deeply (more than {MAX_DEPTH} levels) in {where}")
        if node.tag not in SAFE_TAGS:
            raise ConfigError(
                f"YAML tag {node.tag.replace('tag:yaml.org,2002:', '!!')} is not allowed: a space file "
                f"holds plain values (strings, numbers, booleans, lists, mappings) in {where}"
            )
        if id(node) in seen:  # an alias: already checked
            continue
        seen.add(id(node))
        if isinstance(node, ScalarNode) and node.tag == "tag:yaml.org,2002:int":
            _check_int(node, key, where)
        if isinstance(node, MappingNode):
            for k, v in node.value:
                name = _join(key, str(k.value)) if isinstance(k, ScalarNode) else key
                stack.extend(((k, depth + 1, key), (v, depth + 1, name)))
        elif isinstance(node, SequenceNode):
            stack.extend((item, depth + 1, key) for item in node.value)


def _check_int(node: ScalarNode, key: str, where: str) -> None:
    try:
        value = yaml.constructor.SafeConstructor().construct_yaml_int(node)
    except (ValueError, yaml.YAMLError):
        return  # not a number after all: the reader of that key says what it expected
    if not -INT_LIMIT < value < INT_LIMIT:
        prefix = f"{key}: " if key else ""
        raise ConfigError(
            f"{prefix}integer {node.value[:40]} is out of range: expected |n| < 2**63 in {where}"
        )


def _check_expanded_size(root: Node, display: str) -> None:
    """Refuse a file whose aliases expand to more than MAX_VALUES values, before any value is built."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:  # post-order over distinct nodes: an alias is one node reached twice
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        children = _children(node)
        if not children_done:
            if id(node) in open_nodes:
                raise ConfigError(
                    f"space file refers to a value inside itself (a recursive alias) in "
                    f"{display}:{node.start_mark.line + 1}"
                )
            open_nodes.add(id(node))
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in sizes)
            continue
        size = 1 + sum(sizes[id(c)] for c in children)
        if size > MAX_VALUES:
            raise ConfigError(
                f"space file expands to more than {MAX_VALUES:,} values through its aliases (an alias "
                f"bomb?) in {display}:{node.start_mark.line + 1}"
            )
        sizes[id(node)] = size


def _children(node: Node) -> list[Node]:
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, SequenceNode):
        return list(node.value)
    return []


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


class Section:
    """A YAML mapping with a key path, a fixed set of allowed keys and typed getters."""

    def __init__(
        self,
        src: Source,
        node: Node,
        where: str,
        allowed: Iterable[str] | None,
        required: Sequence[str] = (),
    ) -> None:
        self.src = src
        self.node = node
        self.where = where
        if not isinstance(node, MappingNode):
            raise src.error(node, where, f"expected a mapping, got {show(python_value(node))}")
        try:
            yaml.constructor.SafeConstructor().flatten_mapping(node)  # apply `<<:` merge keys
        except yaml.YAMLError as exc:  # `<<: 5`: a merge of something that is not a mapping
            problem = getattr(exc, "problem", None) or str(exc)
            mark = getattr(exc, "problem_mark", None)
            at = f"{src.display}:{mark.line + 1}" if mark is not None else src.where(node)
            raise ConfigError(f"{where or 'top level'}: {problem} in {at}") from None
        self.entries: dict[str, tuple[ScalarNode, Node]] = {}
        allowed_list = list(allowed) if allowed is not None else None
        for key_node, value_node in node.value:
            key = python_value(key_node) if isinstance(key_node, ScalarNode) else None
            if not isinstance(key, str):
                raise src.error(key_node, where, f"keys must be strings (got {show(key)})")
            if key in self.entries:
                first = self.entries[key][0].start_mark.line + 1
                raise src.error(key_node, _join(where, key), f"duplicate key (first given on line {first})")
            if allowed_list is not None and key not in allowed_list:
                raise src.error(
                    key_node, _join(where, key), f"unknown key; allowed: {', '.join(allowed_list)}"
                )
            self.entries[key] = (key_node, value_node)
        for key in required:
            if key not in self.entries:
                raise src.error(node, _join(where, key), "required key is missing")

    def __contains__(self, key: str) -> bool:
        return key in self.entries

    def names(self) -> list[str]:
        return list(self.entries)

    def path(self, key: str) -> str:
        return _join(self.where, key)

    def value_node(self, key: str) -> Node:
        return self.entries[key][1]

    def key_node(self, key: str) -> Node:
        return self.entries[key][0]

    def error(self, key: str, message: str, *, at_key: bool = False) -> ConfigError:
        node = self.entries[key][0 if at_key else 1] if key in self.entries else self.node
        return self.src.error(node, self.path(key), message)

    def raw(self, key: str, default: Any = MISSING) -> Any:
        if key not in self.entries:
            if default is MISSING:
                raise self.src.error(self.node, self.path(key), "required key is missing")
            return default
        return python_value(self.entries[key][1])

    def section(
        self, key: str, allowed: Iterable[str] | None, required: Sequence[str] = ()
    ) -> Section | None:
        if key not in self.entries:
            return None
        node = self.entries[key][1]
        if isinstance(node, ScalarNode) and python_value(node) is None:
            return None  # a key with only comments under it
        return Section(self.src, node, self.path(key), allowed, required)

    def seq(self, key: str) -> list[Node]:
        if key not in self.entries:
            return []
        node = self.entries[key][1]
        if isinstance(node, ScalarNode) and python_value(node) is None:
            return []
        if not isinstance(node, SequenceNode):
            raise self.error(key, f"expected a list, got {show(python_value(node))}")
        return list(node.value)

    def get_str(self, key: str, default: Any = MISSING, *, pattern: str | None = None, what: str = "") -> Any:
        value = self.raw(key, default)
        if key not in self.entries:
            return value
        if not isinstance(value, str) or not value.strip():
            raise self.error(key, f"expected {what or 'a non-empty string'} (got {show(value)})")
        if pattern and not re.fullmatch(pattern, value):
            raise self.error(key, f"expected {what or 'a string matching ' + pattern} (got {show(value)})")
        return value

    def get_choice(self, key: str, options: Sequence[str], default: Any = MISSING) -> Any:
        value = self.raw(key, default)
        if key in self.entries and value not in options:
            raise self.error(key, f"expected one of {', '.join(options)} (got {show(value)})")
        return value

    def get_bool(self, key: str, default: Any = MISSING) -> Any:
        value = self.raw(key, default)
        if key in self.entries and not isinstance(value, bool):
            raise self.error(key, f"expected true or false (got {show(value)})")
        return value

    def get_int(
        self, key: str, default: Any = MISSING, *, min: int | None = None, nullable: bool = False
    ) -> Any:
        value = self.raw(key, default)
        if key not in self.entries or (nullable and value is None):
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, f"expected an integer (got {show(value)})")
        if min is not None and value < min:
            raise self.error(key, f"must be ≥ {min} (got {value})")
        return value

    def get_float(
        self,
        key: str,
        default: Any = MISSING,
        *,
        min: float | None = None,
        max: float | None = None,
        above: float | None = None,
        nullable: bool = False,
    ) -> Any:
        value = self.raw(key, default)
        if key not in self.entries or (nullable and value is None):
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self.error(key, f"expected a number (got {show(value)})")
        if min is not None and value < min:
            raise self.error(key, f"must be ≥ {min:g} (got {value:g})")
        if max is not None and value > max:
            raise self.error(key, f"must be ≤ {max:g} (got {value:g})")
        if above is not None and value <= above:
            raise self.error(key, f"must be > {above:g} (got {value:g})")
        return float(value)
