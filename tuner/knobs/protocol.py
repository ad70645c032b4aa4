"""The one protocol every structured knob implements, and what it reads of an SGLang release.

A knob's value is one encoded string (what the sampler stores and a study's params hold). The
knob says how to read it from YAML or the command line (`encode`), whether a release accepts it
(`check`, over that release's option choices), what it sets in a TrialConfig (`apply`: its own
fields, or launch flags that join the configuration's flags, so that the renderer spells them
for the release, the failure rules read them and the store keeps them with no field of their
own) and how to show it (`show`). Its
`shape` says how it is searched and featured:

    pair   "prefill/decode": sampled as the prefill member, then a decode member the space pairs
           with it; featured as three categories (prefill, decode, the pair)
    graphs "off" | "on" | "max:N" | "bs:1,2,4": one categorical; featured as its level, graphs
           on or off, and the largest captured batch (log scale)
    number a knob that a plain param selects by its `flag` (mem-fraction-static): read, sampled
           and featured as the kind written (float range or categorical); `check` judges each
           choice, or both ends of a range
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, runtime_checkable

from tuner.config import TrialConfig

Shape = Literal["pair", "graphs", "number"]


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
