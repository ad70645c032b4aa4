"""The run-settings models: one declaration per section, in step with the spec, checked when built."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

import tuner.space
from tuner.bench.settings import BenchSettings, LoadPoint, RequestTimeouts, Workload, WorkloadKind
from tuner.config import LaunchTimeouts
from tuner.gate.settings import DEFAULT_PROMPTS, GatePrompt, GateSettings
from tuner.space.goals import Objective, Slo
from tuner.space.sections import Budget, EngineSpec, SamplerSpec, SpaceFile
from tuner.store.codec import to_jsonable

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = yaml.safe_load((ROOT / "search_spaces" / "template.yaml").read_text())

MINIMAL = """\
name: m
sglang_version: "0.5.9"
fixed_flags: {model-path: /m}
"""


def test_template_lists_the_keys_of_every_section_in_order() -> None:
    assert list(TEMPLATE) == SpaceFile.file_keys()
    assert list(TEMPLATE["gate"]) == GateSettings.file_keys()
    assert list(TEMPLATE["bench"]) == [k for k in BenchSettings.file_keys() if k != "timeouts"] + ["timeouts"]
    assert set(TEMPLATE["bench"]["workload"]) == set(Workload.file_keys()) - {"path"}
    assert list(TEMPLATE["bench"]["load_points"][0]) == LoadPoint.file_keys()
    assert list(TEMPLATE["bench"]["timeouts"]) == RequestTimeouts.file_keys()
    assert list(TEMPLATE["budget"]) == Budget.file_keys()
    assert list(TEMPLATE["timeouts"]) == LaunchTimeouts.file_keys()
    assert list(TEMPLATE["sampler"]) == SamplerSpec.file_keys()


def test_a_minimal_file_gets_the_model_defaults(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(MINIMAL)
    space = tuner.space.load_space(path, environ={})
    assert space.gate == GateSettings() and space.gate.prompts == DEFAULT_PROMPTS
    assert space.bench == BenchSettings() and space.bench.load_points == (LoadPoint(concurrency=64),)
    assert space.timeouts == LaunchTimeouts() and space.budget == Budget() and space.sampler == SamplerSpec()
    assert space.engine == EngineSpec(kind="sglang") and space.constraints == ()


def test_a_section_with_only_comments_takes_its_defaults(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(MINIMAL + "gate:\nbench:\n  workload:\n  timeouts:\nbudget:\nconstraints:\n")
    space = tuner.space.load_space(path, environ={})
    assert space.gate == GateSettings() and space.bench == BenchSettings() and space.budget == Budget()


def test_relative_paths_are_taken_from_the_space_file(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(MINIMAL + "bench:\n  workload: {kind: jsonl, path: data/u.jsonl}\n")
    workload = tuner.space.load_space(path, environ={}).bench.workload
    assert workload.kind is WorkloadKind.JSONL and workload.path == tmp_path / "data" / "u.jsonl"


def test_a_built_in_gate_prompt_is_changed_only_where_the_file_says(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(MINIMAL + "gate:\n  prompts:\n    - {name: long, max_tokens: 500}\n")
    (long,) = tuner.space.load_space(path, environ={}).gate.prompts
    assert long == DEFAULT_PROMPTS[3].model_copy(update={"max_tokens": 500})


@pytest.mark.parametrize(
    "build",
    [
        lambda: LoadPoint(concurrency=0),
        lambda: Workload(range_ratio=1.5),
        lambda: GateSettings(burst_size=0),
        lambda: GatePrompt(name="x", prompt="x", expect_regex="("),
        lambda: GatePrompt(name="x", prompt="x", max_tokens=4, min_tokens=5),
        lambda: LaunchTimeouts(startup_s=0),
        lambda: BenchSettings(load_points=()),
        lambda: BenchSettings(objective_point=1),
        lambda: SamplerSpec(kind="cmaes"),  # type: ignore[arg-type]
        lambda: Budget(n_trials=True),
        lambda: Objective(metric="throughput", direction="maximize"),
        lambda: Objective(metric="ttft_p99_ms", direction="maximize"),
        lambda: Slo(metric="kv_tokens", op="==", bound=1.0),  # type: ignore[arg-type]
        lambda: RequestTimeouts(colour=1),  # type: ignore[call-arg]
    ],
)
def test_models_built_in_code_are_checked_too(build: object) -> None:
    assert callable(build)
    with pytest.raises(ValidationError):
        build()


def test_models_built_in_code_keep_field_names_and_values() -> None:
    timeouts = RequestTimeouts(idle_read_s=0.3, first_byte_s=5)
    assert timeouts.idle_read_s == 0.3 and timeouts.first_byte_s == 5.0 and timeouts.connect_s == 10.0
    assert GateSettings(timeout_s=20).timeout_s == 20.0
    assert EngineSpec(kind="sim", scenario="tiny-fast").sim_sglang_version == "0.5.9"


def test_settings_models_are_stored_as_their_fields() -> None:
    assert to_jsonable(LoadPoint(concurrency=4)) == {
        "concurrency": 4,
        "request_rate": None,
        "burstiness": 1.0,
        "num_prompts": None,
    }
    assert to_jsonable(Workload())["kind"] == "random"


def test_the_package_exports_the_space_api() -> None:
    names = {
        "load_space",
        "SearchSpace",
        "suggest",
        "config_from_params",
        "forbidden_reason",
        "parse_set_overrides",
        "enumerate_choices",
    }
    assert names <= set(tuner.space.__all__)
    assert all(getattr(tuner.space, name) is getattr(tuner.space.loader, name) for name in names)
