"""What the knobs a plain param selects by its flag share: the value set as that one launch flag,
null leaving SGLang's default, and a whole-number check against the release's option."""

from __future__ import annotations

from dataclasses import replace

from tuner.config import FlagValue, TrialConfig
from tuner.knobs.protocol import Options


def set_flag(config: TrialConfig, flag: str, value: FlagValue | None) -> TrialConfig:
    """`config` with `--flag value` appended to its flags; None (SGLang's default) sets nothing."""
    if value is None:
        return config
    return replace(config, flags=(*config.flags, (flag, value)))


def missing(options: Options, flag: str) -> str | None:
    """Why the release cannot take `--flag` at all (it has no such option), or None."""
    if options.choices(flag.replace("-", "_")) is None:
        return f"{options.note} has no --{flag}"
    return None


def whole(raw: object, *, what: str, low: int, extra: tuple[int, ...] = ()) -> int:
    """`raw` as a whole number >= `low` (or one of `extra`); ValueError naming `what` otherwise."""
    number = raw
    if isinstance(raw, str) and raw.strip().lstrip("-").isdigit():
        number = int(raw.strip())
    if isinstance(number, bool) or not isinstance(number, int) or not (number >= low or number in extra):
        raise ValueError(what)
    return number


def whole_problem(value: object, options: Options, flag: str, *, what: str, low: int,
                  extra: tuple[int, ...] = ()) -> str | None:  # fmt: skip
    """Why the release cannot launch `--flag value` (null: SGLang's default, always fine), or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not (value >= low or value in extra):
        return f"expected {what}"
    return missing(options, flag)
