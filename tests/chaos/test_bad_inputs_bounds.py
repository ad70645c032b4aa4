"""The bad-input corpus, third round: sizes nobody bounded, files the tool does not own, secrets as
searched knobs, releases, engines and faults checked at read time, URLs and hosts, output that
cannot be written. Each is one line on stderr, exit 2, and nothing is touched (the same harness
as test_bad_inputs.py, whose families these join).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_bad_inputs import RUN, TINY, Case, _prepare, _snapshot, _space, _with_space
from test_bad_inputs import signals as signals  # noqa: F401 - the fixture, used by name

from tuner.cli import main

ROOT = Path(__file__).resolve().parents[2]
CHOICES = "choices: [null, 2048, 4096]"


def _many_choices(n: int) -> bytes:
    return _space(**{CHOICES: "choices: [" + ", ".join(str(1024 + i) for i in range(n)) + "]"})


def _many_params(n: int) -> bytes:
    extra = "".join(
        f"  - {{name: p{i}, flag: max-running-requests, kind: int, low: 1, high: 9}}\n" for i in range(n)
    )
    return _space(**{"params:\n": "params:\n" + extra})


def _fifo(tmp: Path) -> None:
    os.mkfifo(tmp / "space.yaml")


def _runs_is_a_file(tmp: Path) -> None:
    (tmp / "space.yaml").write_text(TINY)
    (tmp / "runs").write_text("not a folder\n")


def _with_param(text: str) -> tuple[tuple[str, bytes], ...]:
    return _with_space(**{"params:\n": "params:\n" + text})


SIZES = [
    Case("choices-40000", RUN, "at most 1,024 choices", (("space.yaml", _many_choices(40_000)),)),
    Case("params-300", RUN, "more than 256 searched params", (("space.yaml", _many_params(300)),)),
    Case("gate-burst-1e8", RUN, "burst_size", _with_space(**{"burst_size: 2": "burst_size: 100000000"})),
    Case(
        "gate-max-tokens-huge", RUN, "max_tokens", _with_space(**{"max_tokens: 8": "max_tokens: 99999999999"})
    ),
    Case(
        "warmup-huge",
        RUN,
        "warmup_requests",
        _with_space(**{"warmup_requests: 0": "warmup_requests: 10000000"}),
    ),
    Case("seed-2-40", RUN, "seed", _with_space(**{"input_len: 16,": "input_len: 16, seed: 1099511627776,"})),
    Case(
        "rate-1e12",
        RUN,
        "request_rate",
        _with_space(
            **{"{concurrency: 4, num_prompts: 8}": "{concurrency: 4, num_prompts: 8, request_rate: 1e12}"}
        ),
    ),
    Case(
        "load-points-100",
        RUN,
        "load_points",
        _with_space(
            **{"    - {concurrency: 4, num_prompts: 8}\n": "    - {concurrency: 4, num_prompts: 8}\n" * 100}
        ),
    ),
    Case(
        "confirm-repeats-1e9",
        ("confirm", "--space", "space.yaml", "--db", "exp.db", "--repeats", "1000000000"),
        "--repeats",
        _with_space(),
    ),
    Case(
        "capacity-start-negative",
        ("capacity", "--space", "space.yaml", "--trial", "0", "--start", "-3"),
        "--start",
        _with_space(),
    ),
    Case(
        "capacity-start-nan",
        ("capacity", "--space", "space.yaml", "--trial", "0", "--start", "nan"),
        "--start",
        _with_space(),
    ),
    Case(
        "capacity-repeats-huge",
        ("capacity", "--space", "space.yaml", "--trial", "0", "--repeats", "1000000"),
        "--repeats",
        _with_space(),
    ),
    Case(
        "capacity-prompts-huge",
        ("capacity", "--space", "space.yaml", "--trial", "0", "--prompts", "1000000000"),
        "--prompts",
        _with_space(),
    ),
    Case("parallel-1000", (*RUN, "--parallel", "1000"), "--parallel", _with_space()),
    Case(
        "finalists-repeats-huge",
        RUN,
        "repeats",
        _with_space(**{"budget:\n": "search:\n  finalists: {repeats: 1000000}\n\nbudget:\n"}),
    ),
    Case("budget-trials-huge", RUN, "n_trials", _with_space(**{"n_trials: 6": "n_trials: 100000000000"})),
    Case("trials-1e12", (*RUN, "--trials", "1000000000000"), "--trials", _with_space()),
    Case(
        "gate-burst-size-flag",
        ("gate", "--url", "http://127.0.0.1:9", "--burst-size", "100000000"),
        "--burst-size",
    ),
    Case("export-trial-negative", ("export", "--db", "exp.db", "--trial", "-1"), "--trial"),
    Case(
        "export-min-free-vram-huge",
        ("export", "--db", "exp.db", "--best", "--min-free-vram", "10**12"),
        "--min",
    ),
]

FILES = [
    Case("space-fifo", RUN, "not a regular file", make=_fifo),
    Case("runs-is-a-file", RUN, "runs", make=_runs_is_a_file),
]

SECRETS = [
    Case(
        "param-api-key",
        RUN,
        "takes a credential",
        _with_param("  - {name: api-key, kind: categorical, choices: [a, b]}\n"),
    ),
    Case(
        "param-flag-hf-token",
        RUN,
        "takes a credential",
        _with_param("  - {name: tok, flag: hf-token, kind: categorical, choices: [a, b]}\n"),
    ),
    Case(
        "choice-shaped-like-a-token",
        RUN,
        "shaped like a credential",
        _with_param("  - {name: revision, kind: categorical, choices: [main, hf_AbCdEfGhIjKlMnOpQr012]}\n"),
    ),
    Case(
        "param-ssl-keyfile-password",
        RUN,
        "takes a credential",
        _with_param("  - {name: ssl-keyfile-password, kind: categorical, choices: [a, b]}\n"),
    ),
]

RELEASES = [
    Case(
        "validate-version-empty",
        ("validate", "--space", "space.yaml", "--sglang-version", ""),
        "release",
        _with_space(),
    ),
    Case(
        "export-version-injection",
        ("export", "--db", "exp.db", "--trial", "0", "--sglang-version", "0.5.9; rm -rf /"),
        "release",
    ),
    Case(
        "export-engine-sim-alone",
        ("export", "--db", "exp.db", "--trial", "0", "--engine", "sim"),
        "--sglang-version",
    ),
    Case(
        "sim-inject-unknown-key",
        RUN,
        "unknown sim_inject key",
        _with_space(**{"  scenario: tiny-fast\n": '  scenario: tiny-fast\n  sim_inject: ["nope=1"]\n'}),
    ),
    Case(
        "sim-inject-bad-value",
        RUN,
        "hang_at must be one of",
        _with_space(
            **{"  scenario: tiny-fast\n": '  scenario: tiny-fast\n  sim_inject: ["hang_at=later"]\n'}
        ),
    ),
    Case(
        "sim-inject-rate-above-1",
        RUN,
        "http_error_rate",
        _with_space(
            **{"  scenario: tiny-fast\n": '  scenario: tiny-fast\n  sim_inject: ["http_error_rate=7"]\n'}
        ),
    ),
    Case(
        "model-path-empty", RUN, "empty string", _with_space(**{"model-path: /models/tiny": 'model-path: ""'})
    ),
]

PLACES = [
    Case(
        "host-url", RUN, "host", _with_space(**{"gpu_busy_policy": "host: http://127.0.0.1\ngpu_busy_policy"})
    ),
    Case(
        "host-shell",
        RUN,
        "host",
        _with_space(**{"gpu_busy_policy": 'host: "127.0.0.1; rm -rf /"\ngpu_busy_policy'}),
    ),
    Case(
        "host-unresolvable",
        RUN,
        "cannot resolve host",
        _with_space(**{"gpu_busy_policy": "host: no-such-host.invalid\ngpu_busy_policy"}),
    ),
    Case(
        "log-dir-newline",
        RUN,
        "control character",
        _with_space(**{"gpu_busy_policy": 'log_dir: "a\\nb"\ngpu_busy_policy'}),
    ),
    Case(
        "log-dir-nul",
        RUN,
        "control character",
        _with_space(**{"gpu_busy_policy": 'log_dir: "a\\0b"\ngpu_busy_policy'}),
    ),
    Case("bench-url-open-bracket", ("bench", "--url", "http://[::1"), "server URL"),
    Case("bench-url-ftp", ("bench", "--url", "ftp://127.0.0.1:30000"), "server URL"),
    Case("gate-url-userinfo", ("gate", "--url", "http://u:pw@127.0.0.1:30000"), "no user, password"),
    Case("db-file-memory-uri", ("status", "--db", "sqlite:///file::memory:?uri=true"), "in-memory"),
    Case(
        "db-unknown-sqlite-arg", ("status", "--db", "sqlite:///exp.db?bogus=1"), "unknown SQLite URL argument"
    ),
    Case("yaml-merge-scalar", RUN, "for merging", (("space.yaml", b"name: a\n<<: 5\n"),)),
]

ROUND3 = SIZES + FILES + SECRETS + RELEASES + PLACES
FAMILIES = {"sizes": SIZES, "files": FILES, "secrets": SECRETS, "releases": RELEASES, "places": PLACES}


def test_the_third_round_corpus_covers_its_families() -> None:
    assert all(len(cases) >= 2 for cases in FAMILIES.values()) and len(ROUND3) >= 40, len(ROUND3)


@pytest.mark.parametrize("case", ROUND3, ids=[c.id for c in ROUND3])
def test_bad_input_is_one_line_exit_2_and_touches_nothing(
    case: Case,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    signals: None,  # noqa: F811 - the fixture
) -> None:
    before = _prepare(case, tmp_path)
    monkeypatch.chdir(tmp_path)
    caplog.set_level(logging.INFO, logger="tuner")
    try:
        code = main(list(case.argv))
    except SystemExit as exc:  # argparse
        code = int(exc.code or 0)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert case.phrase in lines[0], lines[0]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert _snapshot(tmp_path) == before, "a file was created or changed"


@pytest.mark.parametrize("target", ["/dev/full", "closed"])
def test_output_that_cannot_be_written_is_one_line_exit_2(tmp_path: Path, target: str) -> None:
    (tmp_path / "space.yaml").write_text(TINY)
    argv = [sys.executable, "-m", "tuner", "validate", "--space", "space.yaml"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if target == "closed":
        done = subprocess.run(
            argv,
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            timeout=60,
            pass_fds=(),
            close_fds=True,
            preexec_fn=lambda: os.close(1),
        )
    else:
        with open("/dev/full", "w") as full:
            done = subprocess.run(
                argv, cwd=tmp_path, stdout=full, stderr=subprocess.PIPE, text=True, env=env, timeout=60
            )
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ") or "Traceback" in line]
    assert done.returncode == 2, done.stderr
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
