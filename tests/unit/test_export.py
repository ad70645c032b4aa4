"""tuner.report.export / export_render: choosing a trial, spreads, the three formats (secrets never leave)."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import replace
from datetime import datetime, timezone

import pytest
import yaml
from support.reports import SIM_LAUNCHER, make_row, study_data

from tuner.config import Outcome
from tuner.errors import ProfileError
from tuner.report.export import build_profile, choose_best, select, spreads, utopia_distances
from tuner.report.profile import profile_dict, render_json, render_sh, render_yaml, split_launcher
from tuner.sglang.config_yaml import config_to_argv
from tuner.sglang.options import build_parser, builtin_table

TABLE = builtin_table("0.5.9")
NOW = datetime(2026, 5, 2, 8, 0, tzinfo=timezone.utc)


def front_data():
    rows = [
        make_row(0, tput=1000.0, kv=1_000_000, min_free=2_000),  # fastest
        make_row(1, tput=900.0, kv=1_800_000, min_free=9_000),  # balanced
        make_row(2, tput=400.0, kv=2_000_000, min_free=20_000, mem=0.9),  # most KV
        make_row(3, tput=300.0, kv=500_000),  # dominated
    ]
    return study_data(rows)


@pytest.mark.parametrize(
    ("prefer", "min_free", "expected"),
    [
        ("throughput", None, 0),
        ("kv", None, 2),
        ("balanced", None, 1),
        ("throughput", 5_000, 1),
        ("kv", 25_000, None),
    ],
)
def test_best_follows_the_preference_and_the_vram_floor(
    prefer: str, min_free: int | None, expected: int | None
) -> None:
    data = front_data()
    if expected is None:
        with pytest.raises(ProfileError, match="the most any kept: 20000 MiB"):
            choose_best(data, prefer=prefer, min_free_mib=min_free)
        return
    choice = choose_best(data, prefer=prefer, min_free_mib=min_free)
    assert choice.row.trial_number == expected
    assert choice.reason.startswith(f"chose trial {expected} among")
    assert f"prefer={prefer}" in choice.reason


def test_balanced_scales_by_the_best_value() -> None:
    distances = utopia_distances({0: 1000.0, 1: 900.0}, {0: 1.0e6, 1: 2.0e6})
    assert distances[0] == pytest.approx(0.5)  # half the best KV
    assert distances[1] == pytest.approx(0.1)  # 10 % short of the best throughput


def test_choosing_refuses_what_cannot_be_exported() -> None:
    never = replace(make_row(2, outcome=Outcome.BAD_FLAG), argv=None)  # refused before launch
    data = study_data([make_row(0, outcome=Outcome.OOM), make_row(1, feasible=False), never])
    with pytest.raises(ProfileError, match="no feasible trial to export"):
        choose_best(data)
    with pytest.raises(ProfileError, match=r"trial 7: no recorded measurement .*expected one of 0, 1, 2"):
        select(data, trial=7)
    with pytest.raises(ProfileError, match="not feasible .*missed an SLO.*--allow-infeasible"):
        select(data, trial=1)
    assert select(data, trial=1, allow_infeasible=True).row.trial_number == 1
    with pytest.raises(ProfileError, match="never launched"):
        select(data, trial=2)
    with pytest.raises(ProfileError, match="--prefer: expected one of"):
        choose_best(front_data(), prefer="cheapest")


def test_spread_over_original_and_repeats_ignores_failed_repeats() -> None:
    original = make_row(0, tput=100.0, kv=1000)
    repeats = [
        make_row(None, id=10, tput=90.0, kv=1000, confirm_of=1),
        make_row(None, id=11, tput=120.0, kv=1000, confirm_of=1),
        make_row(None, id=12, outcome=Outcome.OOM, confirm_of=1),
    ]
    out = spreads([original, *repeats])
    tput = out["output_throughput"]
    assert (tput.median, tput.low, tput.high, tput.n) == (100.0, 90.0, 120.0, 3)
    assert out["kv_tokens"].rel_range == 0.0
    profile = build_profile(
        study_data([original, *repeats]), select(study_data([original, *repeats]), trial=0), now=NOW
    )
    assert profile.n_confirm == 3 and profile.failed_confirms == ("oom",)
    text = render_sh(profile, TABLE)
    assert "re-validated: original + 3 repeat(s); 1 failed: oom" in text
    assert "output throughput: median 100.0 tok/s (min 90.0 tok/s, max 120.0 tok/s, n=3)" in text


def secret_profile():
    argv = (
        *SIM_LAUNCHER,
        "--model-path",
        "/models/my model's dir",
        "--api-key",
        "sk-SECRET-4242",
        "--mem-fraction-static",
        "0.8",
        "--host",
        "127.0.0.1",
        "--port",
        "41000",
    )
    row = make_row(0, argv=argv, env={"HF_TOKEN": "hf_SECRET_9999", "NCCL_DEBUG": "WARN"})
    data = study_data([row])
    return build_profile(data, select(data, trial=0), now=NOW)


def test_no_format_leaks_a_secret_even_if_the_store_had_not_redacted_it() -> None:
    profile = secret_profile()
    outputs = [render_sh(profile, TABLE), render_yaml(profile, TABLE), render_json(profile, TABLE)]
    for text in outputs:
        assert "sk-SECRET-4242" not in text and "hf_SECRET_9999" not in text
    sh, yml, _ = outputs
    assert '--api-key "${SGLANG_API_KEY:?set SGLANG_API_KEY' in sh
    assert ': "${HF_TOKEN:?set HF_TOKEN' in sh and "export NCCL_DEBUG=WARN" in sh
    assert "api-key" not in yaml.safe_load(yml)
    assert "Left out (secrets; give them on the command line): --api-key" in yml


def test_shell_script_quotes_values_and_lets_host_and_port_be_overridden() -> None:
    script = render_sh(secret_profile(), TABLE)
    assert "--model-path '/models/my model'\"'\"'s dir'" in script
    assert '--port "${PORT:-30000}"' in script and '--host "${HOST:-127.0.0.1}"' in script
    assert '\nexec "${PYTHON:-python3}" -m tuner.sim --sim-scenario tiny-fast' in script
    assert "# The study ran /venv/bin/python; PYTHON=" in script  # no venv path in the command itself
    assert script.startswith("#!/usr/bin/env bash\n# SGLang launch profile: study s-v1, trial 0")
    bash = shutil.which("bash")
    if bash:
        subprocess.run([bash, "-n"], input=script, text=True, check=True)


def test_yaml_means_the_same_flags_for_that_release() -> None:
    row = make_row(0, mem=0.85, graph="max:16")
    data = study_data([row])
    profile = build_profile(data, select(data, trial=0), now=NOW)
    mapping = yaml.safe_load(render_yaml(profile, TABLE))
    assert all("_" not in key for key in mapping)
    parser = build_parser(TABLE)
    _, flags = split_launcher(row.argv or (), TABLE)
    trial_args = vars(parser.parse_args(list(flags)))
    yaml_args = vars(parser.parse_args(list(config_to_argv(mapping, TABLE))))
    del trial_args["host"], trial_args["port"]
    assert yaml_args == trial_args


def test_yaml_for_a_release_without_config_files_is_refused() -> None:
    profile = replace(secret_profile(), sglang_version="0.5.2")
    with pytest.raises(ProfileError, match="no config file option"):
        render_yaml(profile, builtin_table("0.5.2"))


def test_json_round_trips() -> None:
    profile = secret_profile()
    text = render_json(profile, TABLE)
    loaded = json.loads(text)
    assert loaded == profile_dict(profile, TABLE)
    assert loaded["trial"] == 0 and loaded["knobs"] == {"mem-fraction-static": 0.8, "cuda_graph": "off"}
    assert loaded["launch_flags"][:2] == ["--model-path", "/models/my model's dir"]
    assert loaded["gpus"] == {"names": ["NVIDIA H100"], "driver": "550.1", "visible": []}


def test_launcher_split_for_real_sglang_and_the_simulator() -> None:
    real = ("/usr/bin/python3", "-m", "sglang.launch_server", "--model-path", "m", "--port", "1")
    assert split_launcher(real, TABLE) == (real[:3], real[3:])
    sim = (*SIM_LAUNCHER, "--tp-size", "1")
    assert split_launcher(sim, TABLE) == (SIM_LAUNCHER, ("--tp-size", "1"))
    with pytest.raises(ProfileError, match="expected SGLang 0.5.9 options"):
        split_launcher(("python", "-m", "x", "--sim-only"), TABLE)
