"""A Profile as text: a runnable shell script, an SGLang `--config` YAML, JSON (pure functions).

Secrets never leave: the store already redacts them, and every renderer
redacts argv and environment again. A redacted value becomes a reference to
an environment variable the user must set (`"${SGLANG_API_KEY:?...}"`) in
the script, and is left out of the YAML (keep it on the command line).
"""

from __future__ import annotations

import json
import re
import shlex
from collections import Counter
from collections.abc import Sequence
from typing import Any

import yaml

from tuner.errors import FlagError, ProfileError
from tuner.metrics import HEADLINE, METRICS, Metric
from tuner.names import one_line
from tuner.report.export import Profile, Spread, knob_line
from tuner.secrets import REDACTED, is_secret_env, is_secret_flag, redact_argv, redact_env
from tuner.sglang.config_yaml import config_yaml
from tuner.sglang.options import OptionTable, version_key
from tuner.store.codec import to_jsonable

__all__ = ["FORMATS", "launch_flags", "render", "render_json", "render_sh", "render_yaml", "split_launcher"]

FORMATS = ("sh", "yaml", "json")
DEFAULT_PORT = 30000  # what an exported script listens on unless PORT is set: SGLang's own default
_ADDRESS = ("--host", "--port")
_SAFE_DEFAULT = re.compile(r"^[A-Za-z0-9_.:\[\]-]+$")


def split_launcher(argv: Sequence[str], table: OptionTable) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(launcher, SGLang flags): the flags start at the first `--option` that `table`'s release knows."""
    for i, token in enumerate(argv):
        if not token.startswith("--"):
            continue
        flag = token.split("=", 1)[0]
        if table.find(flag) is not None or len([f for f in table.flags() if f.startswith(flag)]) == 1:
            return tuple(argv[:i]), tuple(argv[i:])
    raise ProfileError(
        f"launch command {' '.join(argv[:4])} ...: expected SGLang {table.version} options after "
        f"the launcher "
        f"(found none this release knows)"
    )


def launch_flags(profile: Profile, table: OptionTable, *, address: bool = True) -> tuple[str, ...]:
    """The trial's SGLang flags (redacted), with or without --host/--port."""
    _, flags = split_launcher(redact_argv(profile.argv), table)
    return flags if address else _drop_address(flags)


def _drop_address(flags: Sequence[str]) -> tuple[str, ...]:
    out: list[str] = []
    skip = False
    for token in flags:
        if skip and not token.startswith("--"):
            continue
        skip = token.split("=", 1)[0] in _ADDRESS
        if not skip:
            out.append(token)
    return tuple(out)


# ------------------------------------------------------------------------------------- comments


def _gpu_line(profile: Profile) -> str:
    if not profile.gpu_names:
        return "GPUs: not recorded"
    used = profile.launch_gpus or len(profile.gpu_names)
    names_used = profile.gpu_names[:used] if used <= len(profile.gpu_names) else profile.gpu_names
    counts = Counter(names_used)
    if used > len(profile.gpu_names) and len(counts) == 1:  # more GPUs than this host recorded (nodes)
        counts = Counter({profile.gpu_names[0]: used})
    names = ", ".join(f"{n} x {name}" for name, n in counts.items())
    if used < len(profile.gpu_names):
        names += f" (the launch's {used} of the {len(profile.gpu_names)} GPUs it saw)"
    driver = f" (driver {profile.driver})" if profile.driver else ""
    visible = f", CUDA_VISIBLE_DEVICES={','.join(map(str, profile.gpus))}" if profile.gpus else ""
    return f"GPUs: {names}{driver}{visible}"


def _spread_text(spread: Spread, metric: Metric) -> str:
    low, high = metric.show(spread.low), metric.show(spread.high)
    return f"median {metric.show(spread.median)} (min {low}, max {high}, n={spread.n})"


def provenance(profile: Profile) -> list[str]:
    """The comment lines every text format starts with: where the profile comes from and what it measured."""
    trial = f"trial {profile.trial}" if profile.trial is not None else "an unnumbered run"
    lines = [
        f"SGLang launch profile: study {profile.study}, {trial} (row {profile.row_id}, "
        f"config hash {profile.config_hash})",
        f"measured {profile.measured_at.strftime('%Y-%m-%d %H:%M UTC')}; exported "
        f"{profile.exported_at.strftime('%Y-%m-%d %H:%M UTC')}",
        f"SGLang {profile.sglang_version}; {_gpu_line(profile)}",
        f"outcome {profile.outcome}{'' if profile.feasible else ' (NOT feasible)'}; gate "
        f"{profile.gate_verdict or 'not run'}" + (f": {profile.gate_reason}" if profile.gate_reason else ""),
        f"knobs: {knob_line(profile)}",
    ]
    headline = [METRICS[name] for name in HEADLINE]
    measured = [f"{m.title} {m.show(v)}" for m in headline if (v := profile.measured.get(m.name)) is not None]
    over = f" (median of {profile.runs} runs)" if profile.runs > 1 else ""
    lines.append(
        f"measured{over}: " + ("; ".join(measured) if measured else "nothing (the trial did not run)")
    )
    if profile.warning:
        lines.append(f"WARNING: {profile.warning}")
    if profile.n_confirm:
        failed = (
            f"; {len(profile.failed_confirms)} failed: {', '.join(profile.failed_confirms)}"
            if profile.failed_confirms
            else ""
        )
        lines.append(f"re-validated: original + {profile.n_confirm} repeat(s){failed}")
        for m in headline:
            if m.name in profile.confirmations:
                lines.append(f"  {m.title}: {_spread_text(profile.confirmations[m.name], m)}")
    if profile.reason:
        lines.append(profile.reason)
    lines.extend(profile.context)
    lines.extend(profile.notes)
    return lines


def _comment(lines: Sequence[str]) -> str:
    """Comment lines; a control character in any value (a newline in a study name) is escaped, never run."""
    return "".join(f"# {one_line(line)}\n" if line else "#\n" for line in lines)


# ------------------------------------------------------------------------------------- shell


def _secret_var(name: str) -> str:
    var = re.sub(r"[^A-Za-z0-9]+", "_", name.lstrip("-")).upper().strip("_")
    return var if var.startswith("SGLANG_") else f"SGLANG_{var}"


def _word(token: str) -> str:
    return shlex.quote(token)


def _flag_lines(flags: Sequence[str]) -> list[str]:
    """One line per option with its values; secrets and the address become variables."""
    groups: list[list[str]] = []
    for token in flags:
        if token.startswith("--") or not groups:
            groups.append([token])
        else:
            groups[-1].append(token)
    lines = []
    for group in groups:
        flag, values = group[0], group[1:]
        name = flag.split("=", 1)[0]
        if is_secret_flag(name):
            var = _secret_var(name)
            ref = f'"${{{var}:?set {var}: the trial used a secret that is never exported}}"'
            lines.append(f"{name}={ref}" if "=" in flag else f"{_word(flag)} {ref}")
            continue
        if name in _ADDRESS and len(values) == 1 and _SAFE_DEFAULT.match(values[0]):
            var = name.lstrip("-").upper()
            default = str(DEFAULT_PORT) if name == "--port" else values[0]  # not the trial's random port
            lines.append(f'{name} "${{{var}:-{default}}}"')
            continue
        lines.append(" ".join(_word(t) for t in group))
    return lines


def render_sh(profile: Profile, table: OptionTable) -> str:
    """A bash script that execs the trial's exact launch command; HOST and PORT may be overridden."""
    launcher, flags = split_launcher(redact_argv(profile.argv), table)
    env = redact_env(profile.env)
    out = [
        "#!/usr/bin/env bash",
        _comment(provenance(profile)).rstrip("\n"),
        f"# Run as is (port {DEFAULT_PORT}, SGLang's default); HOST=0.0.0.0 PORT=8000 bash this.sh to listen "
        "elsewhere.",
        "set -euo pipefail",
        "",
    ]
    if profile.gpus:
        out.append("export CUDA_DEVICE_ORDER=PCI_BUS_ID")
        out.append(f"export CUDA_VISIBLE_DEVICES={_word(','.join(map(str, profile.gpus)))}")
    for key, value in env.items():
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
            raise ProfileError(
                f"environment variable {key!r}: not a valid shell name; expected [A-Za-z_][A-Za-z0-9_]*"
            )
        if is_secret_env(key) or value == REDACTED:
            out.append(f': "${{{key}:?set {key}: the trial used a secret that is never exported}}"')
            out.append(f"export {key}")
        else:
            out.append(f"export {key}={_word(value)}")
    head, note = entrypoint(launcher, profile.sglang_version)
    if note:
        out.insert(-2, note)
    body = [head, *_flag_lines(flags)]
    out.append("exec " + " \\\n    ".join(body))
    return "\n".join(out) + "\n"


SERVE_SINCE = (0, 5, 10)  # `sglang serve` (a console script since 0.5.5) is the recommended entrypoint
_MODULE = ("-m", "sglang.launch_server")


def entrypoint(launcher: Sequence[str], version: str) -> tuple[str, str | None]:
    """The shell words that start the server of `version`, and a comment when they are not the study's.

    From 0.5.10 SGLang warns that `python -m sglang.launch_server` "is still supported, but 'sglang
    serve' is the recommended entrypoint" (`sglang/launch_server.py`); both parse the same flags and
    run the same server (`sglang/cli/serve.py`), so the export writes the recommended one there.
    """
    if tuple(launcher[-2:]) == _MODULE and version_key(version)[:3] >= SERVE_SINCE:
        note = (
            f"# SGLang {version} recommends `sglang serve` (the study ran {' '.join(launcher[-3:])}, "
            "the same server); SGLANG=/path/to/sglang bash this.sh to choose one."
        )
        return '"${SGLANG:-sglang}" serve', note
    head, interpreter = _portable_launcher(launcher)
    if interpreter is None:
        return head, None
    return head, f"# The study ran {interpreter}; PYTHON=/path/to/python bash this.sh to choose one."


def _portable_launcher(launcher: Sequence[str]) -> tuple[str, str | None]:
    """The launcher as a shell words: an absolute path to a Python interpreter (a venv's, which means
    nothing on another machine) becomes "${PYTHON:-python3}"; returns it and the path it replaced."""
    if (
        launcher
        and launcher[0].startswith("/")
        and re.fullmatch(r"python[0-9.]*", launcher[0].rsplit("/", 1)[-1])
    ):
        rest = " ".join(_word(t) for t in launcher[1:])
        return f'"${{PYTHON:-python3}}" {rest}'.rstrip(), launcher[0]
    return " ".join(_word(t) for t in launcher), None


# -------------------------------------------------------------------------------------- YAML


def _yaml_launcher(version: str) -> str:
    return "sglang serve" if version_key(version)[:3] >= SERVE_SINCE else "python -m sglang.launch_server"


def render_yaml(profile: Profile, table: OptionTable) -> str:
    """The SGLang `--config` file of the trial's flags (hyphenated keys; host, port and secrets left out)."""
    flags = launch_flags(profile, table, address=False)
    secret = [t for t in flags if is_secret_flag(t.split("=", 1)[0])]
    kept = _drop_secrets(flags)
    try:
        mapping = config_yaml(kept, table)
    except FlagError as exc:
        raise ProfileError(f"--format yaml for trial {profile.trial}: {exc}") from exc
    notes = [
        "",
        f"Use: {_yaml_launcher(profile.sglang_version)} --config THIS.yaml --host HOST --port PORT"
        f" (the trial listened on {profile.host}:{profile.port}); command-line flags override this file.",
    ]
    if secret:
        notes.append(f"Left out (secrets; give them on the command line): {', '.join(secret)}")
    # one key per line, lists inline: `cuda-graph-bs: [1, 2, 4, 8]`; text with control characters
    # double-quoted with escapes, so it stays on its line
    text = "".join(
        f"{k}: {yaml.safe_dump(v, default_flow_style=True, width=1000).strip()}\n"
        if isinstance(v, list)
        else f"{k}: {json.dumps(v)}\n"
        if isinstance(v, str) and one_line(v) != v
        else yaml.safe_dump({k: v}, default_flow_style=False, width=1000)
        for k, v in mapping.items()
    )
    return _comment([*provenance(profile), *notes]) + text


def _drop_secrets(flags: Sequence[str]) -> tuple[str, ...]:
    out: list[str] = []
    skip = False
    for token in flags:
        if token.startswith("--"):
            skip = is_secret_flag(token.split("=", 1)[0])
        if not skip:
            out.append(token)
    return tuple(out)


# -------------------------------------------------------------------------------------- JSON


def profile_dict(profile: Profile, table: OptionTable | None = None) -> dict[str, Any]:
    """Everything in the profile as JSON-ready values (argv and environment redacted)."""
    data: dict[str, Any] = {
        "study": profile.study,
        "trial": profile.trial,
        "row_id": profile.row_id,
        "config_hash": profile.config_hash,
        "measured_at": profile.measured_at.isoformat(),
        "exported_at": profile.exported_at.isoformat(),
        "sglang_version": profile.sglang_version,
        "gpus": {"names": list(profile.gpu_names), "driver": profile.driver, "visible": list(profile.gpus)},
        "outcome": profile.outcome,
        "feasible": profile.feasible,
        "gate": {"verdict": profile.gate_verdict, "reason": profile.gate_reason},
        "knobs": profile.params,
        "config": profile.config,
        "argv": list(redact_argv(profile.argv)),
        "env": redact_env(profile.env),
        "host": profile.host,
        "port": profile.port,
        "metrics": profile.measured,
        "metrics_runs": profile.runs,
        "launch_gpus": profile.launch_gpus,
        "warning": profile.warning or None,
        "confirmations": {
            "repeats": profile.n_confirm,
            "failed": list(profile.failed_confirms),
            "spread": {
                k: {"median": s.median, "min": s.low, "max": s.high, "n": s.n}
                for k, s in profile.confirmations.items()
            },
        },
        "selection": profile.reason or None,
        "context": list(profile.context),
        "notes": list(profile.notes),
    }
    if table is not None:
        data["launch_flags"] = list(launch_flags(profile, table))
    jsonable: dict[str, Any] = to_jsonable(data)
    return jsonable


def render_json(profile: Profile, table: OptionTable | None = None) -> str:
    """The profile as indented JSON."""
    return json.dumps(profile_dict(profile, table), indent=2, allow_nan=False) + "\n"


def render(profile: Profile, fmt: str, table: OptionTable) -> str:
    """The profile in `fmt` (sh, yaml or json)."""
    if fmt == "sh":
        return render_sh(profile, table)
    if fmt == "yaml":
        return render_yaml(profile, table)
    if fmt == "json":
        return render_json(profile, table)
    raise ProfileError(f"--format: expected one of {', '.join(FORMATS)} (got {fmt!r})")
