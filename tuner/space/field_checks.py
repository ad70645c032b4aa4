"""Checks of single space-file fields (the version, the space name, the GPU list): pydantic
before-validators that raise `mistake` with the value shown, so the reader names the file and line."""

from __future__ import annotations

from tuner.config import MAX_GPU_INDEX
from tuner.names import name_problem, version_problem
from tuner.settings import mistake, show

MAX_SPACE_NAME_LEN = 100  # the study name adds -vVERSION; the store's columns hold 255 characters

__all__ = ["gpus_field", "space_name_field", "version_field"]


def version_field(value: object) -> object:
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).strip():
        raise mistake(f"expected an integer or a short string (got {show(value)})")
    problem = version_problem(value)
    if problem:  # it becomes part of the study name and of the runs/ folder
        raise mistake(f"{problem}: it names the study and its runs/ folder (got {show(str(value)[:60])})")
    return value


def space_name_field(value: object) -> object:
    if isinstance(value, str) and (problem := name_problem(value, limit=MAX_SPACE_NAME_LEN)):
        raise mistake(f"{problem} (got {show(value[:60])})")
    return value


def gpus_field(value: object) -> object:
    if value in ("all", None):
        return ()
    if value == []:
        raise mistake("an empty list names no GPU; expected all or a list of GPU indices such as [0, 1]")
    if not isinstance(value, list) or any(
        isinstance(g, bool) or not isinstance(g, int) or not 0 <= g <= MAX_GPU_INDEX for g in value
    ):
        raise mistake(f"expected all or a list of GPU indices such as [0, 1] (got {show(value)})")
    if len(set(value)) != len(value):
        raise mistake(f"duplicate GPU index in {value}")
    return tuple(value)
