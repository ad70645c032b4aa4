"""SGLang launch-option tables: what each release's argparser accepts.

A table comes either from the SGLang installed where the server runs (see
`tuner.sglang.introspect`) or from the built-in facts of known releases in
`option_tables.json` (derived by scripts/compact_sglang_args.py). From a
table, `build_parser` makes an argparse parser that accepts and rejects
exactly what that release's parser does (allow_abbrev, choices, nargs, ints),
so the tuner validates an argv without SGLang and the simulator parses like
the release it pretends to be.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, NoReturn, cast

from tuner.errors import ConfigError


@dataclass(frozen=True, kw_only=True, slots=True)
class OptionSpec:
    """One launch option of one release: its spellings and how it parses."""

    opts: tuple[str, ...]
    dest: str
    # store | store_true | bool_optional | alias | removed | deprecated_store_true | deprecated_store_const
    kind: str
    nargs: int | str | None
    value_type: str  # int | float | str
    choices: tuple[str, ...] | None

    @property
    def takes_value(self) -> bool:
        return self.kind in ("store", "alias") or (self.kind == "deprecated_store_const" and self.nargs != 0)

    @property
    def is_deprecated(self) -> bool:
        return self.kind in ("alias", "deprecated_store_true", "deprecated_store_const", "removed")


@dataclass(frozen=True, kw_only=True, slots=True)
class OptionTable:
    """Every launch option of one SGLang release."""

    version: str
    options: tuple[OptionSpec, ...]
    source: str  # "builtin" or "installed"

    def __hash__(self) -> int:
        # Equal tables share these; hashing every option on each cached lookup was the slow part.
        return hash((self.version, self.source, len(self.options)))

    def find(self, flag: str) -> OptionSpec | None:
        """The option spelled exactly `flag` (e.g. '--tp-size'), or None."""
        return _by_flag(self).get(flag)

    def by_dest(self, dest: str) -> tuple[OptionSpec, ...]:
        """Every option storing into `dest` (canonical spelling first)."""
        found = [o for o in self.options if o.dest == dest]
        found.sort(key=lambda o: o.kind == "alias")
        return tuple(found)

    def flags(self) -> frozenset[str]:
        return frozenset(_by_flag(self))


@cache
def _by_flag(table: OptionTable) -> dict[str, OptionSpec]:
    return {flag: opt for opt in table.options for flag in opt.opts}


def version_key(version: str) -> tuple[int, ...]:
    """Sortable key for '0.5.9', '0.5.13.post1', '0.5.23'."""
    base = version.split("+")[0]
    main, _, post = base.partition(".post")
    parts = []
    for piece in main.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    while len(parts) < 3:
        parts.append(0)
    return (*parts[:3], int(post or 0))


@cache
def _builtin_data() -> dict[str, Any]:
    text = resources.files("tuner.sglang").joinpath("option_tables.json").read_text()
    return cast(dict[str, Any], json.loads(text))


def known_versions() -> tuple[str, ...]:
    """Releases with built-in facts, oldest first."""
    return tuple(sorted(_builtin_data()["versions"], key=version_key))


def table_from_entries(version: str, entries: list[list[Any]], source: str) -> OptionTable:
    """Build a table from compact entries [opts, dest, kind, nargs, type, choices]."""
    options = tuple(
        OptionSpec(
            opts=tuple(opts),
            dest=dest,
            kind=kind,
            nargs=nargs,
            value_type=value_type,
            choices=tuple(choices) if choices else None,
        )
        for opts, dest, kind, nargs, value_type, choices in entries
    )
    return OptionTable(version=version, options=options, source=source)


@cache
def builtin_table(version: str) -> OptionTable:
    """The built-in table for `version`, or for the newest known release not newer than it.

    Raises ConfigError when `version` is older than every known release.
    """
    data = _builtin_data()
    chosen = data["versions"].get(version) and version
    if not chosen:
        older = [v for v in known_versions() if version_key(v) <= version_key(version)]
        if not older:
            raise ConfigError(
                f"SGLang {version}: no option table is known for releases before "
                f"{known_versions()[0]}; install that SGLang so its own parser can be read"
            )
        chosen = older[-1]
    entries = [data["entries"][i] for i in data["versions"][chosen]]
    source = "builtin" if chosen == version else f"builtin:{chosen}"
    return table_from_entries(version, entries, source)


class ArgvError(Exception):
    """Raised by a parser from `build_parser` instead of exiting."""


class _RaisingParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ArgvError(message)


_TYPES = {"int": int, "float": float, "str": str}


def build_parser(
    table: OptionTable, *, prog: str = "launch_server", raising: bool = True
) -> argparse.ArgumentParser:
    """An argparse parser that accepts exactly what `table`'s release accepts.

    With raising=True, errors raise ArgvError (for validation); otherwise they
    print argparse's usage message and exit 2, as SGLang does.
    """
    cls = _RaisingParser if raising else argparse.ArgumentParser
    parser = cls(prog=prog, allow_abbrev=True, add_help=not raising)
    for opt in table.options:
        _add(parser, opt)
    return parser


def _add(parser: argparse.ArgumentParser, opt: OptionSpec) -> None:
    kw: dict[str, Any] = {"dest": opt.dest, "default": argparse.SUPPRESS}
    if opt.takes_value:
        if opt.nargs not in (None, 0):
            kw["nargs"] = opt.nargs
        kw["type"] = _TYPES.get(opt.value_type, str)
        if opt.choices:
            kw["choices"] = _typed_choices(opt)
        parser.add_argument(*opt.opts, **kw)
    elif opt.kind in ("store_true", "deprecated_store_true"):
        parser.add_argument(*opt.opts, action="store_true", **kw)
    elif opt.kind == "bool_optional":
        parser.add_argument(*opt.opts, action=argparse.BooleanOptionalAction, **kw)
    elif opt.kind in ("deprecated_store_const", "removed"):
        parser.add_argument(*opt.opts, action="store_const", const=True, **kw)
    else:  # pragma: no cover - the table generator knows no other kinds
        raise ValueError(f"unknown option kind {opt.kind!r} for {opt.opts}")


def _typed_choices(opt: OptionSpec) -> list[Any]:
    convert = _TYPES.get(opt.value_type, str)
    out = []
    for choice in opt.choices or ():
        try:
            out.append(convert(choice))
        except ValueError:
            out.append(choice)
    return out
