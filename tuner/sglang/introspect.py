"""Read the launch options of the SGLang installed in some Python, in a subprocess.

The tuner never imports SGLang itself (it may live in another environment,
and importing it pulls in torch). `detect_sglang_version` asks the package
metadata only; `installed_option_table` runs `_dump_options.py` inside that
Python, turns the dump into an `OptionTable` with the same rules as
scripts/compact_sglang_args.py, and caches it per version under
`${XDG_CACHE_HOME:-~/.cache}/sglang-tuner/options/`.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tuner.errors import ConfigError
from tuner.private import atomic_open
from tuner.sglang.options import OptionTable, builtin_table, table_from_entries

log = logging.getLogger(__name__)
_ANNOUNCED: set[tuple[str, str]] = set()  # (version, source) of the built-in tables already named in the log

__all__ = [
    "compact_entries",
    "default_cache_dir",
    "detect_sglang_version",
    "installed_option_table",
    "option_table_for",
    "parse_with_installed",
]

_DUMP_SCRIPT = Path(__file__).with_name("_dump_options.py")
_CACHE_FORMAT = 1

# The rules of scripts/compact_sglang_args.py: argparse action class -> option kind.
_ACTION_KIND = {
    "_StoreAction": "store",
    "_StoreTrueAction": "store_true",
    "BooleanOptionalAction": "bool_optional",
    "DeprecatedAliasStoreAction": "alias",
    "DeprecatedAction": "removed",
    "DeprecatedStoreTrueAction": "deprecated_store_true",
    "DeprecatedStoreConstAction": "deprecated_store_const",
    "LoRAPathAction": "store",
    "_HelpAction": "help",
}
_VALUE_TYPE = {"int": "int", "float": "float", "human_readable_int": "int"}
_RUN_HELPER = "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
_VERSION_SNIPPET = (
    "import importlib.metadata as m\n"
    "try:\n    print(m.version('sglang'))\n"
    "except m.PackageNotFoundError:\n    raise SystemExit(3)\n"
)


def default_cache_dir() -> Path:
    """`${XDG_CACHE_HOME:-~/.cache}/sglang-tuner/options`."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sglang-tuner" / "options"


def detect_sglang_version(python: str = sys.executable, *, timeout_s: float = 30.0) -> str | None:
    """The SGLang version installed in `python` (from package metadata, no import), or None."""
    try:
        done = subprocess.run(
            [python, "-c", _VERSION_SNIPPET], capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except FileNotFoundError as exc:
        raise ConfigError(f"SGLang python: {python!r} does not exist (expected an interpreter path)") from exc
    except subprocess.TimeoutExpired as exc:
        raise ConfigError(f"SGLang python: {python} did not answer within {timeout_s:g} s") from exc
    if done.returncode == 3:
        return None
    if done.returncode != 0:
        raise ConfigError(
            f"SGLang python: {python} failed to report the sglang version "
            f"(exit {done.returncode}): {_tail(done.stderr)}"
        )
    return done.stdout.strip() or None


def installed_option_table(
    python: str, version: str, *, cache_dir: Path | None = None, timeout_s: float = 180.0
) -> OptionTable:
    """The launch options of SGLang `version` installed in `python`, read from its own parser.

    Cached as JSON per version; raises ConfigError when SGLang cannot be
    imported there, times out, or turns out to be another version.
    """
    cache = (cache_dir or default_cache_dir()) / f"{version}.json"
    entries = _read_cache(cache, version)
    if entries is None:
        dump = _run_helper(python, [], timeout_s=timeout_s, what="read its launch options")
        if dump.get("sglang_version") != version:
            raise ConfigError(
                f"SGLang in {python}: expected version {version}, got {dump.get('sglang_version')} "
                f"(installed while the tuner ran?)"
            )
        entries = compact_entries(dump["options"])
        _write_cache(cache, version, python, entries)
    return table_from_entries(version, entries, "installed")


def compact_entries(options: Sequence[Mapping[str, Any]]) -> list[list[Any]]:
    """Dumped actions -> compact entries [opts, dest, kind, nargs, type, choices] (help dropped)."""
    entries: list[list[Any]] = []
    for opt in options:
        kind = _kind(opt)
        if kind == "help":
            continue
        takes_value = kind in ("store", "alias") or (kind == "deprecated_store_const" and opt["nargs"] != 0)
        nargs = opt["nargs"] if takes_value else 0
        choices = opt["choices"]
        entries.append(
            [
                list(opt["opts"]),
                opt["dest"],
                kind,
                nargs,
                _VALUE_TYPE.get(str(opt["type"] or ""), "str"),
                [str(c) for c in choices] if choices else None,
            ]
        )
    return entries


def _kind(opt: Mapping[str, Any]) -> str:
    for name in [opt["action"], *opt.get("bases", [])]:
        if name in _ACTION_KIND:
            return _ACTION_KIND[name]
    # An action class no known release used: judge it by whether it takes a value.
    kind = "store_true" if opt["nargs"] == 0 else "store"
    log.warning("SGLang option %s: unknown action %s, read as %s", opt["opts"], opt["action"], kind)
    return kind


def parse_with_installed(
    python: str, argvs: Sequence[Sequence[str]], *, timeout_s: float = 180.0
) -> tuple[str | None, ...]:
    """Parse each argv with the real parser of the SGLang in `python`: None or argparse's message."""
    with tempfile.TemporaryDirectory(prefix="sglang-tuner-") as tmp:
        request = Path(tmp) / "argvs.json"
        request.write_text(json.dumps([list(a) for a in argvs]))
        dump = _run_helper(python, ["--parse", str(request)], timeout_s=timeout_s, what="parse argvs")
    return tuple(dump["errors"])


def _run_helper(python: str, args: list[str], *, timeout_s: float, what: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="sglang-tuner-") as tmp:
        out = Path(tmp) / "out.json"
        # Run the helper by path from -c in an empty cwd: `python FILE` would put
        # tuner/sglang/ first on sys.path, where our modules could shadow SGLang's imports.
        command = [python, "-c", _RUN_HELPER, str(_DUMP_SCRIPT), *args, str(out)]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=timeout_s, check=False, cwd=tmp
            )
        except FileNotFoundError as exc:
            raise ConfigError(
                f"SGLang python: {python!r} does not exist (expected an interpreter path)"
            ) from exc
        except subprocess.TimeoutExpired as exc:
            raise ConfigError(
                f"SGLang in {python}: could not {what} within {timeout_s:g} s (importing sglang hung?)"
            ) from exc
        if done.returncode != 0 or not out.exists():
            raise ConfigError(
                f"SGLang in {python}: could not {what}: importing sglang.srt.server_args failed "
                f"(exit {done.returncode}): {_tail(done.stderr)}"
            )
        return json.loads(out.read_text())  # type: ignore[no-any-return]


def _read_cache(path: Path, version: str) -> list[list[Any]] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if (
        not isinstance(data, dict)
        or data.get("format") != _CACHE_FORMAT
        or data.get("sglang_version") != version
    ):
        log.info("ignoring stale option cache %s", path)
        return None
    return data.get("entries")


def _write_cache(path: Path, version: str, python: str, entries: list[list[Any]]) -> None:
    data = {"format": _CACHE_FORMAT, "sglang_version": version, "python": python, "entries": entries}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_open(path) as fh:  # a random O_EXCL name: no planted link at a guessable one is followed
            fh.write(json.dumps(data))
    except OSError as exc:  # a read-only cache costs a re-read next time, nothing more
        log.warning("could not cache SGLang options in %s: %s", path, exc)


def _tail(text: str, lines: int = 3) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()][-lines:]
    return " | ".join(kept) or "(no output)"


def option_table_for(
    version: str | None, python: str | None, *, cache_dir: Path | None = None
) -> OptionTable:
    """The installed SGLang's table when `python` can import it, else the built-in facts of `version`."""
    if python is not None:
        found = detect_sglang_version(python)
        if found is not None and version is not None and found != version:
            log.warning("SGLang in %s is %s, not the requested %s; using %s", python, found, version, found)
        version = found or version
        if found is not None:
            try:
                table = installed_option_table(python, found, cache_dir=cache_dir)
            except ConfigError as exc:
                log.warning("%s; falling back to the built-in option table of %s", exc, found)
            else:
                log.info("SGLang %s: option table read from the parser installed in %s", found, python)
                return table
    if version is None:
        where = f" in {python}" if python else ""
        raise ConfigError(f"SGLang version: none installed{where} and none given (expected e.g. '0.5.23')")
    table = builtin_table(version)
    if (version, table.source) not in _ANNOUNCED:  # said once per process, not at every engine built
        _ANNOUNCED.add((version, table.source))
        log.info("SGLang %s: using the built-in option table (%s)", version, table.source)
    return table
