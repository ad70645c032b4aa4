"""Flag rendering, validation and --config mappings against the real option tables of several releases."""

from __future__ import annotations

import argparse
from dataclasses import replace

import pytest
import yaml

from tuner.config import CudaGraph, TrialConfig
from tuner.errors import ConfigError, FlagError
from tuner.sglang.config_yaml import config_to_argv, config_yaml
from tuner.sglang.flags import render_flags, replacement, validate_flags
from tuner.sglang.options import OptionTable, build_parser, builtin_table, table_from_entries

VERSIONS = ("0.5.4", "0.5.9", "0.5.13", "0.5.16", "0.5.20", "0.5.23")
FIXED = {"model-path": "/models/glm-5", "tp-size": 8}


def make_config(**overrides: object) -> TrialConfig:
    base = TrialConfig(
        mem_fraction_static=0.85,
        cuda_graph=CudaGraph(max_bs=64, bs=(1, 2, 4)),
        sparse_prefill_backend="flashmla_sparse",
        sparse_decode_backend="fa3",
        flags=(("enable-metrics", True), ("chunked-prefill-size", 8192)),
    )
    return replace(base, **overrides)  # type: ignore[arg-type]


def render(version: str, config: TrialConfig | None = None, **kw: object) -> tuple[str, ...]:
    return render_flags(config or make_config(), builtin_table(version), fixed=FIXED, port=30001, **kw)  # type: ignore[arg-type]


def namespace(argv: tuple[str, ...] | list[str], table: OptionTable) -> argparse.Namespace:
    return build_parser(table).parse_args(list(argv))


def after(argv: tuple[str, ...], flag: str, count: int = 1) -> list[str]:
    i = argv.index(flag)
    return list(argv[i + 1 : i + 1 + count])


# ---------------------------------------------------------------- rendering

EXPECTED_SPELLINGS = {
    # version: (max bs, bs list, prefill backend, decode backend)
    "0.5.4": ("--cuda-graph-max-bs", "--cuda-graph-bs", "--nsa-prefill-backend", "--nsa-decode-backend"),
    "0.5.9": ("--cuda-graph-max-bs", "--cuda-graph-bs", "--nsa-prefill-backend", "--nsa-decode-backend"),
    "0.5.13": ("--cuda-graph-max-bs", "--cuda-graph-bs", "--dsa-prefill-backend", "--dsa-decode-backend"),
    "0.5.16": (
        "--cuda-graph-max-bs-decode",
        "--cuda-graph-bs-decode",
        "--dsa-prefill-backend",
        "--dsa-decode-backend",
    ),
    "0.5.20": (
        "--cuda-graph-max-bs-decode",
        "--cuda-graph-bs-decode",
        "--dsa-prefill-backend",
        "--dsa-decode-backend",
    ),
    "0.5.23": (
        "--cuda-graph-max-bs-decode",
        "--cuda-graph-bs-decode",
        "--dsa-prefill-backend",
        "--dsa-decode-backend",
    ),
}


@pytest.mark.parametrize("version", VERSIONS)
def test_every_knob_gets_the_spelling_of_its_release(version: str) -> None:
    argv = render(version)
    max_bs, bs, prefill, decode = EXPECTED_SPELLINGS[version]
    assert after(argv, "--mem-fraction-static") == ["0.85"]
    assert after(argv, max_bs) == ["64"]
    assert after(argv, bs, 3) == ["1", "2", "4"]
    assert after(argv, prefill) == ["flashmla_sparse"]
    assert after(argv, decode) == ["fa3"]
    assert after(argv, "--chunked-prefill-size") == ["8192"]
    assert "--enable-metrics" in argv
    assert argv[-4:] == ("--host", "127.0.0.1", "--port", "30001")
    assert argv[:4] == ("--model-path", "/models/glm-5", "--tp-size", "8")


@pytest.mark.parametrize("version", VERSIONS)
def test_every_rendered_argv_passes_its_own_release(version: str) -> None:
    configs = [
        make_config(),
        make_config(cuda_graph=CudaGraph(enabled=False)),
        make_config(cuda_graph=None, sparse_prefill_backend=None, sparse_decode_backend=None),
        TrialConfig(),
    ]
    table = builtin_table(version)
    for config in configs:
        argv = render(version, config)
        validate_flags(argv, table)
        parsed = namespace(argv, table)
        assert parsed.port == 30001 and parsed.host == "127.0.0.1"


@pytest.mark.parametrize("version", VERSIONS)
def test_the_parser_stores_each_knob_where_the_release_reads_it(version: str) -> None:
    parsed = vars(namespace(render(version), builtin_table(version)))
    assert parsed["mem_fraction_static"] == 0.85
    new_graphs = version in ("0.5.16", "0.5.20", "0.5.23")
    assert parsed["cuda_graph_bs_decode" if new_graphs else "cuda_graph_bs"] == [1, 2, 4]
    assert parsed["cuda_graph_max_bs_decode" if new_graphs else "cuda_graph_max_bs"] == 64
    dsa = version not in ("0.5.4", "0.5.9")
    assert parsed["dsa_decode_backend" if dsa else "nsa_decode_backend"] == "fa3"


@pytest.mark.parametrize("version", VERSIONS)
def test_graphs_off_is_one_switch_in_the_release_s_current_spelling(version: str) -> None:
    argv = render(version, make_config(cuda_graph=CudaGraph(enabled=False, max_bs=8)))
    if builtin_table(version).find("--disable-cuda-graph").kind == "store_true":  # type: ignore[union-attr]
        assert "--disable-cuda-graph" in argv
    else:  # deprecated from 0.5.14: the per-phase switches mean the same without a warning
        assert "--disable-cuda-graph" not in argv
        assert "--disable-decode-cuda-graph" in argv and "--disable-prefill-cuda-graph" in argv
    assert not any(token.startswith("--cuda-graph-") for token in argv)
    assert validate_flags(argv, builtin_table(version)) == ()


def test_spellings_follow_the_table_not_the_version_number() -> None:
    newest = builtin_table("0.5.23")
    unknown = OptionTable(version="0.9.0", options=newest.options, source="installed")
    argv = render_flags(make_config(), unknown, port=1)
    assert "--dsa-decode-backend" in argv and "--cuda-graph-bs-decode" in argv
    validate_flags(argv, unknown)


def test_release_without_the_legacy_switch_gets_both_phase_switches() -> None:
    newest = builtin_table("0.5.23")
    options = tuple(o for o in newest.options if o.dest != "disable_cuda_graph")
    table = OptionTable(version="0.9.0", options=options, source="installed")
    argv = render_flags(TrialConfig(cuda_graph=CudaGraph(enabled=False)), table, port=1)
    assert argv[:2] == ("--disable-decode-cuda-graph", "--disable-prefill-cuda-graph")


def test_knob_without_any_option_in_the_release_is_a_flag_error() -> None:
    with pytest.raises(FlagError, match=r"sparse_decode_backend: SGLang 0\.5\.2 has no launch option"):
        render_flags(TrialConfig(sparse_decode_backend="fa3"), builtin_table("0.5.2"), port=1)


def test_other_flags_render_switches_lists_and_negations() -> None:
    table = builtin_table("0.5.23")
    config = TrialConfig(
        flags=(
            ("enable-metrics", True),
            ("disable-radix-cache", False),
            ("enable-tf32-matmul", False),
            ("cuda-graph-bs-prefill", (16, 32)),
        )
    )
    argv = render_flags(config, table, port=2)
    assert "--enable-metrics" in argv
    assert "--disable-radix-cache" not in argv
    assert "--no-enable-tf32-matmul" in argv  # BooleanOptionalAction: False is said explicitly
    assert after(argv, "--cuda-graph-bs-prefill", 2) == ["16", "32"]
    assert render_flags(config, table, port=2) == argv  # deterministic


def test_a_flag_set_twice_is_a_config_error() -> None:
    config = make_config(flags=(("cuda-graph-max-bs-decode", 8),))
    with pytest.raises(ConfigError, match=r"set twice.*cuda_graph\.max_bs.*cuda-graph-max-bs-decode"):
        render("0.5.23", config)
    with pytest.raises(ConfigError, match="set twice"):
        render_flags(TrialConfig(), builtin_table("0.5.23"), fixed={"port": 1}, port=2)


@pytest.mark.parametrize("name", ["--tp-size", "tp_size", "tp size"])
def test_flag_names_must_be_bare_and_hyphenated(name: str) -> None:
    with pytest.raises(ConfigError, match="expected the option's name without leading dashes"):
        render_flags(TrialConfig(flags=((name, 8),)), builtin_table("0.5.23"), port=1)


# --------------------------------------------------------------- validation


def test_nsa_flag_on_a_dsa_only_release_names_the_removal_and_the_replacement() -> None:
    with pytest.raises(FlagError) as info:
        validate_flags(["--nsa-decode-backend", "fa3"], builtin_table("0.5.23"))
    assert str(info.value) == (
        "--nsa-decode-backend is not accepted by SGLang 0.5.23 (removed in 0.5.20); use --dsa-decode-backend"
    )


def test_dsa_flag_on_an_old_release_names_the_older_spelling() -> None:
    with pytest.raises(FlagError, match=r"not accepted by SGLang 0\.5\.9 \(added in 0\.5\.13\); use --nsa-"):
        validate_flags(["--dsa-prefill-backend", "fa3"], builtin_table("0.5.9"))
    with pytest.raises(FlagError, match=r"\(added in 0\.5\.14\); use --cuda-graph-bs$"):
        validate_flags(["--cuda-graph-bs-decode", "1"], builtin_table("0.5.13"))


@pytest.mark.parametrize("version", ["0.5.20", "0.5.23"])
@pytest.mark.parametrize("flag", ["--cuda-graph-bs", "--cuda-graph-max-bs"])
def test_old_graph_flags_are_ambiguous_on_new_releases(version: str, flag: str) -> None:
    with pytest.raises(FlagError) as info:
        validate_flags([flag, "8"], builtin_table(version))
    message = str(info.value)
    assert message.startswith(
        f"{flag} is ambiguous in SGLang {version} (could match {flag}-decode, {flag}-prefill"
    )
    assert message.endswith(f"; use {flag}-decode")


def test_old_graph_flags_on_the_transition_releases_warn_with_the_replacement() -> None:
    warnings = validate_flags(
        ["--cuda-graph-bs", "1", "2", "--nsa-decode-backend", "fa3"], builtin_table("0.5.16")
    )
    assert warnings == (
        "--cuda-graph-bs is deprecated in SGLang 0.5.16 but still accepted; use --cuda-graph-bs-decode",
        "--nsa-decode-backend is deprecated in SGLang 0.5.16 but still accepted; use --dsa-decode-backend",
    )


@pytest.mark.parametrize("version", ["0.5.13", "0.5.16", "0.5.23"])
def test_nan_detection_flag_points_to_the_environment_variables(version: str) -> None:
    with pytest.raises(FlagError, match=r"--enable-nan-detection is not accepted .*\(removed in 0\.5\.13\)"):
        validate_flags(["--enable-nan-detection"], builtin_table(version))
    assert "SGLANG_ENABLE_ASYNC_ASSERT=1" in (
        replacement("--enable-nan-detection", builtin_table(version)) or ""
    )


def test_nan_detection_still_works_before_0_5_13() -> None:
    assert validate_flags(["--enable-nan-detection"], builtin_table("0.5.12")) == ()


def test_bad_choice_lists_the_valid_choices_of_that_release() -> None:
    with pytest.raises(FlagError) as info:
        validate_flags(["--nsa-decode-backend", "trtllm"], builtin_table("0.5.4"))
    assert str(info.value) == (
        "--nsa-decode-backend: invalid choice 'trtllm' for SGLang 0.5.4 "
        "(valid choices: flashmla_sparse, flashmla_kv, fa3, tilelang, aiter)"
    )
    validate_flags(["--nsa-decode-backend", "trtllm"], builtin_table("0.5.9"))


@pytest.mark.parametrize("version,flag", [("0.5.9", "--cuda-graph-bs"), ("0.5.23", "--cuda-graph-bs-decode")])
def test_comma_list_says_space_separated_ints(version: str, flag: str) -> None:
    with pytest.raises(FlagError) as info:
        validate_flags([flag, "1,2,4"], builtin_table(version))
    assert str(info.value) == (
        f"{flag}: expected space-separated ints for SGLang {version} (got '1,2,4'); write {flag} 1 2 4"
    )


def test_wrong_arity_and_stray_values_name_the_flag() -> None:
    table = builtin_table("0.5.23")
    with pytest.raises(
        FlagError, match=r"^--mem-fraction-static: wrong number of values .*expected one argument"
    ):
        validate_flags(["--mem-fraction-static"], table)
    with pytest.raises(FlagError, match=r"^stray value '0\.9' after --mem-fraction-static"):
        validate_flags(["--mem-fraction-static", "0.8", "0.9"], table)
    with pytest.raises(FlagError, match=r"^--tp-size: expected one int .*\(got 'eight'\)"):
        validate_flags(["--tp-size", "eight"], table)


def test_misspelt_flag_suggests_the_nearest_option() -> None:
    with pytest.raises(FlagError) as info:
        validate_flags(["--mem-fracton-static", "0.8"], builtin_table("0.5.23"))
    assert "no release 0.5.2–0.5.23 has it" in str(info.value)
    assert str(info.value).endswith("did you mean --mem-fraction-static?")


def test_all_problems_are_reported_at_once() -> None:
    with pytest.raises(FlagError) as info:
        validate_flags(["--nsa-prefill-backend", "fa3", "--stream-output"], builtin_table("0.5.23"))
    lines = str(info.value).splitlines()
    assert [line.split()[0] for line in lines] == ["--nsa-prefill-backend", "--stream-output"]
    assert lines[1].endswith("(removed in 0.5.20); use --incremental-streaming-output")


def test_renames_the_tables_cannot_show_come_from_the_hints() -> None:
    t23, t12 = builtin_table("0.5.23"), builtin_table("0.5.12")
    assert (
        replacement("--enable-dp-attention", t23)
        == "--attn-dp-size N instead of --dp-size N --enable-dp-attention"
    )
    assert replacement("--enable-dp-attention", t12) is None
    assert replacement("--disable-piecewise-cuda-graph", t23) == "--cuda-graph-backend-prefill disabled"
    assert replacement("--enable-piecewise-cuda-graph", t23).startswith("--cuda-graph-backend-prefill")  # type: ignore[union-attr]
    assert replacement("--speculative-dflash-draft-window-size", t23) == "--speculative-draft-window-size"


def test_retired_flag_is_an_error_even_though_the_parser_knows_its_name() -> None:
    with pytest.raises(
        FlagError, match=r"--enable-piecewise-cuda-graph is retired in SGLang 0\.5\.12.*the default"
    ):
        validate_flags(["--enable-piecewise-cuda-graph"], builtin_table("0.5.12"))


def test_deprecated_switches_that_still_work_are_warnings() -> None:
    warnings = validate_flags(["--disable-cuda-graph", "--enable-dp-attention"], builtin_table("0.5.23"))
    assert warnings[0].endswith("use --disable-decode-cuda-graph --disable-prefill-cuda-graph")
    assert "--attn-dp-size N" in warnings[1]
    assert validate_flags(["--disable-cuda-graph"], builtin_table("0.5.13")) == ()


def test_abbreviations_are_accepted_with_a_warning() -> None:
    (warning,) = validate_flags(["--tp", "8"], builtin_table("0.5.23"))
    assert warning.startswith("--tp is an abbreviation of --tp-size in SGLang 0.5.23")


def test_validation_uses_the_given_table_only() -> None:
    tiny = table_from_entries("9.9.9", [[["--only"], "only", "store", None, "int", None]], "installed")
    validate_flags(["--only", "3"], tiny)
    with pytest.raises(FlagError, match=r"--mem-fraction-static is not accepted by SGLang 9\.9\.9"):
        validate_flags(["--mem-fraction-static", "0.8"], tiny)


# ---------------------------------------------------------- --config YAML


def round_trip(
    argv: tuple[str, ...] | list[str], table: OptionTable
) -> tuple[dict[str, object], tuple[str, ...]]:
    mapping = config_yaml(argv, table)
    loaded = yaml.safe_load(yaml.safe_dump(mapping, sort_keys=False))
    assert loaded == mapping
    return mapping, config_to_argv(loaded, table)


@pytest.mark.parametrize("version", VERSIONS)
def test_config_yaml_means_what_the_argv_means(version: str) -> None:
    table = builtin_table(version)
    argv = render(version, make_config(flags=(("enable-metrics", True), ("kv-cache-dtype", "fp8_e4m3"))))
    mapping, tokens = round_trip(argv, table)
    assert mapping["mem-fraction-static"] == 0.85 and mapping["enable-metrics"] is True
    assert mapping["port"] == 30001
    assert vars(namespace(tokens, table)) == vars(namespace(argv, table))


def test_config_yaml_uses_lists_for_nargs_and_canonical_keys_for_aliases() -> None:
    table = builtin_table("0.5.16")
    argv = ["--model-path", "/m", "--cuda-graph-bs", "1", "2", "--nsa-decode-backend", "fa3", "--tp", "2"]
    mapping, tokens = round_trip(argv, table)
    assert mapping == {
        "model-path": "/m",
        "cuda-graph-bs-decode": [1, 2],
        "dsa-decode-backend": "fa3",
        "tp-size": 2,
    }
    assert vars(namespace(tokens, table)) == vars(namespace(argv, table))


@pytest.mark.parametrize("version", ["0.5.16", "0.5.23"])
def test_config_yaml_replaces_the_refused_graph_switch_with_both_phase_switches(version: str) -> None:
    table = builtin_table(version)
    argv = render(version, TrialConfig(cuda_graph=CudaGraph(enabled=False)))
    mapping, tokens = round_trip(argv, table)
    assert "disable-cuda-graph" not in mapping
    assert mapping["disable-decode-cuda-graph"] is True and mapping["disable-prefill-cuda-graph"] is True
    equivalent = [t for t in argv if t != "--disable-cuda-graph"]
    equivalent += ["--disable-decode-cuda-graph", "--disable-prefill-cuda-graph"]
    assert vars(namespace(tokens, table)) == vars(namespace(equivalent, table))


def test_config_yaml_keeps_disable_cuda_graph_where_it_is_a_plain_switch() -> None:
    mapping, _ = round_trip(["--disable-cuda-graph"], builtin_table("0.5.13"))
    assert mapping == {"disable-cuda-graph": True}


def test_config_yaml_turns_dp_attention_into_attn_dp_size() -> None:
    table = builtin_table("0.5.23")
    mapping, tokens = round_trip(["--dp-size", "4", "--enable-dp-attention"], table)
    assert mapping == {"attn-dp-size": 4}
    assert vars(namespace(tokens, table)) == {"attn_dp_size": 4}


def test_config_yaml_turns_deprecated_switch_into_its_canonical_twin() -> None:
    mapping, _ = round_trip(["--stream-output"], builtin_table("0.5.16"))
    assert mapping == {"incremental-streaming-output": True}


@pytest.mark.parametrize(
    "argv", [["--enable-tf32-matmul"], ["--enable-dp-attention"], ["--disable-piecewise-cuda-graph"]]
)
def test_config_yaml_refuses_what_only_the_command_line_accepts(argv: list[str]) -> None:
    version = "0.5.16" if argv[0] == "--disable-piecewise-cuda-graph" else "0.5.23"
    with pytest.raises(
        FlagError, match=rf"^{argv[0]}: a SGLang {version} --config file refuses it.*command line"
    ):
        config_yaml(argv, builtin_table(version))


def test_config_yaml_validates_first() -> None:
    with pytest.raises(FlagError, match="--nsa-decode-backend is not accepted"):
        config_yaml(["--nsa-decode-backend", "fa3"], builtin_table("0.5.23"))


def test_config_to_argv_follows_sglangs_rule() -> None:
    table = builtin_table("0.5.23")
    mapping = {"enable-metrics": True, "disable-radix-cache": False, "trust-remote-code": True, "tp-size": 2}
    mapping |= {"cuda-graph-bs-decode": [1, 2], "cuda-graph-bs-prefill": [], "weird": False}
    assert config_to_argv(mapping, table) == (
        "--enable-metrics",
        "--trust-remote-code",
        "--tp-size",
        "2",
        "--cuda-graph-bs-decode",
        "1",
        "2",
        "--weird",
        "false",
    )


@pytest.mark.parametrize(
    ("version", "argv", "needed"),
    [
        ("0.5.9", ["--model-path", "/m", "--tp-size", "8"], 8),
        ("0.5.9", ["--model-path", "/m", "--tp", "2", "--pp-size", "3"], 6),
        ("0.5.23", ["--model-path", "/m", "--tensor-parallel-size", "8", "--nnodes", "2"], 4),
        ("0.5.23", ["--model-path", "/m"], 1),
        ("0.5.23", ["--model-path", "/m", "--tp-size", "4", "--dp-size", "2"], 4),  # replicas: a lower bound
    ],
)
def test_min_gpus_is_tensor_times_pipeline_per_node(version: str, argv: list[str], needed: int) -> None:
    from tuner.sglang.flags import min_gpus

    assert min_gpus(argv, builtin_table(version)) == needed
