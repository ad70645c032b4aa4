"""Shipped spaces, Optuna suggestion, baselines, --set overrides, enumeration and secrets."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from tuner.config import CudaGraph, TrialConfig
from tuner.errors import ConfigError
from tuner.sglang.options import known_versions
from tuner.space.loader import (
    SearchSpace,
    config_from_params,
    enumerate_choices,
    forbidden_reason,
    load_space,
    parse_set_overrides,
    suggest,
)
from tuner.space.params import ParamKind
from tuner.space.source import parse_duration

ROOT = Path(__file__).resolve().parents[2]
SPACES = sorted((ROOT / "search_spaces").glob("*.yaml"))
SEED_LIST = (1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64)

optuna.logging.set_verbosity(optuna.logging.WARNING)

CONDITIONAL = """\
name: cond
sglang_version: "0.5.9"
fixed_flags: {model-path: /m}
params:
  - {name: mem-fraction-static, kind: categorical, choices: [0.85, 0.92]}
  - {kind: cuda_graph, choices: [off, on, 64, [1, 2, 4]]}
  - flag: chunked-prefill-size
    kind: int
    low: 2048
    high: 8192
    step: 2048
    when: {cuda_graph: [max:64, "bs:1,2,4"]}
  - {name: radix, flag: disable-radix-cache, kind: bool, when: {chunked-prefill-size: [2048]}}
  - {flag: max-running-requests, kind: int, low: 8, high: 256, log: true}
forbidden:
  - {cuda_graph: on, mem-fraction-static: 0.92, reason: graphs need headroom}
baselines:
  - {mem-fraction-static: 0.85, cuda_graph: off, max-running-requests: 64}
"""


@pytest.fixture()
def cond_space(tmp_path: Path) -> SearchSpace:
    path = tmp_path / "cond.yaml"
    path.write_text(CONDITIONAL)
    return load_space(path, environ={})


@pytest.mark.parametrize("path", SPACES, ids=[p.name for p in SPACES])
def test_every_shipped_space_loads_and_renders_every_choice(path: Path) -> None:
    space = load_space(path)
    assert space.study_name == f"{space.name}-v{space.version}"
    assert space.params and space.objectives
    for params in enumerate_choices(space):
        assert isinstance(config_from_params(space, params), TrialConfig)


def test_shipped_files_are_the_expected_set() -> None:
    names = {p.name for p in SPACES}
    assert {
        "glm5-nvfp4-sm120.yaml",
        "glm5-nvfp4-sm120-sim.yaml",
        "tiny-fast-sim.yaml",
        "template.yaml",
    } <= names


def test_seed_space_is_the_seed_deployment_on_sglang_059() -> None:
    space = load_space(ROOT / "search_spaces/glm5-nvfp4-sm120.yaml")
    fixed = dict(space.fixed_flags)
    assert space.engine.kind == "sglang" and space.engine.module == "sglang.launch_server"
    assert space.sglang_version == "0.5.9" and space.checked_sglang_version == "0.5.9"
    assert fixed["model-path"] == "/models/GLM-5-NVFP4" and fixed["tp-size"] == 8
    assert fixed["quantization"] == "modelopt_fp4" and "kv-cache-dtype" in fixed
    assert fixed["trust-remote-code"] is True
    assert space.param("cuda_graph").choices == (
        "off",
        "max:32",
        "max:64",
        "bs:" + ",".join(map(str, SEED_LIST)),
    )
    assert "trtllm/trtllm" in space.param("sparse_backends").choices
    assert space.budget.n_trials == 40 and space.budget.timeout_s == 8 * 3600
    assert space.timeouts.startup_s >= 1800
    assert space.bench.load_points[0].concurrency == 64
    assert any(p.expect == "Paris" for p in space.gate.prompts)
    assert [s.name for s in space.constraints] == ["min_free_vram_mib>=2048"]
    assert [o.metric for o in space.objectives] == ["output_throughput", "kv_tokens"]


def test_seed_baselines_round_trip_to_the_seed_configs() -> None:
    space = load_space(ROOT / "search_spaces/glm5-nvfp4-sm120.yaml")
    first, second = (config_from_params(space, b) for b in space.baselines)
    assert first == TrialConfig(
        mem_fraction_static=0.85,
        cuda_graph=CudaGraph(enabled=False),
        sparse_prefill_backend="trtllm",
        sparse_decode_backend="trtllm",
    )
    assert second.mem_fraction_static == 0.92
    assert second.cuda_graph == CudaGraph(enabled=True, bs=SEED_LIST)
    assert second.cuda_graph.effective_max_bs == 64


def test_sim_space_keeps_the_failing_choices_and_is_demo_sized() -> None:
    space = load_space(ROOT / "search_spaces/glm5-nvfp4-sm120-sim.yaml")
    assert space.engine.kind == "sim" and space.engine.module == "tuner.sim"
    assert space.engine.scenario == "glm5-nvfp4-sm120" and space.sglang_version == "0.5.9"
    assert any("flashmla" in c for c in space.param("sparse_backends").choices)
    assert space.param("mem-fraction-static").high == pytest.approx(0.95)
    assert "off" in space.param("cuda_graph").choices
    assert space.timeouts.startup_s <= 60
    assert all(p.name != "long" and p.max_tokens <= 32 for p in space.gate.prompts)
    assert space.bench.load_points[0].prompts <= 64 and space.bench.workload.output_len <= 32


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
@pytest.mark.parametrize("kind", ["random", "tpe"])
def test_suggest_gives_valid_configs_and_honours_conditions(cond_space: SearchSpace, kind: str) -> None:
    sampler: optuna.samplers.BaseSampler = (
        optuna.samplers.RandomSampler(seed=3)
        if kind == "random"
        else optuna.samplers.TPESampler(seed=3, n_startup_trials=5, multivariate=True, group=True)
    )
    study = optuna.create_study(directions=["maximize", "maximize"], sampler=sampler)
    seen_graphs = set()
    for _ in range(40):
        trial = study.ask()
        config, params = suggest(cond_space, trial)
        assert params == trial.params
        assert config == config_from_params(cond_space, params)
        graph = params["cuda_graph"]
        seen_graphs.add(graph)
        flags = dict(config.flags)
        has_chunk = graph in ("max:64", "bs:1,2,4")
        assert ("chunked-prefill-size" in params) is has_chunk
        assert ("radix" in params) is (params.get("chunked-prefill-size") == 2048)
        assert 8 <= flags["max-running-requests"] <= 256
        if has_chunk:
            assert flags["chunked-prefill-size"] in (2048, 4096, 6144, 8192)
        assert config.mem_fraction_static in (0.85, 0.92)
        assert (
            config.cuda_graph
            == {
                "off": CudaGraph(enabled=False),
                "on": CudaGraph(enabled=True),
                "max:64": CudaGraph(max_bs=64),
                "bs:1,2,4": CudaGraph(bs=(1, 2, 4)),
            }[graph]
        )
        study.tell(trial, [float(len(params)), 1.0])
    assert len(seen_graphs) >= 3
    # the CUDA-graph param is one always-present categorical with the frozen choice list
    for frozen in study.trials:
        dist = frozen.distributions["cuda_graph"]
        assert isinstance(dist, optuna.distributions.CategoricalDistribution)
        assert dist.choices == ("off", "on", "max:64", "bs:1,2,4")


def test_suggest_uses_step_and_log_distributions(tmp_path: Path) -> None:
    space = load_space(ROOT / "search_spaces/glm5-nvfp4-sm120.yaml")
    trial = optuna.create_study().ask()
    config, _ = suggest(space, trial)
    mem = trial.distributions["mem-fraction-static"]
    assert isinstance(mem, optuna.distributions.FloatDistribution) and mem.step == pytest.approx(0.01)
    assert config.mem_fraction_static == round(config.mem_fraction_static, 2)


def test_config_from_params_rejects_unknown_missing_and_outside(cond_space: SearchSpace) -> None:
    good = {"mem-fraction-static": 0.85, "cuda_graph": "off", "max-running-requests": 64}
    assert config_from_params(cond_space, good).cuda_graph == CudaGraph(enabled=False)
    with pytest.raises(ConfigError, match="unknown param 'bogus'"):
        config_from_params(cond_space, {**good, "bogus": 1})
    with pytest.raises(ConfigError, match="param 'chunked-prefill-size' is missing"):
        config_from_params(cond_space, {**good, "cuda_graph": "max:64"})
    with pytest.raises(ConfigError, match="max-running-requests: 999 is outside the space"):
        config_from_params(cond_space, {**good, "max-running-requests": 999})
    # an inactive child left behind by an override is ignored
    assert dict(config_from_params(cond_space, {**good, "chunked-prefill-size": 4096}).flags) == {
        "max-running-requests": 64
    }


def test_set_overrides_parse_each_kind_and_report_bad_items(cond_space: SearchSpace) -> None:
    got = parse_set_overrides(
        cond_space,
        ["mem-fraction-static=0.92", "cuda_graph=1,2,4", "chunked-prefill-size=4096", "radix=true"],
    )
    assert got == {
        "mem-fraction-static": 0.92,
        "cuda_graph": "bs:1,2,4",
        "chunked-prefill-size": 4096,
        "radix": True,
    }
    assert parse_set_overrides(cond_space, ["cuda_graph=64"]) == {"cuda_graph": "max:64"}
    assert parse_set_overrides(cond_space, ["cuda_graph=off"]) == {"cuda_graph": "off"}
    for item, phrase in [
        ("mem-fraction-static", "expected NAME=VALUE"),
        ("nope=1", "unknown param 'nope'"),
        ("mem-fraction-static=0.9", "0.9 is outside the space"),
        ("chunked-prefill-size=abc", "expected an integer"),
        ("cuda_graph=32", "max:32 is outside the space"),
        ("radix=maybe", "true or false"),
    ]:
        with pytest.raises(ConfigError, match=phrase):
            parse_set_overrides(cond_space, [item])


def test_enumerate_covers_every_choice_and_range_end_without_forbidden(cond_space: SearchSpace) -> None:
    dicts = list(enumerate_choices(cond_space))
    assert dicts[0] == dict(cond_space.baselines[0])
    for p in cond_space.params:
        for value in p.ends():
            assert any(d.get(p.name) == value for d in dicts), (p.name, value)
    assert all(forbidden_reason(cond_space, d) is None for d in dicts)
    assert len({tuple(sorted(d.items())) for d in dicts}) == len(dicts)


def test_forbidden_reason_names_the_reason_and_line(cond_space: SearchSpace) -> None:
    hit = {"mem-fraction-static": 0.92, "cuda_graph": "on", "max-running-requests": 8}
    reason = forbidden_reason(cond_space, hit)
    assert reason is not None and "graphs need headroom" in reason and "cond.yaml:16" in reason
    assert forbidden_reason(cond_space, {**hit, "cuda_graph": "off"}) is None


def test_secrets_are_resolved_but_never_shown(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    text = CONDITIONAL.replace(
        "fixed_flags: {model-path: /m}", 'fixed_flags: {model-path: /m, api-key: "${MY_KEY}"}'
    )
    path.write_text(text + 'env:\n  HF_TOKEN: "${MY_HF}"\n  NCCL_DEBUG: "${LEVEL:-WARN}"\n')
    space = load_space(path, environ={"MY_HF": "hf_s3cr3t", "MY_KEY": "sk-abc"})
    assert dict(space.env) == {"HF_TOKEN": "hf_s3cr3t", "NCCL_DEBUG": "WARN"}
    assert dict(space.redacted_env()) == {"HF_TOKEN": "***", "NCCL_DEBUG": "WARN"}
    assert dict(space.redacted_fixed_flags())["api-key"] == "***"
    assert set(space.secret_values) == {"hf_s3cr3t", "sk-abc"}
    assert "hf_s3cr3t" not in repr(space) and "sk-abc" not in repr(space) and "NCCL_DEBUG" in repr(space)


def test_defaults_of_a_minimal_space(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(
        "name: m\nfixed_flags: {model-path: /m}\nparams:\n  - {kind: cuda_graph, choices: [off, on]}\n"
    )
    space = load_space(path, environ={})
    assert space.sglang_version == "auto" and space.checked_sglang_version == known_versions()[-1]
    assert space.host == "127.0.0.1" and space.gpus == () and space.gpu_busy_policy == "wait"
    assert space.log_dir == Path("runs/m-v1") and space.sampler.n_startup_trials == 8
    assert [(o.metric, o.direction) for o in space.objectives] == [
        ("output_throughput", "maximize"),
        ("kv_tokens", "maximize"),
    ]
    assert space.param("cuda_graph").kind is ParamKind.CUDA_GRAPH


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        (90, 90.0),
        ("90s", 90.0),
        ("30m", 1800.0),
        ("8h", 28800.0),
        ("1h30m", 5400.0),
        ("250ms", 0.25),
        ("1.5", 1.5),
    ],
)
def test_durations(text: object, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["8 hours", "h", "", "-5", True, "5m3"])
def test_bad_durations(text: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_slo_violation_sign() -> None:
    space = load_space(ROOT / "search_spaces/glm5-nvfp4-sm120.yaml")
    slo = space.constraints[0]
    assert slo.violation(4096) <= 0 < slo.violation(1024)
    assert slo.violation(None) > 0
