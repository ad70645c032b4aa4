"""The simulator's GPU state files, defined once for both sides: the writer (tuner.sim) and the reader.

    $TUNER_SIM_STATE_DIR/gpus.json        {"gpus": [{"index", "uuid", "name", "compute_capability",
                                            "total_mib", "driver"}, ...]}
    $TUNER_SIM_STATE_DIR/procs/<pid>.json {"pid": <pid>, "used_mib": {"<physical index>": MiB, ...}}

Files are replaced atomically (a temporary file, then a rename). A process removes its own
file on a clean exit; a killed one leaves it (readers ignore files of dead pids, as NVML
forgets them). Only the standard library here: the simulator imports this module and must
stay apart from the rest of the product.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

STATE_ENV = "TUNER_SIM_STATE_DIR"
GPUS_FILE = "gpus.json"
PROCS_DIR = "procs"


@dataclass(frozen=True, kw_only=True, slots=True)
class StateGpu:
    """One GPU as `gpus.json` lists it."""

    index: int
    uuid: str
    name: str
    compute_capability: str
    total_mib: int
    driver: str = "sim"


def state_dir(environ: Mapping[str, str] | None = None) -> Path | None:
    """The state directory named by the environment, or None when the files are off."""
    value = (environ if environ is not None else os.environ).get(STATE_ENV)
    return Path(value) if value else None


def write_json_atomic(path: Path, obj: object) -> None:
    """Write `obj` as JSON to `path` so that no reader ever sees half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # a random O_EXCL name (mkstemp): no link planted at a guessable name is followed
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(obj))
            os.fchmod(fh.fileno(), 0o644)  # the sim's children and the tuner read it; nothing secret
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_gpus(directory: Path, gpus: Sequence[StateGpu]) -> None:
    """Publish the machine's GPUs."""
    doc = {
        "gpus": [
            {
                "index": g.index,
                "uuid": g.uuid,
                "name": g.name,
                "compute_capability": g.compute_capability,
                "total_mib": g.total_mib,
                "driver": g.driver,
            }
            for g in gpus
        ]
    }
    write_json_atomic(directory / GPUS_FILE, doc)


def read_gpus(directory: Path) -> tuple[StateGpu, ...]:
    """The published GPUs; FileNotFoundError before any, ValueError/KeyError/TypeError when malformed."""
    data = json.loads((directory / GPUS_FILE).read_text())
    return tuple(
        StateGpu(
            index=int(g["index"]),
            uuid=str(g["uuid"]),
            name=str(g["name"]),
            compute_capability=str(g["compute_capability"]),
            total_mib=int(g["total_mib"]),
            driver=str(g.get("driver", "sim")),
        )
        for g in data["gpus"]
    )


def proc_path(directory: Path, pid: int) -> Path:
    """Where process `pid` publishes what it holds."""
    return directory / PROCS_DIR / f"{pid}.json"


def write_proc(directory: Path, gpus: Sequence[int], used_mib: float, *, pid: int | None = None) -> None:
    """Record that process `pid` (default: this one) holds `used_mib` on each of `gpus`."""
    pid = os.getpid() if pid is None else pid
    doc = {"pid": pid, "used_mib": {str(g): int(round(used_mib)) for g in gpus}}
    write_json_atomic(proc_path(directory, pid), doc)


def remove_proc(directory: Path, *, pid: int | None = None) -> None:
    """Forget what process `pid` (default: this one) held."""
    proc_path(directory, os.getpid() if pid is None else pid).unlink(missing_ok=True)


def proc_files(directory: Path) -> Iterator[tuple[int, Path]]:
    """(pid, file) of every published process, in name order; nothing when the directory is missing."""
    try:
        paths = sorted((directory / PROCS_DIR).glob("*.json"))
    except OSError:
        return
    for path in paths:
        try:
            yield int(path.stem), path
        except ValueError:
            continue


def read_proc(path: Path) -> dict[int, int]:
    """MiB per GPU index of one process file; FileNotFoundError, or ValueError & co. when half written."""
    data = json.loads(path.read_text())
    return {int(k): int(v) for k, v in data["used_mib"].items()}
