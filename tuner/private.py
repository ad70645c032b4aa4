"""Owner-only files and folders: the run directory (0700) and what the tuner writes in it (0600).

Server logs, live-server records and artifacts can hold what a server printed about its
launch; even redacted, they are nobody else's business on a shared machine.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TextIO

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: Path) -> Path:
    """Create `path` (and missing parents) and make it owner-only; return it."""
    path.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    with contextlib.suppress(OSError):  # a folder of another owner: leave it, writing will tell
        if path.stat().st_mode & 0o777 != DIR_MODE:
            path.chmod(DIR_MODE)
    return path


def open_private(path: Path, *, append: bool = True) -> TextIO:
    """Open a text file for writing, created owner-only (and made so if it existed), line-buffered."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
    fd = os.open(path, flags, FILE_MODE)
    with contextlib.suppress(OSError):
        os.fchmod(fd, FILE_MODE)
    return os.fdopen(fd, "a" if append else "w", encoding="utf-8", buffering=1)


def write_private(path: Path, text: str) -> None:
    """Write a whole file atomically (temporary file, then rename), owner-only."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open_private(tmp, append=False) as fh:
        fh.write(text)
    os.replace(tmp, path)


def make_private(path: Path) -> None:
    """Make an existing file owner-only (files written by code that does not ask, e.g. a library)."""
    with contextlib.suppress(OSError):
        path.chmod(FILE_MODE)
