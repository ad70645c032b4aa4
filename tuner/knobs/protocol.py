"""The one protocol every structured knob implements, and what it reads of an SGLang release.

A knob's value is one encoded value (what the sampler stores and a study's params hold: a string
for the pair and graph shapes, the value as written for a knob selected by its flag). The
knob says how to read it from YAML or the command line (`encode`), whether a release accepts it
(`check`, over that release's option choices), what it sets in a TrialConfig (`apply`: its own
fields, or launch flags that join the configuration's flags, so that the renderer spells them
for the release, the failure rules read them and the store keeps them with no field of their
own; `fields`, `dests` and `restore` say where a knob of fields is stored and spelled) and how
to show it (`show`). Its
`shape` says how it is searched and featured:

    pair   "prefill/decode": sampled as the prefill member, then a decode member the space pairs
           with it; featured as three categories (prefill, decode, the pair)
    graphs "off" | "on" | "max:N" | "bs:1,2,4": one categorical; featured as its level, graphs
           on or off, and the largest captured batch (log scale)
    written a knob that a plain param selects by its `flag` (mem-fraction-static, kv-cache-dtype,
           chunked-prefill-size, max-running-requests): read and sampled as the kind written
           (float or int range, categorical), its choices featured by their `size` where each
           has one; `check` judges each choice (null: SGLang's default, where the knob allows
           it), or both ends of a range

What a failure proves about it is the knob's own physics, read by the failure rules
(tuner.search.rules) and the memory model, never by its name there:

    role    what it is physically (fraction, graphs, backends, kv_dtype, chunk, running): which
            failure mechanisms the feasibility model lets it take part in
    scopes  per rule kind (the values of tuner.search.rules.RuleKind: "oom_at_load",
            "oom_at_capture", "oom_under_load", "not_enough_memory", "pair_broken",
            "backend_unsupported", "pair_unsupported"), how that rule holds the knob:
              up    covered at the failure's size and above (it raises that memory demand)
              down  covered at the failure's size and below (it lowers the demand: more room)
              free  the failure says nothing about it (any value is covered)
              equal (any kind it does not name) covered at the failure's value only
            A flag or field no knob describes is held equal by every rule: no rule fails open.
    size    the value on the axis along which its scopes compare (tokens, requests, bytes per KV
            element, the fraction); None where it has no place on it (then held equal)
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Literal, Protocol, runtime_checkable

from tuner.config import TrialConfig

Shape = Literal["pair", "graphs", "written"]
Scope = Literal["up", "down", "free", "equal"]
ROLES = ("fraction", "graphs", "backends", "kv_dtype", "chunk", "running", "other")
MEMORY_KINDS = ("oom_at_load", "oom_at_capture", "oom_under_load", "not_enough_memory")
# A knob that takes no part in memory (the attention backends): every memory failure holds for any
# value of it. The backend rules read the backends themselves (per role, per pair).
MEMORY_NEUTRAL: Mapping[str, Scope] = MappingProxyType(dict.fromkeys(MEMORY_KINDS, "free"))


class Options(Protocol):
    """One SGLang release's options, read by dest."""

    @property
    def note(self) -> str:
        """The release, for messages ("SGLang 0.5.17")."""
        ...

    def choices(self, dest: str) -> tuple[str, ...] | None:
        """The values the release's option for `dest` accepts; () for a free value; None: no such option."""
        ...


@runtime_checkable
class Knob(Protocol):
    """One structured knob (see the module docstring)."""

    @property
    def kind(self) -> str:
        """The `kind:` of its params in a space file."""
        ...

    @property
    def name(self) -> str:
        """Its params' default name."""
        ...

    @property
    def shape(self) -> Shape: ...

    @property
    def flag(self) -> str | None:
        """The flag (without dashes) by which a plain param selects this knob; None: by its kind."""
        ...

    @property
    def owned(self) -> frozenset[str]:
        """The option dests it sets: a fixed flag or another param setting one conflicts with it."""
        ...

    @property
    def role(self) -> str:
        """What the knob is physically (one of ROLES)."""
        ...

    @property
    def scopes(self) -> Mapping[str, Scope]:
        """Per rule kind, how a failure's rule holds this knob (absent: equal)."""
        ...

    def size(self, value: Any) -> float | None:
        """The encoded value on the axis its up/down scopes compare; None: none (held equal)."""
        ...

    @property
    def fields(self) -> tuple[str, ...]:
        """The TrialConfig fields it sets (empty: it sets launch flags, in `config.flags`)."""
        ...

    @property
    def dests(self) -> Mapping[str, tuple[str, ...]]:
        """Per part, the option dests that hold it, newest release first. A part named after one
        of its `fields` is rendered as one flag taking that field's value (the first dest the
        release has); any other part is rendered by its own code in tuner.sglang.flags."""
        ...

    def restore(self, data: Mapping[str, Any]) -> dict[str, Any]:
        """Its TrialConfig fields from a stored config's JSON ({} for a knob of flags)."""
        ...

    def encode(self, raw: object) -> Any:
        """A YAML or command-line value as the stored string; ValueError saying what was expected."""
        ...

    def check(self, value: Any, options: Options) -> str | None:
        """Why the release cannot launch the encoded `value`, or None."""
        ...

    def apply(self, value: Any, config: TrialConfig) -> TrialConfig:
        """`config` with the encoded `value` set: in the knob's own TrialConfig fields, or as launch
        flags appended to `config.flags` (names without dashes)."""
        ...

    def show(self, value: Any) -> str:
        """The value for people (reports, the live display)."""
        ...
