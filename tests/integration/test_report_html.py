"""`report --html` in headless Chromium: loads offline, no console errors, the front shows the trials."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from profile_study import ProfileStudy

pytestmark = pytest.mark.integration

CHROMIUM = next(
    (p for n in ("chromium", "chromium-browser", "google-chrome") if (p := shutil.which(n))), None
)


def _chromium(*args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        f"--user-data-dir={tmp / 'profile'}",
    ]
    return subprocess.run([CHROMIUM or "chromium", *flags, *args], capture_output=True, text=True, timeout=90)


@pytest.fixture(scope="module")
def page(profile_study: ProfileStudy, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("html") / "report.html"
    done = profile_study.tuner("report", "--db", str(profile_study.db), "--html", str(out))
    assert done.returncode == 0, done.stderr
    return out


def test_the_page_is_self_contained_and_lists_every_trial(page: Path, profile_study: ProfileStudy) -> None:
    text = page.read_text()
    assert not re.search(r"""<script[^>]+src=|<link[^>]+href=["']http""", text), "the page fetches something"
    assert "Plotly.newPlot" in text and "tiny-fast-sim-v1: tuning report" in text
    assert "workload: random prompts, 16 in / 4 out tokens; load C=4 (8 requests)" in text
    assert text.count("<tr class=") == 4  # one row per trial
    assert "exec " in text and "Recommended launch" in text


# Records console.error calls and uncaught errors into the DOM (chromium logs both only at INFO level).
RECORDER = (
    "<script>window.__errors=[];const __e=console.error;console.error=function(...a){"
    "__errors.push(a.join(' '));__e.apply(console,a)};window.addEventListener('error',"
    "ev=>__errors.push(String(ev.message)));window.addEventListener('load',()=>{"
    "const d=document.createElement('pre');d.id='console-errors';d.textContent=JSON.stringify(__errors);"
    "document.body.appendChild(d)})</script>"
)


@pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium on this machine (apt-get install chromium; CI installs it)"
)
def test_the_page_loads_in_chromium_without_console_errors_and_draws_the_front(
    page: Path, tmp_path: Path
) -> None:
    text = page.read_text()
    probed = tmp_path / "probed.html"
    probed.write_text(text.replace("<head>", "<head>" + RECORDER, 1))
    done = _chromium(
        "--enable-logging=stderr",
        "--v=0",
        "--virtual-time-budget=8000",
        "--dump-dom",
        probed.as_uri(),
        tmp=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Uncaught" not in done.stderr, done.stderr[-2000:]
    dom = done.stdout
    errors = re.search(r'<pre id="console-errors">(.*?)</pre>', dom, re.S)
    assert errors is not None, "the page never finished loading"
    assert errors.group(1) == "[]", errors.group(1)
    # plotly drew the front: one marker per trial that has a measurement (failed ones are listed, not drawn)
    measured = len(re.findall(r"<tr class='(?:feasible|infeasible)", text))
    assert measured >= 1
    assert 'class="main-svg"' in dom
    assert len(re.findall(r'class="point"', dom)) == measured
