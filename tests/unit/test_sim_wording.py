"""The simulator's KV-sizing errors in each release's words, as mined from SGLang's source, and classified."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from tuner.config import Phase
from tuner.sglang.log_sites import template_pattern
from tuner.sglang.logs import classify_failure
from tuner.sim import logfmt

TABLE = json.loads(resources.files("tuner.sglang").joinpath("failure_sites.json").read_text("utf-8"))


def _mined(version: str, cls: str) -> list[str]:
    fields = TABLE["fields"]
    sites = [dict(zip(fields, TABLE["sites"][i], strict=True)) for i in TABLE["versions"][version]]
    return [s["template"] for s in sites if s["class"] == cls]


def _speaks_mined(version: str, text: str) -> bool:
    message = text.split(": ", 1)[1]
    patterns = [template_pattern(t) for t in _mined(version, "not_enough_memory")]
    return any(p is not None and p.match(message) for p in patterns)


@pytest.mark.parametrize("version", ["0.5.2", "0.5.5", "0.5.9", "0.5.10", "0.5.13", "0.5.20", "0.5.23"])
def test_the_pool_guard_speaks_the_release_wording(version: str) -> None:
    assert _speaks_mined(version, logfmt.not_enough_memory(version, 0.6))


@pytest.mark.parametrize("version", ["0.5.14", "0.5.16", "0.5.23"])
def test_the_kv_budget_guard_exists_from_0_5_14_in_its_words(version: str) -> None:
    text = logfmt.no_room_for_kv(version, 0.88, avail_mib=12_544, pre_load_mib=141_000)
    assert text.startswith("ValueError: Loaded weights leave no GPU memory for the KV cache under")
    assert "--mem-fraction-static=0.88. Raise --mem-fraction-static above 0.912" in text
    assert _speaks_mined(version, text)
    assert not any("Loaded weights" in t for t in _mined("0.5.13", "not_enough_memory"))


@pytest.mark.parametrize(
    ("version", "budget", "function"),
    [
        ("0.5.9", False, "init_memory_pool"),
        ("0.5.12", False, "__post_init__"),
        ("0.5.14", True, "_profile_available_bytes"),
        ("0.5.22", True, "_profile_available_bytes"),
    ],
)
def test_the_simulated_traceback_is_classified_not_enough_memory(
    version: str, budget: bool, function: str
) -> None:
    error = (
        logfmt.no_room_for_kv(version, 0.6, 1000, 80_000)
        if budget
        else logfmt.not_enough_memory(version, 0.6)
    )
    block = logfmt.scheduler_exception(logfmt.kv_frames(version, budget), error)
    assert f"in {function}" in block
    verdict = classify_failure(block.splitlines(), exit_code=-9, phase=Phase.LAUNCH)
    assert (verdict.outcome.value, verdict.stage) == ("not_enough_memory", "load")
