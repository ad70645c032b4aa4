"""Derive tuner/sglang/option_tables.json from SGLang's released option tables.

Input: a folder of `<version>.json` files, each a dump of one release's
ServerArgs argparser (option strings, dest, choices, nargs, type, action).
Output: the compact facts the tuner needs (option strings, dest, action kind,
nargs, value type, choices) with identical entries shared between releases.
Defaults and help texts are not carried.

    python scripts/compact_sglang_args.py ../shared/reference/sglang-args
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

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


def _version_key(version: str) -> tuple[int, ...]:
    main, _, post = version.partition(".post")
    return (*map(int, main.split(".")), int(post or 0))


def compact(folder: Path) -> dict:
    entries: list[list] = []
    index: dict[str, int] = {}
    versions: dict[str, list[int]] = {}
    for path in sorted(folder.glob("*.json"), key=lambda p: _version_key(p.stem)):
        table = json.loads(path.read_text())
        ids = []
        for opt in table["options"]:
            kind = _ACTION_KIND[opt["action"]]
            if kind == "help":
                continue
            nargs = opt["nargs"]
            if kind not in ("store", "alias"):
                nargs = 0
            choices = opt["choices"]
            entry = [
                opt["opts"],
                opt["dest"],
                kind,
                nargs,
                _VALUE_TYPE.get(opt["type"] or "", "str"),
                [str(c) for c in choices] if choices else None,
            ]
            key = json.dumps(entry)
            if key not in index:
                index[key] = len(entries)
                entries.append(entry)
            ids.append(index[key])
        versions[table["sglang_version"]] = ids
    return {
        "format": 1,
        "fields": ["opts", "dest", "kind", "nargs", "type", "choices"],
        "entries": entries,
        "versions": versions,
    }


def main(argv: list[str]) -> int:
    folder = Path(argv[1]) if len(argv) > 1 else Path("../shared/reference/sglang-args")
    out = Path(__file__).resolve().parents[1] / "tuner" / "sglang" / "option_tables.json"
    data = compact(folder)
    out.write_text(json.dumps(data, separators=(",", ":")) + "\n")
    print(f"{out}: {len(data['versions'])} releases, {len(data['entries'])} distinct options")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
