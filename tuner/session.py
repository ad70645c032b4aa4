"""What the trials of a study share, and how one launch is rendered.

`trial_session` builds the engine, the GPU probe and the live-server records once (stopping
servers left by a killed run first) and hands out a `TrialContext`; `render_launch` turns a
configuration into the exact argv for the engine's SGLang release, with the key that names
the effective launch (two configurations with one key start the same server).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from tuner.bench.runner import benchmark
from tuner.bench.types import BenchResult
from tuner.config import CudaGraph, Failure, LaunchSpec, Outcome, Phase, ServerFacts, TrialConfig
from tuner.engine import Engine, engine_for, probe_for
from tuner.errors import ConfigError, FlagError
from tuner.gate.checks import GateResult
from tuner.gate.reference import ReferenceBook
from tuner.gate.run import gate
from tuner.gpu.sampler import GpuProbe
from tuner.host import free_port, port_is_free
from tuner.sglang.flags import render_flags, validate_flags
from tuner.sglang.orphans import LiveServers
from tuner.space.loader import SearchSpace

log = logging.getLogger(__name__)

PORT_PICKS = 4  # fresh ports tried when the picked one was taken before the launch

PhaseCallback = Callable[[Phase, str], None]
GateStage = Callable[..., GateResult]
BenchStage = Callable[..., BenchResult]


@dataclass(frozen=True, kw_only=True, slots=True)
class TrialContext:
    """What every trial of a study shares: the space, the engine, the GPU probe, where logs go.

    `gate` and `bench` are the measuring stages (the HTTP gate and the benchmark client by
    default); a test or another caller hands in its own.
    """

    space: SearchSpace
    engine: Engine
    probe: GpuProbe
    log_dir: Path
    progress: bool = False
    on_phase: PhaseCallback | None = None
    live: LiveServers | None = None
    gate: GateStage = gate
    bench: BenchStage = benchmark


@contextlib.contextmanager
def trial_session(
    space: SearchSpace,
    *,
    progress: bool = False,
    state_root: Path | None = None,
    study: str | None = None,
    record_reference: bool = False,
) -> Iterator[TrialContext]:
    """Everything trials need, set up once: engine, GPU probe, live-server records; orphans stopped first.

    `run`, `trial` and `confirm` all go through here, so a server left by a killed run is stopped
    before any of them launches, and the probe is closed however the block ends. The gate's
    reference is the one of `study` (default: the space's study); only the study's own run records
    it (`record_reference`), so a one-off trial never becomes a study's truth.
    """
    run_dir = Path(space.log_dir)
    check_gpu_indices(space)
    engine = engine_for(space, state_root=state_root or run_dir)
    probe = probe_for(engine)
    live: LiveServers | None = None
    try:
        live = LiveServers(run_dir)
        killed = live.stop_orphans()
        if killed:
            log.warning("stopped %d process(es) of servers left by a killed run", len(killed))
        gate_stage: GateStage = gate
        if space.gate.reference.enabled:  # the study's reference answers travel with its gate stage
            book = ReferenceBook(
                space.gate.reference, run_dir, study=study or space.study_name, record=record_reference
            )
            gate_stage = functools.partial(gate, reference=book)
        yield TrialContext(
            space=space,
            engine=engine,
            probe=probe,
            log_dir=run_dir / "logs",
            progress=progress,
            live=live,
            gate=gate_stage,
        )
    finally:
        if live is not None:  # a worker that died beside this one after its last launch left a server
            with contextlib.suppress(Exception):
                live.stop_orphans(running=True)
        with contextlib.suppress(Exception):
            probe.close()


def check_gpu_indices(space: SearchSpace) -> None:
    """ConfigError (one line, before anything is written) when a GPU the space asks for is not on this
    node, as the engine's GPU probe sees it (NVML, or the simulator's scenario) from a scratch folder."""
    wanted = space.gpus
    if not wanted:
        return
    with tempfile.TemporaryDirectory(prefix="tuner-gpus-") as scratch:
        probe = probe_for(engine_for(space, state_root=Path(scratch)))
        try:
            present = sorted(d.index for d in probe.devices())
        finally:
            probe.close()
    missing = [g for g in wanted if g not in present]
    if missing:
        have = ", ".join(map(str, present)) or "none"
        raise ConfigError(
            f"gpus: GPU {', '.join(map(str, missing))} is not on this node (its GPUs: {have}); "
            "expected --gpus or the space's gpus: among them"
        )


def render_launch(
    config: TrialConfig, space: SearchSpace, engine: Engine, *, port: int, log_path: Path
) -> LaunchSpec:
    """The exact launch for `config` on the engine's SGLang version; FlagError if it would be rejected.

    Its `key` names the effective launch (flags without host and port, environment, release):
    two configurations with the same key start the same server.
    """
    flags = render_flags(config, engine.table, fixed=dict(space.fixed_flags), host=space.host, port=port)
    validate_flags(flags, engine.table)
    env = (*engine.env, *space.env)
    return LaunchSpec(
        argv=(*engine.launcher, *flags),
        env=env,
        host=space.host,
        port=port,
        gpus=space.gpus,
        log_path=log_path,
        sglang_version=engine.sglang_version,
        timeouts=space.timeouts,
        key=launch_key(flags, space.env, engine.sglang_version),
    )


def launch_key(flags: Sequence[str], env: Sequence[tuple[str, str]], version: str) -> str:
    """Hash of the effective launch: flags without --host/--port, the space's environment, the release."""
    kept: list[str] = []
    skip = False
    for part in flags:
        if skip:
            skip = False
            continue
        if part in ("--host", "--port"):
            skip = True
            continue
        kept.append(part)
    payload = {"argv": kept, "env": sorted(env), "version": version}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def prepare_launch(config: TrialConfig, ctx: TrialContext, *, label: str) -> LaunchSpec | Failure:
    """The launch of one trial on a free port, or the BAD_FLAG failure the release's flags give."""
    space = ctx.space
    log_path = ctx.log_dir / f"{label}.log"
    try:
        return render_launch(config, space, ctx.engine, port=free_port(space.host), log_path=log_path)
    except FlagError as exc:
        return Failure(outcome=Outcome.BAD_FLAG, phase=Phase.RENDER, message=str(exc))


def on_a_free_port(spec: LaunchSpec, config: TrialConfig, ctx: TrialContext) -> LaunchSpec:
    """`spec`, or the same launch on a fresh port when another process took its port since the pick.

    The port is the tuner's own pick (what the OS hands out for port 0), so a parallel worker or
    another program on the host can bind it between the pick and the launch. The launch key leaves
    the port out: the trial is the same. After PORT_PICKS taken ports the last one is returned and
    the launch names its holder.
    """
    for _ in range(PORT_PICKS):
        if port_is_free(spec.host, spec.port):
            return spec
        port = free_port(spec.host)
        log.info("port %s:%d was taken since it was picked; launching on %d", spec.host, spec.port, port)
        spec = render_launch(config, ctx.space, ctx.engine, port=port, log_path=spec.log_path)
    return spec


def key_of(prepared: LaunchSpec | Failure) -> str:
    """The launch key of a prepared launch; for a rejected one, a key of the rejection."""
    if isinstance(prepared, LaunchSpec):
        return prepared.key
    return hashlib.sha256(json.dumps({"invalid": prepared.message}).encode()).hexdigest()[:16]


def effective_config(config: TrialConfig, facts: ServerFacts) -> TrialConfig:
    """The configuration SGLang reports it ran: `config` with the decode CUDA graphs it resolved.

    SGLang turns graphs off on its own for some launches (torch_native or flex attention) and caps
    the capture list (by max running requests); what it ran is what a measurement is of, so that is
    what is stored, keyed and learned from. Knobs the server does not report stay as asked.
    """
    asked = config.cuda_graph
    if asked is not None and not asked.enabled:
        return config
    if facts.cuda_graph is False:
        return replace(config, cuda_graph=CudaGraph(enabled=False))
    sizes = facts.captured_bs
    if asked is None or not facts.cuda_graph or not sizes or len(sizes) < 2:
        return config
    if asked.bs is not None:
        return config if tuple(sorted(asked.bs)) == sizes else replace(config, cuda_graph=CudaGraph(bs=sizes))
    if asked.max_bs is not None and max(sizes) < asked.max_bs:
        return replace(config, cuda_graph=CudaGraph(max_bs=max(sizes)))
    return config


def graph_text(graph: CudaGraph | None) -> str:
    """A CUDA-graph setting in a few characters: default, off, max:N, or the list."""
    if graph is None:
        return "default"
    if not graph.enabled:
        return "off"
    return f"bs:{list(graph.bs)}" if graph.bs else f"max:{graph.max_bs}"


def effective_note(config: TrialConfig, effective: TrialConfig) -> str | None:
    """One line when SGLang ran something else than asked; None when it ran the request."""
    if effective == config:
        return None
    return (
        f"effective launch differs from the request: cuda_graph asked {graph_text(config.cuda_graph)}, "
        f"SGLang ran {graph_text(effective.cuda_graph)} (stored, keyed and learned as what ran)"
    )
