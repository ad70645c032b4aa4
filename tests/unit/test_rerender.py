"""export --sglang-version: a trial's launch re-rendered for another release (pure)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace
from datetime import datetime, timezone

import pytest
from support.reports import SIM_LAUNCHER, make_row, study_data

from tuner.config import CudaGraph, TrialConfig
from tuner.errors import ProfileError
from tuner.report.export import build_profile, select
from tuner.report.profile import render_sh, render_yaml
from tuner.report.rerender import config_from_dict, for_release, rerender
from tuner.sglang.options import build_parser, builtin_table

NOW = datetime(2026, 5, 2, tzinfo=timezone.utc)
OLD, NEW = builtin_table("0.5.9"), builtin_table("0.5.23")


def _profile(**row_changes: object):  # type: ignore[no-untyped-def]
    flags = (
        "--model-path",
        "/models/tiny",
        "--tp-size",
        "1",
        "--nsa-prefill-backend",
        "flashmla_sparse",
        "--enable-nan-detection",
        "--mem-fraction-static",
        "0.85",
        "--cuda-graph-bs",
        "1",
        "2",
        "4",
    )
    config = {
        "mem_fraction_static": 0.85,
        "cuda_graph": {"enabled": True, "max_bs": None, "bs": [1, 2, 4]},
        "flags": [],
    }
    row = make_row(
        0,
        argv=(*SIM_LAUNCHER, *flags, "--host", "127.0.0.1", "--port", "41234"),
        config=config,
        **row_changes,
    )
    data = study_data([row])
    return build_profile(data, select(data, trial=0), now=NOW)


def test_config_round_trips_from_its_stored_json() -> None:
    config = config_from_dict(
        {"mem_fraction_static": 0.9, "cuda_graph": {"enabled": False}, "flags": [["cuda-graph-bs", [1, 2]]]}
    )
    assert config == TrialConfig(
        mem_fraction_static=0.9, cuda_graph=CudaGraph(enabled=False), flags=(("cuda-graph-bs", (1, 2)),)
    )


def test_knobs_renamed_fixed_flags_carried_removed_ones_reported() -> None:
    profile = _profile()
    flags = [f for f in profile.argv if f.startswith("--")]
    assert "--nsa-prefill-backend" in flags and "--sim-scenario" in flags
    done = for_release(profile, OLD, NEW)
    argv = done.argv
    assert argv[:3] == ("python", "-m", "sglang.launch_server")
    assert "--cuda-graph-bs-decode" in argv and "--cuda-graph-bs" not in argv
    assert "--dsa-prefill-backend" in argv and "--nsa-prefill-backend" not in argv
    assert "--enable-nan-detection" not in argv and not any(a.startswith("--sim-") for a in argv)
    assert argv[-4:] == ("--host", "127.0.0.1", "--port", "30000")
    assert done.sglang_version == "0.5.23" and done.port == 30000
    assert "TUNER_SIM_STATE_DIR" not in done.env
    notes = "\n".join(done.notes)
    assert "renamed: --nsa-prefill-backend -> --dsa-prefill-backend" in notes
    assert "DROPPED: --enable-nan-detection is not accepted by SGLang 0.5.23 (removed in 0.5.13)" in notes
    assert "SGLANG_ENABLE_ASYNC_ASSERT=1" in notes
    build_parser(NEW).parse_args(list(argv[3:]))  # the release's parser takes it as is


def test_graphs_off_becomes_the_current_spelling_and_the_script_runs_on_port_30000() -> None:
    profile = _profile()
    off = {"mem_fraction_static": 0.85, "cuda_graph": {"enabled": False}, "flags": []}
    at = profile.argv.index("--cuda-graph-bs")
    argv = (*profile.argv[:at], "--disable-cuda-graph", *profile.argv[at + 4 :])
    profile = replace(profile, config=off, argv=argv)
    done = for_release(profile, OLD, NEW)
    assert "--disable-decode-cuda-graph" in done.argv and "--disable-cuda-graph" not in done.argv
    script = render_sh(done, NEW)
    # 0.5.10+ warns that `sglang serve` is the recommended entrypoint: the export writes that one
    assert '--port "${PORT:-30000}"' in script and 'exec "${SGLANG:-sglang}" serve' in script
    assert "# re-rendered for SGLang 0.5.23" in script and "recommends `sglang serve`" in script
    from tuner.report.profile import entrypoint

    module = ("python", "-m", "sglang.launch_server")
    assert entrypoint(module, "0.5.9") == ("python -m sglang.launch_server", None)  # no such advice yet
    assert entrypoint(module, "0.5.10")[0] == entrypoint(module, "0.5.17")[0] == '"${SGLANG:-sglang}" serve'
    assert entrypoint(("python", "-m", "tuner.sim"), "0.5.17") == ("python -m tuner.sim", None)
    assert "disable-decode-cuda-graph: true" in render_yaml(done, NEW)
    bash = shutil.which("bash")
    if bash:
        subprocess.run([bash, "-n"], input=script, text=True, check=True)


def test_the_simulator_can_pretend_to_be_the_target() -> None:
    done = for_release(_profile(), OLD, NEW, engine="sim")
    launcher = done.argv[: done.argv.index("--model-path")]
    assert launcher[-2:] == ("--sim-sglang-version", "0.5.23") and "tuner.sim" in launcher


def test_a_flag_the_target_refuses_outright_is_an_error_naming_it() -> None:
    with pytest.raises(ProfileError, match="nsa"):
        rerender(
            ("--model-path", "m"),
            TrialConfig(sparse_prefill_backend="flashmla_sparse"),
            NEW,
            builtin_table("0.5.2"),
        )
