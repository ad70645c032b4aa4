"""The prefix a log collector puts before every line SGLang wrote, found once per log and stripped.

A log read back from Kubernetes (CRI: `<RFC 3339 time> stderr F `), `docker logs -t` or
`kubectl logs --timestamps` (`<RFC 3339 time> `), Ray (`(SGLangEngine pid=12) `, with `, ip=...`
on other nodes), docker compose (`svc-1  | `), a cloud console export or a launcher that tags
lines with the process id (`[1234] `) no longer starts where SGLang's own lines start, so a
traceback's indentation, SGLang's `[time rank]` record prefix and an exception line are hidden.
`strip_prefixes` finds the one format that the log's lines carry (a majority of its non-empty
lines) and removes exactly that prefix from every line that has it, up to three layers (Ray
inside Kubernetes, compose inside a console export); every rule then reads SGLang's own lines.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_RFC3339 = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"
# name -> the prefix, as a pattern anchored at the line start; the separator after it is one
# character, so what follows (a traceback's indentation) stays as SGLang wrote it.
FORMATS: dict[str, re.Pattern[str]] = {
    "cri": re.compile(rf"^{_RFC3339} (?:stdout|stderr) [FP](?: |$)"),
    "rfc3339": re.compile(rf"^{_RFC3339}(?: |\t|$)"),
    "bracketed": re.compile(rf"^\[{_RFC3339}\](?: |$)"),  # CI runners' (`[2025-11-06T02:10:00.702Z] `)
    "console": re.compile(rf"^\d{{10,13}}\t{_RFC3339}\t"),
    "cloud": re.compile(
        rf"^(?:DEFAULT|DEBUG|INFO|NOTICE|WARNING|ERROR|CRITICAL|ALERT|EMERGENCY) {_RFC3339}"
        r" (?:\[severity: \w+\] )?"
    ),
    "ray": re.compile(r"^(?:\x1b\[\d+m)?\((?:[\w:.-]+ )?pid=\d+(?:, ip=[\d.]+)?\)(?:\x1b\[0m)?(?: |$)"),
    "compose": re.compile(r"^[\w][\w.-]*\s+\| ?"),
    "pid": re.compile(r"^\[\d+\] "),
}
_LAYERS = 3


def detect_prefix(lines: Sequence[str]) -> str | None:
    """The collector format a majority of the non-empty lines carry, if any (the most common wins)."""
    filled = [line for line in lines if line.strip()]
    if not filled:
        return None
    counts = {name: sum(1 for line in filled if p.match(line)) for name, p in FORMATS.items()}
    name, count = max(counts.items(), key=lambda kv: kv[1])
    return name if count * 2 > len(filled) else None


def strip_prefixes(lines: Sequence[str]) -> list[str]:
    """The lines without their collector's prefix (layer by layer), as SGLang wrote them."""
    out = list(lines)
    for _ in range(_LAYERS):
        name = detect_prefix(out)
        if name is None:
            break
        pattern = FORMATS[name]
        out = [pattern.sub("", line, count=1) for line in out]
    return out


def apply_prefix(name: str, line: str, n: int = 0) -> str:
    """`line` as the collector `name` would have written it (for tests and the accuracy report)."""
    stamp = f"2026-05-01T10:{n // 60 % 60:02d}:{n % 60:02d}.{n:06d}Z"
    return {
        "cri": f"{stamp} stderr F {line}",
        "rfc3339": f"{stamp} {line}",
        "bracketed": f"[{stamp}] {line}",
        "console": f"1777629600{n % 1000:03d}\t{stamp}\t{line}",
        "cloud": f"ERROR {stamp} [severity: ERROR] {line}",
        "ray": f"(SGLangEngine pid=2776955) {line}",
        "compose": f"sglang-1  | {line}",
        "pid": f"[383554] {line}",
    }[name]
