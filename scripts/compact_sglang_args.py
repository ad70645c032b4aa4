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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tuner.sglang.introspect import compact_entries  # noqa: E402

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
        for entry in compact_entries(table["options"]):
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
