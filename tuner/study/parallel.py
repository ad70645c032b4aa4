"""Parallel trials on one node: how many GPUs a trial takes, and the node cut into disjoint sets.

Each set is given to an ordinary worker (`run --gpus SET`) of the same study, so the budget,
the ask lock, the GPU checks before a launch and the release wait after it are the ones every
worker already has; what is decided here is only who gets which GPUs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tuner.engine import Engine
from tuner.errors import ConfigError, FlagError
from tuner.session import render_launch
from tuner.sglang.options import ArgvError, OptionTable, build_parser
from tuner.space.loader import SearchSpace, config_from_params, enumerate_choices


def gpus_per_launch(argv_flags: Sequence[str], table: OptionTable) -> int:
    """GPUs one launch occupies on this node: tp x pp x dp / nnodes.

    Data-parallel replicas each take tp x pp GPUs, except with DP attention, where the DP ranks
    share the tensor-parallel GPUs. Used to cut a node into disjoint GPU sets for parallel trials.
    """
    try:
        ns = vars(build_parser(table).parse_args(list(argv_flags)))
    except ArgvError:
        return 1
    tp = ns.get("tp_size", ns.get("tensor_parallel_size", 1)) or 1
    pp = ns.get("pp_size", ns.get("pipeline_parallel_size", 1)) or 1
    dp = ns.get("dp_size", ns.get("data_parallel_size", 1)) or 1
    if ns.get("enable_dp_attention"):
        dp = 1
    nodes = ns.get("nnodes", 1) or 1
    return max(1, -(-int(tp) * int(pp) * int(dp) // int(nodes)))


def gpus_per_trial(space: SearchSpace, engine: Engine) -> int:
    """The most GPUs any launch of the space takes (tp x pp x dp per node), over every choice it holds."""
    most = 1
    for params in enumerate_choices(space):
        try:
            spec = render_launch(
                config_from_params(space, params), space, engine, port=30000, log_path=Path("x.log")
            )
        except (FlagError, ConfigError):
            continue  # `validate` reports these; a launch that cannot render takes no GPUs
        most = max(most, gpus_per_launch(spec.argv[len(engine.launcher) :], engine.table))
    return most


def split_gpus(gpus: Sequence[int], per_set: int, sets: int) -> tuple[tuple[int, ...], ...]:
    """`sets` disjoint sets of `per_set` GPUs, in the order given: [0..7], 2, 4 -> (0,1) (2,3) (4,5) (6,7).

    Raises ConfigError when the node has too few GPUs; GPUs left over stay unused.
    """
    if sets < 1 or per_set < 1:
        raise ConfigError(
            f"--parallel: expected at least one set of at least one GPU (got {sets} x {per_set})"
        )
    if len(set(gpus)) != len(gpus):
        raise ConfigError(f"--parallel: duplicate GPU index in {list(gpus)}")
    if sets * per_set > len(gpus):
        raise ConfigError(
            f"--parallel {sets}: {sets} trials of {per_set} GPU(s) need {sets * per_set} GPUs "
            f"but the node offers {len(gpus)} ({', '.join(map(str, gpus)) or 'none'}); "
            "lower --parallel or give more GPUs with --gpus"
        )
    return tuple(tuple(gpus[i * per_set : (i + 1) * per_set]) for i in range(sets))
