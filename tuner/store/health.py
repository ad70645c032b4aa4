"""Is the study's database still the one it opened? A lost store must stop the run, loudly.

SQLite keeps writing to a file that was deleted or replaced under it (the open descriptor
still points at the old inode), so a study would go on "recording" into nothing and report
success. `StoreWatch` remembers the file's identity when the run opens it and checks, at the
study's safe points, that the path still names that file and that it can still be written.
Servers (PostgreSQL, MySQL) are watched by their own errors.
"""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy.engine import make_url

from tuner.errors import StoreLostError


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL; None for in-memory SQLite and for database servers."""
    try:
        parsed = make_url(url)
    except Exception:
        return None
    if parsed.get_backend_name() != "sqlite":
        return None
    path = parsed.database
    if not path or path == ":memory:" or "mode=memory" in path or path.startswith("file:"):
        return None
    return Path(path)


class StoreWatch:
    """The identity of the study's SQLite file, checked at safe points."""

    def __init__(self, url: str) -> None:
        self.path = sqlite_path(url)
        self._identity = self._stat()

    def _stat(self) -> tuple[int, int] | None:
        if self.path is None:
            return None
        try:
            st = self.path.stat()
        except OSError:
            return None
        return st.st_dev, st.st_ino

    def check(self) -> None:
        """Raise StoreLostError if the file vanished, was replaced, or cannot be written any more."""
        if self.path is None:
            return
        now = self._stat()
        if now is None:
            raise self.lost("was deleted while the study ran")
        if self._identity is None:
            self._identity = now  # created after the watch started (first open)
        elif now != self._identity:
            raise self.lost("was replaced by another file while the study ran")
        if not os.access(self.path, os.W_OK):
            raise self.lost("can no longer be written")

    def lost(self, what: str) -> StoreLostError:
        return StoreLostError(
            f"experiments database {self.path} {what}: results would have nowhere durable to go, so the "
            f"run stopped (restore the file and run the same command to resume)"
        )
