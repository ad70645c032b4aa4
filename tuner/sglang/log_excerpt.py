"""The few lines of a failed server's log that prove a verdict, and its one-line message."""

from __future__ import annotations

from collections.abc import Sequence

from tuner.sglang.log_blame import TRACEBACK_START

MAX_EXCERPT = 40


def one_line(text: str, limit: int = 300) -> str:
    """The text on one line, cut to `limit` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def excerpt(lines: Sequence[str], i: int) -> str:
    """The proving line with the traceback it ends (if any) and a few lines around it, at most 40."""
    start = max(i - 3, 0)
    for j in range(i, max(i - 500, -1), -1):
        if TRACEBACK_START.search(lines[j]):
            start = max(j - 1, 0)
            break
    end = min(i + 4, len(lines))
    window = list(lines[start:end])
    if len(window) > MAX_EXCERPT:
        keep_tail = MAX_EXCERPT - 6
        window = [
            *window[:5],
            f"... ({len(window) - MAX_EXCERPT + 1} lines left out) ...",
            *window[-keep_tail:],
        ]
    return "\n".join(window)


def exit_text(exit_code: int | None) -> str:
    """How the server ended, in words."""
    if exit_code is None:
        return "failed (still running)"
    if exit_code == -9:
        return (
            "exited with code -9 (SIGKILL: SGLang kills its own tree after a child fails, or the OOM killer)"
        )
    return f"exited with code {exit_code}"
