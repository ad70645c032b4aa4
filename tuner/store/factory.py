"""The one factory of result stores: from the database URL to the ResultStore behind it.

Every reader and writer (study runner, confirm, reports, CLI) takes a `StoreOpener`, by default
this one, instead of building SqlStore itself, so that a test hands in a FakeStore.
"""

from __future__ import annotations

from tuner.store.protocol import ResultStore


def open_store(url: str, *, create: bool = True) -> ResultStore:
    """The store at SQLAlchemy URL `url` (a SqlStore); `create=False`: the database must exist and be
    the tuner's. StoreError or ConfigError (one line, the URL masked) when it cannot be opened."""
    from tuner.store.sql import SqlStore

    return SqlStore(url, create=create)
