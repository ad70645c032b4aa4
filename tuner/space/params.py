"""Search-space parameters: kinds, value encoding (CUDA graphs, backend pairs), conditions.

Every parameter value the sampler sees is a plain None/bool/int/float/str, so a
study's categorical choices are frozen and storable: a CUDA-graph setting is one
always-present categorical of strings ("off", "on", "max:64", "bs:1,2,4,8") and a
sparse-attention backend pair is one categorical of "prefill/decode" strings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Any

from tuner.knobs.cuda_graph import DESTS as _GRAPH_DESTS
from tuner.knobs.cuda_graph import batch_list, encode_cuda_graph
from tuner.knobs.protocol import Options
from tuner.knobs.registry import knob_of, knob_owning
from tuner.names import control_problem

PARAM_NAME = r"[A-Za-z][A-Za-z0-9_.-]*"
RESERVED_NAMES = frozenset({"reason"})


class ParamKind(str, Enum):
    """How a parameter is sampled."""

    FLOAT = "float"
    INT = "int"
    CATEGORICAL = "categorical"
    BOOL = "bool"
    BACKEND_PAIR = "backend_pair"
    CUDA_GRAPH = "cuda_graph"


class Target(str, Enum):
    """What a parameter sets: a knob object of tuner.knobs (Param.knob names its kind; the knob
    sets its TrialConfig fields or flags), or any other launch flag (Param.flag)."""

    KNOB = "knob"
    FLAG = "flag"


DISCRETE_KINDS = frozenset(
    {ParamKind.CATEGORICAL, ParamKind.BOOL, ParamKind.BACKEND_PAIR, ParamKind.CUDA_GRAPH}
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Condition:
    """`param` must currently hold one of `values` (encoded) for the owner to be suggested."""

    param: str
    values: tuple[Any, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class Param:
    """One searched knob: its kind, range or choices, target and condition."""

    name: str
    kind: ParamKind
    target: Target
    flag: str | None = None  # for Target.FLAG: the SGLang flag without dashes
    low: float | int | None = None
    high: float | int | None = None
    step: float | int | None = None
    log: bool = False
    choices: tuple[Any, ...] = ()  # encoded values for discrete kinds
    when: tuple[Condition, ...] = ()
    source: str = ""  # "file:line" of the definition
    knob: str | None = None  # for Target.KNOB: the knob's kind (tuner.knobs)

    @property
    def is_discrete(self) -> bool:
        return self.kind in DISCRETE_KINDS

    def describe(self) -> str:
        """The admissible values, for messages ("a number in [0.8, 0.95] step 0.01", "one of ...")."""
        if self.kind in (ParamKind.FLOAT, ParamKind.INT):
            noun = "an integer" if self.kind is ParamKind.INT else "a number"
            extra = f" step {self.step:g}" if self.step is not None else ""
            extra += " (log)" if self.log else ""
            return f"{noun} in [{self.low:g}, {self.high:g}]{extra}"
        return "one of " + ", ".join(show_choice(c) for c in self.choices)

    def contains(self, value: Any) -> bool:
        """True when `value` (already encoded) is admissible."""
        if self.kind in (ParamKind.FLOAT, ParamKind.INT):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return False
            if self.kind is ParamKind.INT and not isinstance(value, int):
                return False
            assert self.low is not None and self.high is not None
            tol = 1e-9 * max(1.0, abs(self.high))
            if value < self.low - tol or value > self.high + tol:
                return False
            if self.step is not None:
                k = (value - self.low) / self.step
                return abs(k - round(k)) < 1e-6
            return True
        return any(same_value(value, c) for c in self.choices)

    def ends(self) -> tuple[Any, ...]:
        """Representative values: every choice, or both ends of a range."""
        if self.is_discrete:
            return self.choices
        return (self.low, self.high)


def same_value(a: Any, b: Any) -> bool:
    """Equality that keeps bools apart from ints and tolerates float rounding."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, (int, float)) and isinstance(b, (int, float)):
            return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
        return False
    return type(a) is type(b) and a == b


def show_choice(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# --- ranges of fixed values (a CUDA-graph setting is read by its knob: tuner.knobs.cuda_graph) -------


# Parallelism sizes: a count of GPUs or nodes, so at least 1 (min_gpus multiplies them).
POSITIVE_DESTS = frozenset(
    {
        *("tp_size", "pp_size", "dp_size", "ep_size", "nnodes"),
        *("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "expert_parallel_size"),
    }
)
_BS_DESTS = frozenset(_GRAPH_DESTS["bs"])
_MAX_BS_DESTS = frozenset(_GRAPH_DESTS["max_bs"])


def fixed_value_problem(dest: str, value: object, options: Options) -> str | None:
    """Why a fixed flag's value is outside the range the same knob has as a param, or None.

    The option table checks types; this adds the tuner's own ranges: what the knob a plain param
    selects by this flag accepts (a memory fraction in (0, 1], a chunk of >= 1 tokens or -1, ...),
    CUDA-graph batch sizes ≥ 1 (ascending lists), parallel sizes ≥ 1.
    """
    knob = knob_owning(dest)
    if knob is not None and knob.flag is not None:
        return knob.check(value, options)
    try:
        if dest in _MAX_BS_DESTS and isinstance(value, int):
            encode_cuda_graph(value)
        elif dest in _BS_DESTS and isinstance(value, (list, tuple)):
            batch_list(list(value))
    except ValueError as exc:
        return f"expected {exc}"
    if dest in POSITIVE_DESTS and isinstance(value, int) and not isinstance(value, bool) and value < 1:
        return "expected a whole number ≥ 1"
    return None


# --- backend pairs (read by their knob objects: tuner.knobs) ----------------------------------------


def split_backend_pair(code: str) -> tuple[str, str]:
    prefill, decode = code.split("/")
    return prefill, decode


# --- value normalisation --------------------------------------------------------------------------


def encode_value(param: Param, raw: Any) -> Any:
    """A raw YAML value for `param` in the form the sampler stores; ValueError with what was expected."""
    if isinstance(raw, str) and control_problem(raw):
        raise ValueError("printable text (no control characters: it becomes part of a launch command)")
    if param.knob is not None and knob_of(param.knob).flag is None:  # else read as its kind
        return knob_of(param.knob).encode(raw)
    if param.kind is ParamKind.BOOL:
        if not isinstance(raw, bool):
            raise ValueError("true or false")
        return raw
    if param.kind is ParamKind.FLOAT:
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise ValueError("a number")
        return float(raw)
    if param.kind is ParamKind.INT:
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise ValueError("an integer")
        return raw
    if raw is not None and not isinstance(raw, (bool, int, float, str)):
        raise ValueError("null, a boolean, a number or a string")
    return raw


def parse_text(param: Param, text: str) -> Any:
    """A command-line value (`--set name=text`) for `param`, encoded; ValueError otherwise."""
    stripped = text.strip()
    if control_problem(stripped):
        raise ValueError("printable text (no control characters: it becomes part of a launch command)")
    if param.knob is not None and knob_of(param.knob).flag is None:
        return knob_of(param.knob).encode(stripped)
    if param.kind is ParamKind.BOOL:
        return _parse_bool(stripped)
    if param.kind is ParamKind.FLOAT:
        try:
            number = float(stripped)
        except ValueError:
            raise ValueError("a number") from None
        if not math.isfinite(number):
            raise ValueError("a finite number")
        return number
    if param.kind is ParamKind.INT:
        try:
            whole = int(stripped)
        except ValueError:
            raise ValueError("an integer") from None
        if not -(2**63) < whole < 2**63:
            raise ValueError("an integer with |n| < 2**63")
        return whole
    for choice in param.choices:  # categorical: match the text form of a choice
        if show_choice(choice) == stripped or (choice is None and stripped.lower() in ("none", "null", "~")):
            return choice
        if isinstance(choice, bool) and stripped.lower() in (
            ("true", "yes", "on", "1") if choice else ("false", "no", "off", "0")
        ):
            return choice
        if isinstance(choice, (int, float)) and not isinstance(choice, bool):
            try:
                if same_value(float(stripped), float(choice)):
                    return choice
            except ValueError:
                pass
    return stripped


def _parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("true", "yes", "on", "1"):
        return True
    if lowered in ("false", "no", "off", "0"):
        return False
    raise ValueError("true or false")


def clean_float(param: Param, value: float) -> float:
    """Round away the float noise of step arithmetic (0.8 + 5 * 0.01 = 0.8500000000000001)."""
    if param.step is not None:
        decimals = max(0, -math.floor(math.log10(param.step)) + 6) if param.step > 0 else 12
        return round(value, min(decimals, 12))
    return round(value, 12)


def condition_holds(param: Param, values: dict[str, Any]) -> bool:
    """True when every condition of `param` is met by the values chosen so far."""
    for cond in param.when:
        if cond.param not in values:
            return False
        if not any(same_value(values[cond.param], v) for v in cond.values):
            return False
    return True
