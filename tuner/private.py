"""Owner-only files and folders, and files written whole.

The run directory the tuner creates is owner-only (0700) and so is what it writes there (0600):
server logs, live-server records and artifacts can hold what a server printed about its launch;
even redacted, they are nobody else's business on a shared machine.

Only what the tuner itself created has its mode set: a folder that existed already (a shared 1777
folder given as `log_dir`, the current directory) keeps its mode, or other users would lose it.

Every file is written whole (`atomic_open`): to a temporary file in the target's own folder, created
with O_EXCL under a random name (so no planted symlink is followed and no other writer shares it),
then renamed over the target. A crash, a signal or a full disk never leaves a partial file under
the real name, and a symlink planted at the target is replaced, never written through.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, TextIO

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: Path) -> Path:
    """Create `path` (and missing parents) owner-only; return it. Folders that existed keep their mode."""
    missing: list[Path] = []
    cur = path
    while not cur.exists() and cur != cur.parent:
        missing.append(cur)
        cur = cur.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=DIR_MODE)
        except FileExistsError:
            continue  # made meanwhile by someone else: not ours to change
        with contextlib.suppress(OSError):
            folder.chmod(DIR_MODE)  # mkdir's mode went through the umask
    if not path.is_dir():
        raise NotADirectoryError(20, "not a folder", str(path))
    return path


def open_private(path: Path, *, append: bool = True) -> TextIO:
    """Open a text file for writing, line-buffered; created owner-only. An existing file keeps its mode;
    anything but a regular file (a FIFO, a device) is refused rather than opened."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | (os.O_APPEND if append else os.O_TRUNC)
    try:
        fd = os.open(path, flags | os.O_EXCL, FILE_MODE)
        created = True
    except FileExistsError:
        fd = os.open(path, flags, FILE_MODE)
        created = False
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(22, "not a regular file", str(path))
        if created:
            os.fchmod(fd, FILE_MODE)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "a" if append else "w", encoding="utf-8", buffering=1)


def _public_mode() -> int:
    """0666 less the process's umask: the mode an ordinary new file gets."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


@contextlib.contextmanager
def atomic_open(path: Path, *, binary: bool = False, mode: int | None = None) -> Iterator[IO[Any]]:
    """A file object whose content replaces `path` when the block ends without error (see the module).

    `mode` is the file's mode (default: an ordinary new file's, 0666 less the umask); on any error
    (or a stop request raised in the block) the temporary file is removed and `path` is untouched.
    """
    folder = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")  # O_EXCL, random, 0600
    try:
        fh: IO[Any] = os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8")
        with fh:
            yield fh
            fh.flush()
            os.fchmod(fh.fileno(), _public_mode() if mode is None else mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_private(path: Path, text: str) -> None:
    """Write a whole file atomically (a random O_EXCL temporary file, then rename), owner-only."""
    with atomic_open(path, mode=FILE_MODE) as fh:
        fh.write(text)


def make_private(path: Path) -> None:
    """Make a file the tuner just wrote owner-only (written by code that does not ask, e.g. a library)."""
    with contextlib.suppress(OSError):
        path.chmod(FILE_MODE)


def read_regular(path: Path, max_bytes: int) -> bytes:
    """The bytes of a regular file of at most `max_bytes`; OSError otherwise (with a plain strerror).

    Opened without blocking, so a FIFO nobody writes to, a device (/dev/zero) or a folder is refused
    at once rather than waited on or read forever."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file"
            raise OSError(22, f"{kind} (a FIFO, a device or a socket is not read)", str(path))
        if info.st_size > max_bytes:
            raise OSError(27, f"larger than {max_bytes:,} bytes ({info.st_size:,})", str(path))
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(max_bytes + 1)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise OSError(27, f"larger than {max_bytes:,} bytes", str(path))
    return data
