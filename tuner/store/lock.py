"""A lock every worker of a study takes, wherever it runs: a PostgreSQL advisory lock.

Workers on one host can share a lock file (tuner.study.storage); workers on several
nodes share only the database. `AdvisoryLock` holds a transaction-level advisory lock
on a key derived from a name (the study's) for the length of a block, on a connection
of its own. The server drops it with the transaction: when the block ends, when the
worker's process dies, and when the worker's node dies (the session sets TCP keepalives
so the server notices within about a minute, and ends a transaction left idle longer
than `IDLE_LIMIT_S`, e.g. by a frozen process).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from tuner.errors import StoreError
from tuner.store.connect import mask_url, ping_idle_connections

KEEPALIVE_IDLE_S = 30  # silence before the server probes the worker's connection
KEEPALIVE_INTERVAL_S = 10
KEEPALIVE_COUNT = 3  # unanswered probes before the server drops it (and the lock): ~60 s in all
IDLE_LIMIT_S = 300  # the lock is held around bookkeeping of a second or less, never a trial


def advisory_key(name: str) -> int:
    """A signed 64-bit key for `name` (PostgreSQL's bigint), the same in every process and release."""
    digest = hashlib.blake2b(f"tuner:{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def supports_advisory_lock(url: str) -> bool:
    """True for a PostgreSQL URL."""
    return make_url(url).get_backend_name() == "postgresql"


class AdvisoryLock:
    """An exclusive lock across hosts on one name, held by `with lock.hold(): ...`."""

    def __init__(self, url: str, name: str) -> None:
        self.name = name
        self.key = advisory_key(name)
        self._shown = mask_url(url)
        options = (
            f"-c tcp_keepalives_idle={KEEPALIVE_IDLE_S} -c tcp_keepalives_interval={KEEPALIVE_INTERVAL_S} "
            f"-c tcp_keepalives_count={KEEPALIVE_COUNT} "
            f"-c idle_in_transaction_session_timeout={IDLE_LIMIT_S * 1000}"
        )
        try:
            self._engine = sa.create_engine(
                make_url(url),
                pool_size=1,
                max_overflow=0,
                connect_args={"options": options},
            )
        except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError, ImportError) as exc:
            raise StoreError(f"experiments database {self._shown}: cannot use this URL: {exc}") from exc
        ping_idle_connections(self._engine)

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """Wait for the lock, hold it through the block, release it as the transaction ends."""
        try:
            conn = self._engine.connect()
        except sa.exc.SQLAlchemyError as exc:
            raise StoreError(f"experiments database {self._shown}: cannot connect: {exc}") from exc
        try:
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": self.key})
        except sa.exc.SQLAlchemyError as exc:
            conn.close()
            raise StoreError(
                f"experiments database {self._shown}: cannot take the lock of {self.name!r}: {exc}"
            ) from exc
        try:
            yield
        finally:
            with contextlib.suppress(sa.exc.SQLAlchemyError):
                conn.rollback()  # ends the transaction, which releases the lock
            conn.close()

    def close(self) -> None:
        """Release the lock's connection."""
        self._engine.dispose()
