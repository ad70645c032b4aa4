"""Dump the installed SGLang's launch options as JSON (run inside SGLang's Python).

    python _dump_options.py OUT.json                 the parser's options
    python _dump_options.py --parse IN.json OUT.json  parse each argv of IN with the real parser

Imports only the standard library and sglang, so it runs in an environment
where the tuner is not installed. Writes to a file rather than stdout because
importing SGLang may print to stdout. One record per argparse action:
option strings, dest, action class and its base classes, nargs, type name,
choices.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
from collections.abc import Callable
from typing import NoReturn


def _record(action: argparse.Action) -> dict[str, object]:
    choices = action.choices
    if isinstance(choices, (set, frozenset)):  # a set's order changes with the hash seed
        choices = sorted(choices, key=str)
    return {
        "opts": list(action.option_strings),
        "dest": action.dest,
        "action": type(action).__name__,
        "bases": [cls.__name__ for cls in type(action).__mro__[1:]],
        "nargs": action.nargs,
        "type": getattr(action.type, "__name__", None) if action.type is not None else None,
        "choices": [str(c) for c in choices] if choices is not None else None,
    }


class _Rejected(Exception):
    pass


class _RaisingParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _Rejected(message)


def _parse_one(add_cli_args: Callable[[argparse.ArgumentParser], None], argv: list[str]) -> str | None:
    parser = _RaisingParser(prog="launch_server")
    add_cli_args(parser)
    try:
        parser.parse_args(argv)
    except _Rejected as exc:
        return str(exc)
    except (ValueError, SystemExit) as exc:  # older DeprecatedAction raises ValueError(help)
        return f"{type(exc).__name__}: {exc}"
    return None


def main(argv: list[str]) -> int:
    from sglang.srt.server_args import ServerArgs

    if argv[1] == "--parse":
        with open(argv[2], encoding="utf-8") as handle:
            argvs = json.load(handle)
        data: dict[str, object] = {"errors": [_parse_one(ServerArgs.add_cli_args, list(a)) for a in argvs]}
        out_path = argv[3]
    else:
        parser = argparse.ArgumentParser()
        ServerArgs.add_cli_args(parser)
        data = {"options": [_record(action) for action in parser._actions]}
        out_path = argv[1]
    data["sglang_version"] = importlib.metadata.version("sglang")
    with open(out_path, "w", encoding="utf-8") as handle:
        json.dump(data, handle)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
