"""The one place that turns a space's `engine:` into a launcher, an option table and a GPU probe.

Everything downstream gets an `Engine` value and a `GpuProbe` and never asks
which server it talks to: real SGLang (`python -m sglang.launch_server`,
NVML) or the stand-in (`python -m tuner.sim`, GPU state published in files, or real
device memory seen by NVML in its GPU-backed mode).
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tuner.errors import ConfigError
from tuner.gpu.sampler import FileGpuProbe, GpuProbe, NvmlProbe
from tuner.gpu.statefile import STATE_ENV
from tuner.private import private_dir
from tuner.sglang.introspect import detect_sglang_version, option_table_for
from tuner.sglang.options import OptionTable

if TYPE_CHECKING:
    from tuner.space.loader import SearchSpace

log = logging.getLogger(__name__)

SIM_STATE_ENV = STATE_ENV  # the state directory handed to the simulator (tuner.gpu.statefile)
DEFAULT_SIM_VERSION = "0.5.9"


@dataclass(frozen=True, kw_only=True, slots=True)
class Engine:
    """How servers of a study are launched and which SGLang release they speak."""

    kind: str  # "sglang" | "sim"
    launcher: tuple[str, ...]  # argv prefix; the rendered SGLang flags follow
    env: tuple[tuple[str, str], ...]
    sglang_version: str
    table: OptionTable
    gpu_state_dir: Path | None = None
    # argv that publishes the GPU list into gpu_state_dir before any server ran (the stand-in's
    # scenario GPUs), so GPU indices are checked before the first launch
    publish_gpus: tuple[str, ...] = ()


def engine_for(space: SearchSpace, *, state_root: Path | None, sglang_version: str | None = None) -> Engine:
    """Resolve the space's engine: launcher argv, environment, target version and its option table.

    `state_root` is where the stand-in publishes GPU state (None: nothing will be launched);
    `sglang_version` overrides the space's target release (for `validate`).
    """
    kind = space.engine.kind
    resolve = _ENGINES.get(kind)
    if resolve is None:
        raise ConfigError(f"engine: unknown kind {kind!r} (expected sglang or sim) in {space.path}")
    return resolve(space, state_root, sglang_version)


def _sim_engine(space: SearchSpace, state_root: Path | None, sglang_version: str | None) -> Engine:
    """The simulator: its module with the scenario, the release it imitates, GPU state (unless GPU-backed)."""
    spec = space.engine
    if spec.scenario is None:
        raise ConfigError(f"engine: a sim engine needs a scenario in {space.path}")
    version = sglang_version or space.sglang_version
    if version == "auto":
        version = spec.sim_sglang_version or DEFAULT_SIM_VERSION
    state_dir = None
    env: tuple[tuple[str, str], ...] = ()
    if state_root is not None and not spec.gpu_backed:  # GPU-backed: real memory, seen by NVML
        state_dir = (state_root / "gpu-state").resolve()
        private_dir(state_dir)  # the run folder and its parts: owner-only when the tuner makes them
        env = ((SIM_STATE_ENV, str(state_dir)),)
    launcher = (
        sys.executable,
        "-m",
        spec.module,
        "--sim-scenario",
        str(spec.scenario),
        "--sim-sglang-version",
        version,
        *(("--sim-gpu-backed",) if spec.gpu_backed else ()),
        *(part for item in spec.sim_inject for part in ("--sim-inject", item)),
    )
    table = option_table_for(version, None)
    return Engine(
        kind="sim",
        launcher=launcher,
        env=env,
        sglang_version=version,
        table=table,
        gpu_state_dir=state_dir,
        publish_gpus=(*launcher, "--sim-publish-gpus") if state_dir is not None else (),
    )


def _sglang_engine(space: SearchSpace, state_root: Path | None, sglang_version: str | None) -> Engine:
    """Real SGLang from `engine.python`: its installed release checked against the space's target."""
    spec = space.engine
    python = spec.python or sys.executable
    if shutil.which(python) is None:
        raise ConfigError(
            f"engine.python: {python} is not an executable interpreter (expected the Python that has "
            f"SGLang installed) in {space.path}"
        )
    version = sglang_version or space.sglang_version
    launching = state_root is not None
    installed = detect_sglang_version(python) if (launching or version == "auto") else None
    if (launching or version == "auto") and installed is None:
        raise ConfigError(
            f"SGLang is not installed for {python} (pip install 'sglang-tuner[sglang]', or set "
            f"engine.python to the interpreter that has it) in {space.path}"
        )
    if version == "auto":
        assert installed is not None
        version = installed
    elif launching and installed != version:
        raise ConfigError(
            f"sglang_version: the space targets SGLang {version} but {python} has SGLang {installed}; "
            f"set sglang_version: auto or {installed} in {space.path}"
        )
    table = option_table_for(version, python)
    return Engine(
        kind="sglang",
        launcher=(python, "-m", spec.module),
        env=(),
        sglang_version=version,
        table=table,
    )



def probe_for(engine: Engine) -> GpuProbe:
    """The GPU probe that sees the engine's GPUs: state files for the stand-in, else NVML.

    NVML also for the stand-in in GPU-backed mode (`engine: {kind: sim, gpu_backed: true}`),
    which holds real device memory and publishes no state files.
    """
    if engine.gpu_state_dir is not None:
        publish = functools.partial(_publish_gpus, engine) if engine.publish_gpus else None
        return FileGpuProbe(engine.gpu_state_dir, publish=publish)
    return NvmlProbe()


def _publish_gpus(engine: Engine) -> None:
    """Run the engine's GPU-publishing command once (a few hundred ms); a failure leaves the list empty."""
    env = {**os.environ, **dict(engine.env)}
    try:
        done = subprocess.run(
            list(engine.publish_gpus), env=env, capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("could not list the engine's GPUs: %s", exc)
        return
    if done.returncode != 0:
        log.warning("could not list the engine's GPUs: %s", (done.stderr.strip().splitlines() or ["?"])[-1])


_ENGINES: dict[str, Callable[[SearchSpace, Path | None, str | None], Engine]] = {
    "sim": _sim_engine,
    "sglang": _sglang_engine,
}
