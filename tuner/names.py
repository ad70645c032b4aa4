"""Safe names and safe text: what may name a study or a file, and how free text enters a written file.

A study name is stored in the database (PostgreSQL's columns hold 255 characters), becomes a
folder under `runs/` and a line of every exported file, so it is checked once, here, before
anything is created: letters, digits, `_ . -`, starting with a letter or digit, at most
`MAX_NAME_LEN` characters; a space's `version` the same at most `MAX_VERSION_LEN`. No path
separator, no `..` alone, no control character can pass, so no name leaves the working folder.

Text a user or a server chose (knob values, a gate's reason) may still reach a comment line of an
exported file: `one_line` escapes every control character there, so a comment stays one line.
"""

from __future__ import annotations

import re

__all__ = [
    "MAX_NAME_LEN",
    "MAX_VERSION_LEN",
    "NAME_PATTERN",
    "control_problem",
    "name_problem",
    "one_line",
    "version_problem",
]

NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9_.-]*"
MAX_NAME_LEN = 160  # a space name (100) + "-v" + a version (32) fits; PostgreSQL columns hold 255
MAX_VERSION_LEN = 32
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def name_problem(name: str, *, limit: int = MAX_NAME_LEN) -> str | None:
    """Why `name` cannot name a study (or a space), or None when it can."""
    if not re.fullmatch(NAME_PATTERN, name):
        return "expected letters, digits, _ . - (starting with a letter or digit)"
    if len(name) > limit:
        return f"expected at most {limit} characters (got {len(name)})"
    return None


def version_problem(version: int | str) -> str | None:
    """Why `version` cannot be a space's version (it becomes part of a folder name), or None."""
    text = str(version)
    if isinstance(version, int) and not isinstance(version, bool):
        return None if 0 <= version < 10**12 else "expected an integer from 0 to 999999999999"
    return name_problem(text, limit=MAX_VERSION_LEN)


def control_problem(text: str) -> str | None:
    """Why `text` cannot be a value the tuner writes into a launch or a file, or None."""
    found = _CONTROL.search(text)
    if found is None:
        return None
    return f"contains the control character {found.group()!r}; expected printable text"


def one_line(text: str) -> str:
    """`text` with every control character escaped (`\\n`, `\\x1b`): safe on one comment line."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)
