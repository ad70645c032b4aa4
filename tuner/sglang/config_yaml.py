"""SGLang's `--config` YAML: an argv as the mapping a release's `--config FILE` accepts, and back.

Pure functions over an `OptionTable` (see flags.py for rendering and checking the argv itself).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tuner.errors import FlagError
from tuner.sglang.flags import expand_option, resolve_option, validate_flags
from tuner.sglang.options import OptionSpec, OptionTable
from tuner.sglang.renames import PHASE_OFF, canonical, usable

_YAML_KINDS = ("store", "store_true", "alias")


def config_yaml(argv_flags: Sequence[str], table: OptionTable) -> dict[str, object]:
    """The SGLang `--config` mapping meaning the same as `argv_flags` for `table`'s release.

    Keys are hyphenated flag names; values are typed scalars, lists for nargs
    options and `true` for switches. What a config file of that release
    refuses (deprecated switches, BooleanOptionalAction, retired flags) is
    written as an accepted equivalent where one exists, else FlagError.
    """
    validate_flags(argv_flags, table)
    if table.find("--config") is None:
        raise FlagError(f"--config: SGLang {table.version} has no config file option (0.5.3+)")
    groups = _groups(argv_flags, table)
    dests = {spec.dest for spec, _, _ in groups}
    # 0.5.22+: --dp-size N --enable-dp-attention (deprecated, refused in YAML) means --attn-dp-size N.
    attn_dp = (
        "dp_size" in dests
        and any(s.dest == "enable_dp_attention" and s.kind == "deprecated_store_true" for s, _, _ in groups)
        and usable(table, "--attn-dp-size")
    )
    out: dict[str, object] = {}
    for spec, spelling, values in groups:
        if spelling == "--config":
            raise FlagError("--config: a config file cannot name another config file")
        if attn_dp and spec.dest in ("dp_size", "enable_dp_attention"):
            if spec.dest == "dp_size":
                out["attn-dp-size"] = _typed(spec, values)
        elif spec.kind in _YAML_KINDS:
            key_flag = canonical(table, spec.dest, ("store", "store_true")) or spelling
            out[key_flag[2:]] = True if spec.kind == "store_true" else _typed(spec, values)
        else:
            out.update(_yaml_equivalent(spec, spelling, table))
    return out


def _yaml_equivalent(spec: OptionSpec, spelling: str, table: OptionTable) -> dict[str, object]:
    if spec.kind == "deprecated_store_true":
        same = canonical(table, spec.dest, ("store_true",))
        if same:
            return {same[2:]: True}
        if spec.dest == "disable_cuda_graph" and all(usable(table, f) for f in PHASE_OFF):
            return {f[2:]: True for f in PHASE_OFF}
    raise FlagError(
        f"{spelling}: a SGLang {table.version} --config file refuses it (kind {spec.kind}); "
        f"keep it on the command line"
    )


def _groups(argv: Sequence[str], table: OptionTable) -> list[tuple[OptionSpec, str, list[str]]]:
    groups: list[tuple[OptionSpec, str, list[str]]] = []
    for token in argv:
        if token.startswith("--"):
            flag, eq, value = token.partition("=")
            spec = resolve_option(flag, table)
            if spec is None:  # pragma: no cover - validate_flags ran first
                raise FlagError(f"{flag}: not accepted by SGLang {table.version}")
            spelling = flag if table.find(flag) else (expand_option(flag, table) or flag)
            groups.append((spec, spelling, [value] if eq else []))
        elif groups:
            groups[-1][2].append(token)
    return groups


def _typed(spec: OptionSpec, values: list[str]) -> object:
    convert = {"int": int, "float": float}.get(spec.value_type, str)
    typed = [convert(v) for v in values]
    return typed[0] if spec.nargs is None and len(typed) == 1 else typed


def config_to_argv(mapping: Mapping[str, object], table: OptionTable) -> tuple[str, ...]:
    """The CLI tokens SGLang makes of a --config mapping (reference §1.2).

    `--key value`; bool true on a store-true option -> `--key`, false -> nothing,
    bool elsewhere -> `--key true|false`; list -> `--key v1 v2` (nothing if empty).
    """
    out: list[str] = []
    for key, value in mapping.items():
        flag = f"--{key}"
        spec = table.find(flag)
        if isinstance(value, bool):
            if spec is not None and spec.kind == "store_true":
                out.extend([flag] if value else [])
            else:
                out.extend([flag, str(value).lower()])
        elif isinstance(value, list):
            out.extend([flag, *(str(v) for v in value)] if value else [])
        else:
            out.extend([flag, str(value)])
    return tuple(out)
