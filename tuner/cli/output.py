"""What the commands share: argument types and JSON output."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from tuner.config import MAX_GPU_INDEX
from tuner.errors import ConfigError
from tuner.space.source import parse_duration
from tuner.store.factory import open_store
from tuner.store.protocol import StoreOpener


def duration(text: str) -> float:
    """An argparse type: 90s, 30m, 8h -> seconds."""
    try:
        seconds = float(parse_duration(text))
    except (TypeError, ValueError) as exc:
        raise argparse.ArgumentTypeError(
            f"expected a duration such as 90s, 30m or 8h (got {text[:40]!r})"
        ) from exc
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"expected a duration > 0 such as 90s, 30m or 8h (got {text!r})")
    return seconds


def gpu_list(text: str) -> tuple[int, ...]:
    """An argparse type: 0,1,2,3 -> (0, 1, 2, 3)."""
    expected = f"expected GPU indices 0..{MAX_GPU_INDEX} such as 0,1,2,3 (got {text[:40]!r})"
    try:
        gpus = tuple(int(part) for part in text.split(","))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(expected) from exc
    if not gpus or any(not 0 <= g <= MAX_GPU_INDEX for g in gpus):
        raise argparse.ArgumentTypeError(expected)
    if len(set(gpus)) != len(gpus):
        raise argparse.ArgumentTypeError(f"each GPU once, please (got {text[:40]!r})")
    return gpus


MAX_COUNT = 1_000_000  # a count on the command line (trials, repeats, points) beyond which nothing is sane
MAX_REPEATS = 100  # relaunches of one configuration: each takes minutes on a real server
MAX_LOAD = 1_000_000.0  # requests/s or concurrent requests: far past any server


def bounded_int(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number in [low, high], refused with one line naming both ends."""

    def parse(text: str) -> int:
        expected = f"expected a whole number {low:,}..{high:,}"
        try:
            value = int(text.strip())
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{expected} (got {text[:40]!r})") from exc
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{expected} (got {text[:40]})")
        return value

    parse.__name__ = "whole number"
    return parse


def bounded_float(low: float, high: float) -> Callable[[str], float]:
    """An argparse type: a finite number in (low, high] (a load, a rate)."""

    def parse(text: str) -> float:
        expected = f"expected a number > {low:g} and ≤ {high:g}"
        try:
            value = float(text.strip())
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{expected} (got {text[:40]!r})") from exc
        if not (math.isfinite(value) and low < value <= high):
            raise argparse.ArgumentTypeError(f"{expected} (got {text[:40]})")
        return value

    parse.__name__ = "number"
    return parse


def positive_int(text: str) -> int:
    """An argparse type: a whole number 1..MAX_COUNT (a trial count, a number of repeats)."""
    return bounded_int(1, MAX_COUNT)(text)


def database_arg(text: str) -> str:
    """An argparse type for --db: refuses an in-memory SQLite database (every result would vanish)."""
    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(text) if "://" in text else None
    except Exception:  # noqa: BLE001 - not a URL: checked when opened
        parsed = None
    memory = (
        parsed is not None
        and parsed.get_backend_name() == "sqlite"
        and (
            parsed.database in (None, "", ":memory:")
            or "mode=memory" in (parsed.database or "")
            or ":memory:" in (parsed.database or "")  # file::memory:, file:x?mode=memory
            or parsed.query.get("mode") == "memory"
        )
    )
    if memory:
        raise argparse.ArgumentTypeError(
            f"an in-memory database keeps nothing once the command ends; expected a file path such as "
            f"experiments.db (got {mask_db(text)!r})"
        )
    if parsed is not None and parsed.get_backend_name() == "sqlite":
        unknown = sorted(set(parsed.query) - SQLITE_QUERY_ARGS)
        if unknown:
            raise argparse.ArgumentTypeError(
                f"unknown SQLite URL argument {unknown[0]!r}; "
                f"expected only {', '.join(sorted(SQLITE_QUERY_ARGS))}"
            )
    return text


# what SQLAlchemy's pysqlite dialect and SQLite's URI filenames take; anything else is a typo
SQLITE_QUERY_ARGS = frozenset(
    {
        "timeout",
        "isolation_level",
        "detect_types",
        "check_same_thread",
        "cached_statements",
        "uri",
        "mode",
        "cache",
        "nolock",
        "immutable",
        "vfs",
    }
)


def mask_db(text: str) -> str:
    """A --db value as it may be printed (its password hidden)."""
    from tuner.store.connect import mask_url

    return mask_url(text)


def study_name(text: str) -> str:
    """An argparse type: a study name (letters, digits, _ . -; it becomes a folder and a file's line)."""
    from tuner.names import name_problem

    problem = name_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(f"{problem} (got {text[:40]!r})")
    return text


MAX_SEED = 2**32 - 1  # numpy's and Optuna's samplers take seeds below 2**32


def seed(text: str) -> int:
    """An argparse type: a sampler seed 0..2**32-1."""
    expected = f"expected a whole number from 0 to {MAX_SEED} (got {text[:40]!r})"
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(expected) from exc
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(expected)
    return value


def result_json(result: object, secrets: Iterable[str]) -> str:
    """A trial's result as JSON with its launch's secrets hidden (argv, env and every echo of them)."""
    from tuner.secrets import redact_argv, redact_env, scrub_tree
    from tuner.store.codec import to_jsonable

    data = to_jsonable(result)
    launch = data.get("launch") if isinstance(data, dict) else None
    if isinstance(launch, dict):
        launch["argv"] = list(redact_argv(launch.get("argv") or ()))
        launch["env"] = redact_env(launch.get("env") or {})
    return json.dumps(scrub_tree(data, secrets, keep=schema_keys(result)), indent=2, sort_keys=False)


def schema_keys(value: object) -> frozenset[str]:
    """The field names of every dataclass in `value` (the tuner's own schema: `output_tokens_source`,
    a config's `key`), which name no credential; a field declared `repr=False` (how the tuner marks a
    secret field, as ServerAuth does) is left out. Keys of plain dicts (an env, params) are data."""
    import dataclasses

    found: set[str] = set()
    seen: set[int] = set()
    todo: list[object] = [value]
    while todo:
        item = todo.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if dataclasses.is_dataclass(item) and not isinstance(item, type):
            for f in dataclasses.fields(item):
                if f.repr:
                    found.add(f.name)
                todo.append(getattr(item, f.name, None))
        elif isinstance(item, dict):
            todo.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            todo.extend(item)
    return frozenset(found)


def json_text(value: object) -> str:
    """A result (dataclasses, enums, paths) as indented JSON."""
    from tuner.store.codec import to_jsonable

    return json.dumps(to_jsonable(value), indent=2, sort_keys=False)


@contextlib.contextmanager
def written(path: Path, what: str, *, binary: bool = False, mode: int | None = None) -> Iterator[IO[Any]]:
    """A file object whose content becomes `path` when the block ends without error.

    Written through `tuner.private.atomic_open` (an O_EXCL temporary file of random name in the
    target's folder, then a rename): a full disk, a signal or a killed process never leaves a
    partial file under the real name, and a symlink planted in a shared folder is never written
    through. Any OSError (a missing or read-only folder, a folder given where a file belongs)
    becomes one ConfigError line naming the path.
    """
    from tuner.private import atomic_open

    if path.is_dir():
        raise ConfigError(f"{what} {path}: is a folder; expected a file path")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_open(path, binary=binary, mode=mode) as fh:
            yield fh
    except OSError as exc:
        raise ConfigError(f"{what} {path}: cannot write: {exc.strerror or exc}") from None


def check_writable(path: Path, what: str) -> None:
    """ConfigError unless a file can be written at `path` later; checks without leaving anything."""
    if path.is_dir():
        raise ConfigError(f"{what} {path}: is a folder; expected a file path")
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise ConfigError(f"{what} {path}: cannot write: {exc.strerror or exc}") from None


def write_file(path: Path, text: str, what: str, *, mode: int | None = None) -> None:
    """Write `text` to `path` through a temporary file and a rename (see `written`)."""
    with written(path, what, mode=mode) as fh:
        fh.write(text)


def check_folder(path: Path, what: str) -> None:
    """ConfigError unless `path` is, or can be made, a folder: no part of it may be a file."""
    cur = path.absolute()
    for part in [cur, *cur.parents]:
        if part.exists() or part.is_symlink():
            if not part.is_dir():
                shown = f"{path} ({part} is a file)" if part != cur else str(path)
                raise ConfigError(f"{what} {shown}: is a file; expected a folder")
            return


def output_folder(path: Path, what: str) -> Path:
    """`path` as a folder to write files into (created); ConfigError when it cannot be one."""
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{what} {path}: is a file; expected a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{what} {path}: cannot create the folder: {exc.strerror or exc}") from None
    return path


def print_json(value: object) -> None:
    """Print a result (dataclasses, enums, paths) as indented JSON."""
    print(json_text(value))


FORMULA_LEADS = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet reads a cell starting so as a formula


def csv_cell(value: object) -> object:
    """A text cell a spreadsheet shows as text: one that starts like a formula (`=HYPERLINK(...)`,
    `+1`, `-2+3`, `@SUM`) gets a leading apostrophe (OWASP's CSV-injection advice); other values
    (numbers among them, negative ones too) are kept as they are."""
    if isinstance(value, str) and value.startswith(FORMULA_LEADS):
        return "'" + value
    return value


def csv_safe(frame: Any) -> Any:
    """A copy of a pandas DataFrame for CSV: every text cell and column name made safe (`csv_cell`)."""
    from pandas.api.types import is_numeric_dtype

    out = frame.copy()
    if not is_numeric_dtype(out.index.dtype):
        out.index = out.index.map(csv_cell)
    for column in list(out.columns):
        if not is_numeric_dtype(out[column].dtype):
            out[column] = out[column].map(csv_cell)
    out.columns = [csv_cell(c) for c in out.columns]
    return out


def release(text: str) -> str:
    """An argparse type: an SGLang release such as 0.5.9 or 0.5.3.post3 (nothing else reaches a table,
    a file name or a script)."""
    import re

    from tuner.sglang.knobs import VERSION_PATTERN

    if not re.fullmatch(VERSION_PATTERN, text.strip()):
        raise argparse.ArgumentTypeError(f"expected an SGLang release such as 0.5.9 (got {text[:40]!r})")
    return text.strip()


def server_url(text: str) -> str:
    """An argparse type: the http(s) URL of a server, such as http://127.0.0.1:30000."""
    import httpx

    expected = f"expected a server URL such as http://127.0.0.1:30000 (got {text[:60]!r})"
    try:
        url = httpx.URL(text.strip())
        port = url.port
    except (httpx.InvalidURL, ValueError, TypeError) as exc:
        raise argparse.ArgumentTypeError(expected) from exc
    if url.scheme not in ("http", "https") or not url.host or (port is not None and not 0 < port < 65536):
        raise argparse.ArgumentTypeError(expected)
    if url.userinfo or url.query:
        raise argparse.ArgumentTypeError(f"{expected}: no user, password or query (give --api-key)")
    return text.strip()


def stores_of(args: argparse.Namespace) -> StoreOpener:
    """How the command opens its result store: the opener `main` was handed (a test's FakeStore),
    else tuner.store.factory.open_store."""
    given = getattr(args, "stores", None)
    return given if given is not None else open_store
