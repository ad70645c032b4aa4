"""Search spaces: a space file read into a SearchSpace, and its use with Optuna."""

from tuner.space.loader import SearchSpace, load_space
from tuner.space.sampling import (
    config_from_params,
    enumerate_choices,
    forbidden_reason,
    parse_set_overrides,
    suggest,
)

__all__ = [
    "SearchSpace",
    "config_from_params",
    "enumerate_choices",
    "forbidden_reason",
    "load_space",
    "parse_set_overrides",
    "suggest",
]
