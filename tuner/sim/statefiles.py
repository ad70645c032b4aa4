"""The simulator's side of the GPU state files (format and env var: tuner.gpu.statefile).

The scenario's GPUs are published once per launch; each process holding simulated memory
publishes its own file and removes it on a clean exit.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from tuner.gpu.statefile import StateGpu, remove_proc, state_dir, write_gpus, write_proc
from tuner.sim.scenario import Scenario

__all__ = ["gpu_uuid", "publish_gpus", "remove_proc", "state_dir", "write_proc"]

_NS = uuid.UUID("5d2f0c1e-6b7a-4c1e-9a55-7f1d2c3b4a59")


def gpu_uuid(scenario: Scenario, index: int) -> str:
    """Stable uuid of GPU `index` of a scenario."""
    return f"GPU-{uuid.uuid5(_NS, f'{scenario.name}/{index}')}"


def scenario_gpus(scenario: Scenario) -> tuple[StateGpu, ...]:
    """The scenario's GPUs as the state file lists them."""
    g = scenario.gpus
    return tuple(
        StateGpu(
            index=i,
            uuid=gpu_uuid(scenario, i),
            name=g.name,
            compute_capability=g.compute_capability,
            total_mib=g.total_mib,
        )
        for i in range(g.count)
    )


def publish_gpus(directory: Path, scenario: Scenario) -> None:
    """Write the scenario's `gpus.json`."""
    write_gpus(directory, scenario_gpus(scenario))
