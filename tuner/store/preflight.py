"""Before a database is opened: is it one the tuner may use? One line and exit 2 if not.

Opening a SQLite URL creates the file, and Optuna creates its tables in whatever database it is
given. So `--db` is checked first, without writing anything: the path must name a regular file
(or nothing, when the command may create the study) in a folder where files can be created;
an existing file must be a SQLite database; and a database must not hold tables of another
program — neither a table named like Optuna's or the tuner's with another shape (another
program's `studies` / `trials`), nor, in a SQLite file without any of ours, other tables.
"""

from __future__ import annotations

import contextlib
import sqlite3
import stat
import tempfile
from collections.abc import Mapping, Set
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from tuner.errors import ConfigError
from tuner.store.connect import mask_url
from tuner.store.health import sqlite_path

# Key columns of every table Optuna 5 (RDBStorage) and the tuner create; a table of that name
# without them belongs to another program.
OURS: Mapping[str, frozenset[str]] = {
    "studies": frozenset({"study_id", "study_name"}),
    "study_directions": frozenset({"study_id", "direction"}),
    "study_user_attributes": frozenset({"study_id", "key"}),
    "study_system_attributes": frozenset({"study_id", "key"}),
    "trials": frozenset({"trial_id", "number", "study_id", "state"}),
    "trial_user_attributes": frozenset({"trial_id", "key"}),
    "trial_system_attributes": frozenset({"trial_id", "key"}),
    "trial_params": frozenset({"trial_id", "param_name"}),
    "trial_values": frozenset({"trial_id", "objective"}),
    "trial_intermediate_values": frozenset({"trial_id", "step"}),
    "trial_heartbeats": frozenset({"trial_id", "heartbeat"}),
    "version_info": frozenset({"schema_version"}),
    "alembic_version": frozenset({"version_num"}),
    "tuner_schema": frozenset({"id", "version"}),
    "tuner_trials": frozenset({"id", "study", "trial_number", "config_hash"}),
    "tuner_requests": frozenset({"id", "trial_id"}),
}


def foreign_tables(tables: Mapping[str, Set[str]], *, strict: bool) -> list[str]:
    """Tables (name -> column names) that show the database belongs to another program.

    Always: a table named like one of ours without its key columns. `strict` (a SQLite file):
    also any other table when none of ours is there.
    """
    clash = [name for name, cols in tables.items() if name in OURS and not OURS[name] <= set(cols)]
    if clash:
        return sorted(clash)
    others = sorted(name for name in tables if name not in OURS and not name.startswith("sqlite_"))
    if strict and others and not any(name in OURS for name in tables):
        return others
    return []


def check_database(url: str, *, create: bool) -> None:
    """ConfigError (one line) unless `url` is a database this command may use; writes nothing."""
    _check_kind(url, create=create)
    path = sqlite_path(url)
    if path is None:
        return  # a server (checked when opened)
    try:
        info = path.stat()
    except (FileNotFoundError, NotADirectoryError):
        info = None
    except OSError as exc:
        raise ConfigError(f"--db {path}: cannot read it: {exc.strerror or exc}") from None
    if info is None:
        if not create:
            raise ConfigError(
                f"--db {path}: no experiments database there (run `python -m tuner run` to create one, "
                "or give the path of an existing one)"
            )
        _check_folder(path.parent)
        return
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"--db {path}: not a regular file (expected a SQLite database file)")
    if info.st_size == 0:
        return  # SQLite's own way of starting a new database
    # Never open the file itself: closing a descriptor of a database drops every POSIX lock this
    # process holds on it (SQLite's connections included), and another worker may then corrupt it.
    found = foreign_tables(_sqlite_tables(path), strict=True)
    if found:
        raise ConfigError(
            f"--db {path}: holds tables of another program ({', '.join(found[:6])}); "
            "use another file for the experiments database"
        )


def _check_kind(url: str, *, create: bool) -> None:
    """Refuse what cannot keep results: an unknown scheme, a driver that is not installed, a read-only
    SQLite database for a command that writes (in-memory ones are refused at the command line)."""
    shown = mask_url(url)
    try:
        parsed = make_url(url)
        dialect = parsed.get_dialect()
    except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError, ValueError):
        raise ConfigError(
            f"--db {shown}: not a database URL this tuner knows (expected a SQLite file path, "
            "sqlite:///FILE or postgresql://USER@HOST/DB)"
        ) from None
    if parsed.get_backend_name() != "sqlite":
        try:
            dialect.import_dbapi()
        except ImportError as exc:
            raise ConfigError(
                f"--db {shown}: the {parsed.drivername} driver is not installed ({exc.name or exc}); "
                "expected a SQLite file or postgresql:// (pip install 'sglang-tuner[postgres]')"
            ) from None
        return
    database = parsed.database or ""
    if create and (parsed.query.get("mode") == "ro" or "mode=ro" in database):
        raise ConfigError(
            f"--db {shown}: opened read-only (mode=ro), but this command records results; "
            "expected a writable database"
        )


def _check_folder(folder: Path) -> None:
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise ConfigError(f"--db: {folder} {what} (expected the folder of the database file)")
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise ConfigError(
            f"--db: cannot create files in {folder}: {exc.strerror or exc} (pick a writable folder)"
        ) from None


def _sqlite_tables(path: Path) -> dict[str, set[str]]:
    """Table name -> column names, read without writing (read-only, no WAL set-up)."""
    try:
        con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=60)
    except sqlite3.Error as exc:
        raise ConfigError(f"--db {path}: cannot open it: {exc}") from None
    try:
        names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {n: {r[1] for r in con.execute(f'PRAGMA table_info("{n}")')} for n in names}
    except sqlite3.DatabaseError as exc:
        if "not a database" in str(exc):
            raise ConfigError(
                f"--db {path}: not a SQLite database (expected an experiments database file)"
            ) from None
        raise ConfigError(f"--db {path}: not a readable SQLite database ({exc})") from None
    finally:
        with contextlib.suppress(sqlite3.Error):
            con.close()
