"""Every failure site mined from SGLang's source, release by release, is classified as its class.

tuner/sglang/failure_sites.json (scripts/mine_failure_sites.py) lists, per release, each raise
and log site of SGLang that means OOM, not enough memory, capture failure, unsupported GPU or
backend, NaN or a hang. A raise site is replayed as the traceback it would print (its SGLang
frame, then `Exception: message`); a log site's message is checked against the mined wording.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from typing import Any

import pytest

from tuner.config import Phase
from tuner.sglang.log_events import FailureKind
from tuner.sglang.log_sites import template_kind
from tuner.sglang.logs import classify_failure

TABLE: dict[str, Any] = json.loads(
    resources.files("tuner.sglang").joinpath("failure_sites.json").read_text(encoding="utf-8")
)
OPTION_TABLES = json.loads(resources.files("tuner.sglang").joinpath("option_tables.json").read_text("utf-8"))
EXPECTED = {
    "oom": "oom",
    "not_enough_memory": "not_enough_memory",
    "capture_failed": "capture_failed",
    "unsupported": "unsupported",
    "nan": "nan",
    "hang": "hang",
}
KIND_OUTCOME = {
    FailureKind.KV_EXHAUSTED: "oom",
    FailureKind.NOT_ENOUGH_MEMORY: "not_enough_memory",
    FailureKind.CAPTURE_FAILED: "capture_failed",
    FailureKind.UNSUPPORTED_ARCH: "unsupported",
    FailureKind.NAN: "nan",
    FailureKind.WATCHDOG: "hang",
}


def _filled(template: str) -> str:
    return re.sub(r"\{\}|%[sdrf]|%\.\d+f", "7", template)


def _sites(version: str) -> list[dict[str, str]]:
    fields = TABLE["fields"]
    return [dict(zip(fields, TABLE["sites"][i], strict=True)) for i in TABLE["versions"][version]]


def _replayed(site: dict[str, str]) -> str:
    """The outcome the classifier gives the traceback a raise site prints."""
    message = _filled(site["template"])
    lines = [
        "[2026-06-01 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1, in run_event_loop',
        f'  File "/sgl-workspace/sglang/python/sglang/srt/{site["file"]}", line 9, in {site["function"]}',
        f"{site['exception']}: {message}",
        "[2026-06-01 10:00:01] Received sigquit from a child process. It usually means the child failed.",
    ]
    return classify_failure(lines, exit_code=-9, phase=Phase.LAUNCH).outcome.value


def test_the_table_covers_every_release_of_the_option_tables() -> None:
    assert set(TABLE["versions"]) == set(OPTION_TABLES["versions"])
    for version in TABLE["versions"]:
        classes = {site["class"] for site in _sites(version)}
        assert {"oom", "not_enough_memory", "capture_failed", "hang"} <= classes, version


@pytest.mark.parametrize("version", sorted(TABLE["versions"]))
def test_every_mined_site_of_the_release_maps_to_its_class(version: str) -> None:
    wrong = []
    for site in _sites(version):
        if site["exception"].startswith("log."):
            kind = template_kind(_filled(site["template"]))
            got = KIND_OUTCOME.get(kind) if kind is not None else None
        else:
            got = _replayed(site)
        if got != EXPECTED[site["class"]]:
            wrong.append(f"{site['file']}:{site['function']} {site['template'][:60]!r}: {got}")
    assert wrong == []
