"""The simulated GPU-memory contract read by the tuner's GPU probe.

    $TUNER_SIM_STATE_DIR/gpus.json        {"gpus": [{"index", "uuid", "name", "compute_capability",
                                            "total_mib", "driver": "sim"}, ...]}
    $TUNER_SIM_STATE_DIR/procs/<pid>.json {"pid": <pid>, "used_mib": {"<physical index>": MiB, ...}}

Files are replaced atomically. A process removes its own file on a clean exit;
a killed one leaves it (readers ignore files of dead pids, as NVML forgets them).
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

from tuner.sim.scenario import Scenario

ENV = "TUNER_SIM_STATE_DIR"
_NS = uuid.UUID("5d2f0c1e-6b7a-4c1e-9a55-7f1d2c3b4a59")


def state_dir(environ: dict[str, str] | None = None) -> Path | None:
    """The state directory from the environment, or None when the contract is off."""
    value = (environ if environ is not None else os.environ).get(ENV)
    return Path(value) if value else None


def write_json_atomic(path: Path, obj: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)


def gpu_uuid(scenario: Scenario, index: int) -> str:
    """Stable uuid of GPU `index` of a scenario."""
    return f"GPU-{uuid.uuid5(_NS, f'{scenario.name}/{index}')}"


def gpus_document(scenario: Scenario) -> dict[str, Any]:
    g = scenario.gpus
    return {
        "gpus": [
            {
                "index": i,
                "uuid": gpu_uuid(scenario, i),
                "name": g.name,
                "compute_capability": g.compute_capability,
                "total_mib": g.total_mib,
                "driver": "sim",
            }
            for i in range(g.count)
        ]
    }


def write_gpus(directory: Path, scenario: Scenario) -> None:
    write_json_atomic(directory / "gpus.json", gpus_document(scenario))


def proc_path(directory: Path, pid: int) -> Path:
    return directory / "procs" / f"{pid}.json"


def write_proc(directory: Path, gpus: tuple[int, ...], used_mib: float) -> None:
    """Record that this process holds `used_mib` on each of `gpus`."""
    pid = os.getpid()
    write_json_atomic(
        proc_path(directory, pid), {"pid": pid, "used_mib": {str(g): int(round(used_mib)) for g in gpus}}
    )


def remove_proc(directory: Path) -> None:
    proc_path(directory, os.getpid()).unlink(missing_ok=True)
