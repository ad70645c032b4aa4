"""Mine SGLang's own source, release by release, for the places that report a failure class.

Writes tuner/sglang/failure_sites.json: for every release the option tables cover, each
`raise` or logger call under `sglang/srt/` whose message means out of memory (the KV and
request-slot allocators), not enough memory for the KV cache, CUDA-graph capture failure, an
unsupported GPU or backend, NaN, or a hang, as site facts only: the file (relative to
`sglang/srt/`), the function, the exception type (or `log.<level>`), the message template
(`{}` where a value is interpolated) and the class. Identical sites are shared between
releases, as in option_tables.json. No code of SGLang is copied: only paths, names and the
literal text of its messages.

Sources, one of:
    --git DIR     a clone of SGLang's public repository with its release tags (vX.Y.Z)
    --wheels DIR  the released wheels, `sglang-<version>-*.whl`, one per release
                  (`pip download "sglang==0.5.23" --no-deps -d DIR`, for each release)

    python scripts/mine_failure_sites.py --wheels /tmp/sglang-wheels
    python scripts/mine_failure_sites.py --git ~/src/sglang --versions 0.5.22 0.5.23
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tuner" / "sglang" / "failure_sites.json"
FIELDS = ["file", "function", "exception", "template", "class"]

# The wording of each class, tried in order on a site's message (case-insensitive).
_CLASSES = (
    ("capture_failed", r"capture\b.*\bgraph\b.*\bfailed|graph capture failed"),
    ("not_enough_memory", r"not enough memory|no gpu memory for the kv cache|increase --mem-fraction-static"),
    ("oom", r"out of memory|runs out of memory|out of request slots|\balloc\w* failed|kv cache pool is full"),
    ("hang", r"watchdog timeout|watchdog.*(?:hang|stuck)"),
    ("nan", r"\bnan\b|\binf\b.*logits|logits.*\binf\b"),
    ("unsupported", r"(?:not|only) support\w*.*\b(?:sm\s?\d+|sm_?\{\}|architecture|compute capabilit\w*"
                    r"|blackwell|hopper|ampere|gpu|device|cuda arch\w*|hip|rocm)\b"
                    r"|unsupported (?:architecture|gpu|device|sm)|requires? (?:sm\s?\d+|hopper|blackwell)"),
)  # fmt: skip
_CLASS_RE = tuple((name, re.compile(pattern, re.I)) for name, pattern in _CLASSES)
_LOG_CALLS = {"error", "critical", "fatal", "exception", "warning"}


def template(node: ast.expr) -> str | None:
    """The literal text of a message expression, `{}` for each interpolated value; None if it has none."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(
            v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "{}" for v in node.values
        )
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod)):
        left = template(node.left)
        right = template(node.right) if isinstance(node.op, ast.Add) else None
        if left is None:
            return right
        return left + (right if right is not None else "{}") if isinstance(node.op, ast.Add) else left
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        return template(node.func.value)
    return None


def _message(call: ast.Call, names: dict[str, str]) -> str | None:
    """The template of a call's first argument: a literal, or a local name assigned one in the function."""
    if not call.args:
        return None
    first = call.args[0]
    if isinstance(first, ast.Name):
        return names.get(first.id)
    return template(first)


_NOT_A_FAILURE = re.compile(r"deprecated|to avoid|falling back|fall back", re.I)


def _classify(text: str) -> str | None:
    flat = " ".join(text.split())
    if _NOT_A_FAILURE.search(flat):
        return None
    return next((name for name, pattern in _CLASS_RE if pattern.search(flat)), None)


class _Sites(ast.NodeVisitor):
    """Collects (function, exception, template) of every raise and logger call with a message."""

    def __init__(self) -> None:
        self.stack: list[str] = []
        self.names: list[dict[str, str]] = []
        self.found: list[tuple[str, str, str]] = []

    def _scope(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.stack.append(node.name)
        self.names.append({})
        self.generic_visit(node)
        self.names.pop()
        self.stack.pop()

    def visit_Assign(self, node: ast.Assign) -> None:
        target = node.targets[0] if len(node.targets) == 1 else None
        if self.names and isinstance(target, ast.Name) and (text := template(node.value)) is not None:
            self.names[-1][target.id] = text
        self.generic_visit(node)

    visit_FunctionDef = _scope
    visit_AsyncFunctionDef = _scope

    def visit_Raise(self, node: ast.Raise) -> None:
        if (
            self.stack
            and isinstance(node.exc, ast.Call)
            and (text := _message(node.exc, self.names[-1])) is not None
        ):
            func = node.exc.func
            name = (
                func.id
                if isinstance(func, ast.Name)
                else func.attr
                if isinstance(func, ast.Attribute)
                else "?"
            )
            self.found.append((self.stack[-1], name, text))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if (
            self.stack
            and isinstance(func, ast.Attribute)
            and func.attr in _LOG_CALLS
            and isinstance(func.value, ast.Name)
            and func.value.id in ("logger", "log", "logging")
            and (text := _message(node, self.names[-1])) is not None
        ):
            self.found.append((self.stack[-1], f"log.{func.attr}", text))
        self.generic_visit(node)


def sites_of(rel: str, source: str) -> Iterator[list[str]]:
    """The failure sites of one source file (path relative to sglang/srt/)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return
    visitor = _Sites()
    visitor.visit(tree)
    for function, exception, text in visitor.found:
        if (cls := _classify(text)) is not None:
            yield [rel, function, exception, " ".join(text.split()), cls]


def _wheel_sources(wheel: Path) -> Iterator[tuple[str, str]]:
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name.startswith("sglang/srt/") and name.endswith(".py"):
                yield name.removeprefix("sglang/srt/"), archive.read(name).decode("utf-8", "replace")


def _git_sources(repo: Path, version: str) -> Iterator[tuple[str, str]]:
    tag = f"v{version}"
    listing = subprocess.run(
        ["git", "-C", str(repo), "ls-tree", "-r", "--name-only", tag, "python/sglang/srt/"],
        check=True, capture_output=True, text=True,
    ).stdout.split()  # fmt: skip
    for path in (p for p in listing if p.endswith(".py")):
        shown = subprocess.run(
            ["git", "-C", str(repo), "show", f"{tag}:{path}"], capture_output=True, text=True
        )
        if shown.returncode == 0:
            yield path.removeprefix("python/sglang/srt/"), shown.stdout


def _version_key(version: str) -> tuple[int, ...]:
    main, _, post = version.partition(".post")
    return (*map(int, main.split(".")), int(post or 0))


def _wheels(folder: Path) -> dict[str, Path]:
    out = {}
    for wheel in folder.glob("sglang-*.whl"):
        out[wheel.name.split("-")[1]] = wheel
    return out


def mine(versions: list[str], *, git: Path | None, wheels: Path | None) -> dict[str, object]:
    """The version-indexed table of failure sites."""
    entries: list[list[str]] = []
    index: dict[tuple[str, ...], int] = {}
    by_version: dict[str, list[int]] = {}
    found_wheels = _wheels(wheels) if wheels is not None else {}
    for version in sorted(versions, key=_version_key):
        if wheels is not None and version not in found_wheels:
            print(f"skipped {version}: no wheel in {wheels}", file=sys.stderr)
            continue
        sources = _wheel_sources(found_wheels[version]) if wheels is not None else _git_sources(git, version)  # type: ignore[arg-type]
        ids: list[int] = []
        for rel, source in sorted(sources):
            for site in sites_of(rel, source):
                key = tuple(site)
                if key not in index:
                    index[key] = len(entries)
                    entries.append(site)
                if index[key] not in ids:
                    ids.append(index[key])
        by_version[version] = ids
        print(f"{version}: {len(ids)} sites", file=sys.stderr)
    return {"format": 1, "fields": FIELDS, "sites": entries, "versions": by_version}


def _covered_versions() -> list[str]:
    tables = json.loads((ROOT / "tuner" / "sglang" / "option_tables.json").read_text(encoding="utf-8"))
    return list(tables["versions"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--git", type=Path, help="a clone of SGLang with its release tags")
    source.add_argument("--wheels", type=Path, help="a folder of SGLang's released wheels")
    parser.add_argument(
        "--versions", nargs="*", help="releases to mine (default: those the option tables cover)"
    )
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    table = mine(args.versions or _covered_versions(), git=args.git, wheels=args.wheels)
    args.out.write_text(json.dumps(table, separators=(",", ":")) + "\n", encoding="utf-8")
    print(
        f"wrote {args.out}: {len(table['sites'])} sites, {len(table['versions'])} releases", file=sys.stderr
    )  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
