"""The runtimes' mined errors (scripts/mine_device_errors.py, device_errors.json) drive the classes."""

from __future__ import annotations

import importlib.util
import json
from importlib import resources
from pathlib import Path

import pytest

from tuner.config import Outcome, Phase
from tuner.sglang.logs import classify_failure

ROOT = Path(__file__).resolve().parents[2]
TABLE = json.loads(resources.files("tuner.sglang").joinpath("device_errors.json").read_text("utf-8"))
ROWS = [dict(zip(TABLE["fields"], row, strict=True)) for row in TABLE["errors"]]
EXPECT = {"oom": Outcome.OOM, "unsupported": Outcome.UNSUPPORTED, "fault": Outcome.CRASHED,
          "abort": Outcome.CRASHED, "environment": Outcome.ENVIRONMENT}  # fmt: skip
SERVING = [
    "[2026-05-01 10:01:20] The server is fired up and ready to roll!",
    "[2026-05-01 10:01:30 TP0] Decode batch, #running-req: 8, #token: 900, token usage: 0.01",
    "[2026-05-01 10:02:09 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 1105, in event_loop_overlap',
    '  File "/sgl/python/sglang/srt/mem_cache/allocator.py", line 120, in alloc',
]


def _spoken(row: dict[str, str]) -> str:
    """The error as it reaches a log: torch's `HIP error: <string>`, HSA's status line, a fault report."""
    if row["class"] == "abort":
        return (
            row["text"]
            .replace("%u", "2")
            .replace("%p", "0x7f35e8100000")
            .replace("%s", "x")
            .replace("%x", "29")
        )
    if row["runtime"] == "hsa":
        callback = ":0:rocdevice.cpp :3586: 1 us:  Callback: Queue 0x7f aborting with error :"
        return f"{callback} {row['name']}: {row['text']}"
    return f"torch.AcceleratorError: HIP error: {row['text']}"


def test_the_table_covers_each_class_from_both_runtimes() -> None:
    assert {(r["runtime"], r["class"]) for r in ROWS} >= {
        ("hip", "oom"), ("hip", "unsupported"), ("hip", "fault"), ("hip", "environment"),
        ("hsa", "fault"), ("hsa", "unsupported"), ("hsa", "abort"),
    }  # fmt: skip
    assert all(r["text"] for r in ROWS)


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r["name"].rsplit("/", 1)[-1] + "-" + r["text"][:20])
def test_each_mined_error_is_classed_by_its_table_class(row: dict[str, str]) -> None:
    lines = [*SERVING, _spoken(row), ""]
    verdict = classify_failure(lines, exit_code=-9, phase=Phase.BENCH)
    assert verdict.outcome is EXPECT[row["class"]], (row, verdict.message)
    if row["class"] in ("fault", "abort"):
        assert verdict.stage == "serving"  # reported inside the KV allocator: still no OOM


def _script():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(
        "mine_device_errors", ROOT / "scripts" / "mine_device_errors.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_miner_reads_hip_and_hsa_string_tables() -> None:
    mine = _script()
    hip = """const char *ihipGetErrorString(hipError_t hip_error) {
    switch(hip_error) {
        case hipErrorOutOfMemory:
            return "out of memory";
        case hipErrorAssert:
            return "device-side assert triggered";
        case hipErrorNotReady:
            return "device not ready";
    }
}"""
    rows = mine.hip_errors(hip)
    assert rows == [["hip", "hipErrorOutOfMemory", "out of memory", "oom"],
                    ["hip", "hipErrorAssert", "device-side assert triggered", "fault"]]  # fmt: skip
    hsa = """hsa_status_t hsa_status_string(hsa_status_t status, const char **status_string) {
  switch (status_u) {
    case HSA_STATUS_ERROR_EXCEPTION:
      *status_string =
          "HSA_STATUS_ERROR_EXCEPTION: An HSAIL operation resulted in a "
          "hardware exception.";
      break;
  }
}"""
    assert mine.hsa_errors(hsa) == [
        ["hsa", "HSA_STATUS_ERROR_EXCEPTION", "An HSAIL operation resulted in a hardware exception.", "fault"]
    ]
