"""A trial's launch re-rendered for another SGLang release (pure).

The knobs are rendered afresh from the recorded configuration with the target release's table
(so `--cuda-graph-bs` becomes `--cuda-graph-bs-decode`, graphs off the per-phase switches, ...);
every other flag of the recorded launch (the space's fixed flags and extra knobs) is carried
over by the dest it stores into: kept when the target spells it the same, renamed when the
target stores that dest under another name or the rename knowledge (renames.py) names a single
replacement option, and otherwise dropped and reported with the replacement the tables know.
The result is validated against the target's table; host and port are set anew.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from tuner.config import TrialConfig
from tuner.errors import FlagError, ProfileError
from tuner.report.export import Profile
from tuner.report.profile import DEFAULT_PORT, split_launcher
from tuner.sglang.flags import current_spelling, render_flags, validate_flags
from tuner.sglang.options import OptionSpec, OptionTable
from tuner.sglang.renames import CANONICAL_KINDS, canonical, missing_message, replacement
from tuner.store.rows import config_from_dict

SGLANG_LAUNCHER = ("python", "-m", "sglang.launch_server")
DEFAULT_HOST = "127.0.0.1"
_ADDRESS_DESTS = ("host", "port")


@dataclass(frozen=True, kw_only=True, slots=True)
class Rerendered:
    """The launch for the target release and what changed on the way."""

    version: str
    table_source: str
    launcher: tuple[str, ...]
    flags: tuple[str, ...]  # SGLang flags for the target release, --host and --port last
    renamed: tuple[str, ...] = ()  # "--old -> --new" per flag whose spelling changed
    dropped: tuple[str, ...] = ()  # one line per flag the target has no place for, with the replacement
    warnings: tuple[str, ...] = ()  # what validate_flags still says about the result


def _groups(flags: Sequence[str], table: OptionTable) -> list[tuple[OptionSpec | None, str, list[str]]]:
    groups: list[tuple[OptionSpec | None, str, list[str]]] = []
    for token in flags:
        if token.startswith("--"):
            flag, eq, value = token.partition("=")
            groups.append((table.find(flag), flag, [value] if eq else []))
        elif groups:
            groups[-1][2].append(token)
    return groups


def rerender(
    flags: Sequence[str],
    config: TrialConfig,
    source: OptionTable,
    target: OptionTable,
    *,
    launcher: Sequence[str] = SGLANG_LAUNCHER,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
) -> Rerendered:
    """`flags` (recorded for `source`'s release) and `config`'s knobs for `target`'s release."""
    knobs_only = replace(config, flags=())  # every knob, whatever fields TrialConfig grows
    try:
        old_knobs = render_flags(knobs_only, source, port=0)
        new_knobs = render_flags(knobs_only, target, host=host, port=port)
    except FlagError as exc:
        raise ProfileError(f"re-rendering for SGLang {target.version}: {exc}") from exc
    knob_dests = {s.dest for s, _, _ in _groups(old_knobs, source) if s is not None}
    kept: list[str] = []
    renamed: list[str] = []
    dropped: list[str] = []
    for spec, spelling, values in _groups(flags, source):
        if spec is not None and (spec.dest in knob_dests or spec.dest in _ADDRESS_DESTS):
            continue
        new = _carry(spec, spelling, target)
        if new is None:
            dropped.append(missing_message(spelling, target))
            continue
        if new != (spelling,):
            renamed.append(f"{spelling} -> {' '.join(new)}")
        kept.extend(new if spec is not None and not spec.takes_value and not values else (*new, *values))
    before = [t for t in old_knobs if t.startswith("--") and t not in ("--host", "--port")]
    after = [t for t in new_knobs if t.startswith("--") and t not in ("--host", "--port")]
    if before != after:
        renamed.append(f"knobs: {' '.join(before) or '-'} -> {' '.join(after) or '-'}")
    argv = (*kept, *new_knobs)
    try:
        warnings = validate_flags(argv, target)
    except FlagError as exc:
        raise ProfileError(f"re-rendered launch for SGLang {target.version} is refused: {exc}") from exc
    return Rerendered(
        version=target.version,
        table_source=target.source,
        launcher=tuple(launcher),
        flags=argv,
        renamed=tuple(dict.fromkeys(renamed)),
        dropped=tuple(dropped),
        warnings=warnings,
    )


def _carry(spec: OptionSpec | None, spelling: str, target: OptionTable) -> tuple[str, ...] | None:
    """The target's spelling(s) for a recorded flag, or None when the target has no place for it."""
    there = target.find(spelling)
    if there is not None and there.kind != "removed":
        return current_spelling(spelling, target)
    if spec is not None:
        same_dest = canonical(target, spec.dest)
        if same_dest:
            return (same_dest,)
    use = replacement(spelling, target)
    if use and " " not in use.strip():
        found = target.find(use)
        if found is not None and found.kind in CANONICAL_KINDS:
            return (use,)
    return None


def for_release(
    profile: Profile, source: OptionTable, target: OptionTable, *, engine: str = "sglang"
) -> Profile:
    """The profile launched by `engine` (real SGLang, or the simulator pretending) at `target`'s release.

    Its argv is re-rendered (see `rerender`), the simulator's own environment is dropped for real
    SGLang, and what changed is listed in `notes` (shown at the top of every export).
    """
    recorded_launcher, flags = split_launcher(profile.argv, source)
    if engine == "sglang":
        launcher: tuple[str, ...] = SGLANG_LAUNCHER
        env = {k: v for k, v in profile.env.items() if not k.startswith("TUNER_SIM")}
    elif engine == "sim" and "tuner.sim" in recorded_launcher:
        launcher = _sim_launcher(recorded_launcher, target.version)
        env = dict(profile.env)
    else:
        raise ProfileError(
            f"--engine {engine}: expected sglang, or sim for a trial launched by the simulator "
            f"(this one ran {' '.join(recorded_launcher[:3])})"
        )
    config = config_from_dict(profile.config)
    done = rerender(flags, config, source, target, launcher=launcher, host=profile.host or DEFAULT_HOST)
    notes = [
        f"re-rendered for SGLang {target.version} (option table: {target.source}) from the launch measured "
        f"with SGLang {profile.sglang_version}; measurements below are from that launch"
    ]
    notes += [f"renamed: {line}" for line in done.renamed]
    notes += [f"DROPPED: {line}" for line in done.dropped]
    notes += [f"warning: {line}" for line in done.warnings]
    return replace(
        profile,
        argv=(*done.launcher, *done.flags),
        env=env,
        port=DEFAULT_PORT,
        sglang_version=target.version,
        notes=(*profile.notes, *notes),
    )


def _sim_launcher(launcher: Sequence[str], version: str) -> tuple[str, ...]:
    out = list(launcher)
    if "--sim-sglang-version" in out:
        out[out.index("--sim-sglang-version") + 1] = version
    else:
        out += ["--sim-sglang-version", version]
    return tuple(out)
