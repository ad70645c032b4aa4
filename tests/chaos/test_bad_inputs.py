"""A corpus of bad inputs through the CLI: each is one line on stderr and exit 2, and nothing is touched.

The issue's table (the inputs that ended in tracebacks, `--trials` ≤ 0, fixed flags out of
range, special and oversized space files, read-only commands on a missing database, a database
of another program) plus every space-file mistake of the loader's unit tests. Each case runs
`tuner.cli.main` in-process (fast: the corpus is large); the cases that used to end in a
traceback run once more as real `python -m tuner` processes.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tuner.cli import main
from tuner.interrupts import INTERRUPTS

ROOT = Path(__file__).resolve().parents[2]
TINY = (ROOT / "search_spaces" / "tiny-fast-sim.yaml").read_text()


@dataclass(frozen=True)
class Case:
    """One bad input: files to write (name -> bytes, or a maker), the command, a phrase of the message."""

    id: str
    argv: tuple[str, ...]
    phrase: str
    files: tuple[tuple[str, bytes], ...] = ()
    make: Callable[[Path], None] | None = None


def _space(**edits: str) -> bytes:
    text = TINY
    for old, new in edits.items():
        assert old in text, old
        text = text.replace(old, new)
    return text.encode()


def _fixed(flag: str) -> bytes:
    return _space(**{"  tp-size: 1\n": f"  tp-size: 1\n  {flag}\n"})


def _fixed_mem(value: str) -> bytes:
    text = TINY.replace("  tp-size: 1\n", f"  tp-size: 1\n  mem-fraction-static: {value}\n")
    start = text.index("  - name: mem-fraction-static")
    end = text.index("  - name: cuda_graph")
    text = text[:start] + text[end:]
    return text.replace("mem-fraction-static: 0.8, ", "").encode()


def _foreign_db(tmp: Path) -> None:
    con = sqlite3.connect(tmp / "other.db")
    con.execute("CREATE TABLE studies (id INTEGER PRIMARY KEY, title TEXT)")
    con.execute("CREATE TABLE trials (id INTEGER PRIMARY KEY, study INTEGER, score REAL)")
    con.execute("INSERT INTO trials VALUES (1, 1, 0.5)")
    con.commit()
    con.close()


RUN = ("run", "--space", "space.yaml", "--db", "exp.db", "--plain")


def _alias_bomb() -> bytes:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    return _space(**{"version: 1\n": "version: 1\n" + "\n".join(lines) + "\n"})


_STUDY_DB: list[Path] = []


def _study_db(tmp: Path) -> None:
    """A database with one recorded trial of the tiny space (run once per session, then copied)."""
    if not _STUDY_DB:
        folder = Path(tempfile.mkdtemp(prefix="tuner-corpus-"))
        (folder / "space.yaml").write_text(TINY)
        argv = [
            sys.executable,
            "-m",
            "tuner",
            "run",
            "--space",
            "space.yaml",
            "--db",
            "exp.db",
            "--trials",
            "1",
        ]
        subprocess.run([*argv, "--plain"], cwd=folder, capture_output=True, timeout=120, check=True)
        _STUDY_DB.append(folder / "exp.db")
    shutil.copy(_STUDY_DB[0], tmp / "exp.db")
    (tmp / "space.yaml").write_text(TINY)


def _no_params() -> bytes:
    start, end = TINY.index("params:\n"), TINY.index("gate:\n")
    return (TINY[:start] + "params: []\n\n" + TINY[end:]).encode()


def _with_space(*argv: str, **edits: str) -> tuple[tuple[str, bytes], ...]:
    return (("space.yaml", _space(**edits)),)


SPACE = (("space.yaml", TINY.encode()),)

# Injected text, names that would be paths, values the store or a launch cannot hold, alias bombs.
HARDENING = [
    Case("study-newline", (*RUN, "--study", "s\ntouch /tmp/PWNED #"), "--study", _with_space()),
    Case("study-empty", (*RUN, "--study", ""), "--study", _with_space()),
    Case("study-300-chars", (*RUN, "--study", "s" * 300), "at most 160", _with_space()),
    Case("study-slash", (*RUN, "--study", "../x"), "--study", _with_space()),
    Case("version-escapes", RUN, "runs/ folder", _with_space(**{"version: 1": 'version: "1/../../../x"'})),
    Case("space-name-300", RUN, "at most 100", _with_space(**{"name: tiny-fast-sim": "name: " + "n" * 300})),
    Case(
        "choice-newline",
        RUN,
        "control characters",
        _with_space(**{"choices: [null, 2048, 4096]": 'choices: [null, "a\\ntouch PWNED"]'}),
    ),
    Case("int-above-2-63", RUN, "2**63", _with_space(**{"[off, 8, 16]": "[off, 8, 99999999999999999999]"})),
    Case(
        "graph-bs-text-huge",
        RUN,
        "batch sizes",
        _with_space(**{"[off, 8, 16]": '[off, 8, "bs:1,2,99999999999999999999"]'}),
    ),
    Case(
        "set-graph-huge",
        ("trial", "--space", "space.yaml", "--set", "cuda_graph=max:99999999999999999999"),
        "max batch size",
        SPACE,
    ),
    Case("bound-above-2-63", RUN, "2**63", _with_space(**{"high: 0.90": "high: 18446744073709551617"})),
    Case(
        "env-nul",
        RUN,
        "control character",
        _with_space(**{"gpu_busy_policy": 'env: {A: "x\\0y"}\ngpu_busy_policy'}),
    ),
    Case(
        "env-unclosed-var",
        RUN,
        "unclosed",
        _with_space(**{"gpu_busy_policy": 'env: {A: "${NOPE_UNSET_VAR"}\ngpu_busy_policy'}),
    ),
    Case("fixed-flag-newline", RUN, "control character", _with_space(**{"/models/tiny": '"/m\\nx"'})),
    Case("alias-bomb", RUN, "alias bomb", (("space.yaml", _alias_bomb()),)),
    Case("seed-huge", (*RUN, "--seed", "99999999999999999999"), "--seed", _with_space()),
    Case("seed-negative", (*RUN, "--seed=-1"), "--seed", _with_space()),
    Case("sampler-seed-huge", RUN, "seed", _with_space(**{"seed: 1": "seed: 99999999999"})),
    Case("gpus-empty-item", (*RUN, "--gpus", "0,,1"), "--gpus", _with_space()),
    Case("db-in-memory", (*RUN[:3], "--db", "sqlite://"), "in-memory", _with_space()),
    Case("db-read-only-for-run", (*RUN[:3], "--db", "sqlite:///exp.db?mode=ro"), "read-only", _with_space()),
    Case(
        "db-mysql-no-driver", (*RUN[:3], "--db", "mysql://u:p@h/db"), "driver is not installed", _with_space()
    ),
    Case("db-unknown-scheme", (*RUN[:3], "--db", "foo://bar"), "not a database URL", _with_space()),
    Case(
        "warm-start-db-absent",
        (*RUN, "--warm-start", "x", "--warm-start-db", "nope.db"),
        "no experiments database",
        _with_space(),
    ),
    Case(
        "engine-python-missing",
        RUN,
        "not an executable interpreter",
        (
            (
                "space.yaml",
                b"name: s\nengine: {kind: sglang, python: /nonexistent}\nsglang_version: '0.5.9'\n"
                b"fixed_flags: {model-path: /m}\nparams:\n  - {name: mem-fraction-static, kind: float, "
                b"low: 0.5, high: 0.9}\n",
            ),
        ),
    ),
    Case("parallel-too-many", (*RUN, "--parallel", "5"), "--parallel 5", _with_space()),
    Case("gpus-not-on-node", (*RUN, "--gpus", "5"), "not on this node", _with_space()),
    Case("budget-timeout-0", RUN, "must be > 0", _with_space(**{"timeout: 2m": "timeout: 0"})),
    Case("params-empty", RUN, "at least one param", (("space.yaml", _no_params()),)),
    Case(
        "space-gpus-empty",
        RUN,
        "empty list names no GPU",
        _with_space(**{"gpu_busy_policy": "gpus: []\ngpu_busy_policy"}),
    ),
    Case(
        "forbidden-everything",
        RUN,
        "forbids every configuration",
        _with_space(**{"baselines:": "forbidden:\n  - {cuda_graph: [off, 8, 16]}\nbaselines:"}),
    ),
    Case(
        "set-nan",
        ("trial", "--space", "space.yaml", "--set", "mem-fraction-static=nan"),
        "finite",
        _with_space(),
    ),
    *[
        Case(
            f"bench-{flag.strip('-')}-{value}",
            ("bench", "--url", "http://127.0.0.1:9", flag, value),
            flag,
            (),
        )
        for flag, value in (
            ("--concurrency", "0"),
            ("--input-len", "0"),
            ("--num-prompts", "0"),
            ("--range-ratio", "2"),
            ("--request-rate", "-1"),
            ("--input-len", "100000000"),
        )
    ],
    Case("gate-record-proc", ("gate", "--url", "http://127.0.0.1:9", "--record", "/proc/x"), "cannot write"),
    Case(
        "export-to-proc",
        ("export", "--db", "exp.db", "--best", "-o", "/proc/x.sh"),
        "cannot write",
        make=_study_db,
    ),
    Case(
        "export-to-folder", ("export", "--db", "exp.db", "--best", "-o", "."), "is a folder", make=_study_db
    ),
    Case(
        "html-to-proc", ("report", "--db", "exp.db", "--html", "/proc/x.html"), "cannot write", make=_study_db
    ),
    Case("html-to-folder", ("report", "--db", "exp.db", "--html", "."), "is a folder", make=_study_db),
    Case(
        "report-out-a-file", ("report", "--db", "exp.db", "--out", "space.yaml"), "is a file", make=_study_db
    ),
    Case(
        "set-newline",
        ("trial", "--space", "space.yaml", "--set", "chunked-prefill-size=a\nb"),
        "control characters",
        _with_space(),
    ),
]
TABLE = [
    Case("binary-space", RUN, "not UTF-8", (("space.yaml", bytes(range(256)) * 4),)),
    Case("latin1-space", RUN, "not UTF-8", (("space.yaml", "name: caf\xe9\n".encode("latin-1")),)),
    Case("nul-in-space", RUN, "NUL byte", (("space.yaml", b"name: a\x00b\n"),)),
    Case(
        "deep-flow-nesting", RUN, "nested too deeply", (("space.yaml", b"a: " + b"[" * 20000 + b"]" * 20000),)
    ),
    Case(
        "deep-block-nesting",
        RUN,
        "nested too deeply",
        (
            (
                "space.yaml",
                "".join(f"{'  ' * i}k{i}:\n" for i in range(200)).encode() + b"  " * 200 + b"x: 1\n",
            ),
        ),
    ),
    Case(
        "python-apply-tag",
        RUN,
        "!!python/object/apply",
        (("space.yaml", b'name: !!python/object/apply:os.system ["touch pwned"]\n'),),
    ),
    Case("python-name-tag", RUN, "!!python/name", (("space.yaml", b"name: !!python/name:os.system\n"),)),
    Case(
        "custom-tag", RUN, "is not allowed", (("space.yaml", _space(**{"version: 1": "version: !secret 1"})),)
    ),
    Case("space-dev-zero", ("run", "--space", "/dev/zero", "--db", "exp.db"), "not a regular file"),
    Case("space-is-a-folder", ("run", "--space", ".", "--db", "exp.db"), "cannot read space file"),
    Case("space-missing", ("run", "--space", "absent.yaml", "--db", "exp.db"), "cannot read space file"),
    Case(
        "space-over-1mib",
        RUN,
        "larger than 1024 KiB",
        (("space.yaml", TINY.encode() + b"#" * (1 << 20)),),
    ),
    Case("space-empty", RUN, "space file is empty", (("space.yaml", b""),)),
    Case("space-a-list", RUN, "must be a mapping", (("space.yaml", b"- a\n- b\n"),)),
    Case("fixed-mem-fraction-7", RUN, "(0, 1]", (("space.yaml", _fixed_mem("7")),)),
    Case("fixed-mem-fraction-0", RUN, "(0, 1]", (("space.yaml", _fixed_mem("0")),)),
    Case("fixed-mem-fraction-text", RUN, "mem-fraction-static", (("space.yaml", _fixed_mem("lots")),)),
    Case("fixed-tp-size-0", RUN, "≥ 1", (("space.yaml", _space(**{"  tp-size: 1\n": "  tp-size: 0\n"})),)),
    Case(
        "fixed-tp-size-text",
        RUN,
        "tp-size",
        (("space.yaml", _space(**{"  tp-size: 1\n": "  tp-size: two\n"})),),
    ),
    Case("fixed-unknown-flag", RUN, "no-such-flag", (("space.yaml", _fixed("no-such-flag: 3")),)),
    Case("fixed-port", RUN, "set by the tuner", (("space.yaml", _fixed("port: 30000")),)),
    Case("trials-0", (*RUN, "--trials", "0"), "--trials", (("space.yaml", _space()),)),
    Case("trials-minus-1", (*RUN, "--trials", "-1"), "--trials", (("space.yaml", _space()),)),
    Case("trials-text", (*RUN, "--trials", "many"), "--trials", (("space.yaml", _space()),)),
    Case("gpus-huge", (*RUN, "--gpus", "99999999999999999999"), "--gpus", (("space.yaml", _space()),)),
    Case("gpus-negative", (*RUN, "--gpus=-1"), "--gpus", (("space.yaml", _space()),)),
    Case("gpus-twice", (*RUN, "--gpus", "0,0"), "--gpus", (("space.yaml", _space()),)),
    Case(
        "space-gpus-huge",
        RUN,
        "gpus",
        (("space.yaml", _space(**{"gpu_busy_policy": "gpus: [99999999999999999999]\ngpu_busy_policy"})),),
    ),
    Case("timeout-0", (*RUN, "--timeout", "0s"), "--timeout", (("space.yaml", _space()),)),
    Case("timeout-text", (*RUN, "--timeout", "soon"), "--timeout", (("space.yaml", _space()),)),
    Case(
        "db-in-proc",
        ("run", "--space", "space.yaml", "--db", "sqlite:////proc/x.db"),
        "/proc",
        (("space.yaml", _space()),),
    ),
    Case(
        "db-dev-zero",
        ("run", "--space", "space.yaml", "--db", "/dev/zero"),
        "not a regular file",
        (("space.yaml", _space()),),
    ),
    Case(
        "db-not-sqlite",
        ("run", "--space", "space.yaml", "--db", "space.yaml"),
        "not a SQLite database",
        (("space.yaml", _space()),),
    ),
    Case(
        "db-missing-folder",
        ("run", "--space", "space.yaml", "--db", "no/such/exp.db"),
        "does not exist",
        (("space.yaml", _space()),),
    ),
    Case(
        "db-folder-is-file",
        ("run", "--space", "space.yaml", "--db", "space.yaml/exp.db"),
        "not a folder",
        (("space.yaml", _space()),),
    ),
    Case(
        "db-of-another-program",
        ("run", "--space", "space.yaml", "--db", "other.db"),
        "another program",
        (("space.yaml", _space()),),
        _foreign_db,
    ),
    Case("status-foreign-db", ("status", "--db", "other.db"), "another program", make=_foreign_db),
    Case("status-missing-db", ("status", "--db", "exp.db"), "no experiments database"),
    Case("studies-missing-db", ("studies", "--db", "exp.db"), "no experiments database"),
    Case("report-missing-db", ("report", "--db", "exp.db", "--out", "out"), "no experiments database"),
    Case("export-missing-db", ("export", "--db", "exp.db", "--best"), "no experiments database"),
    Case(
        "confirm-repeats-0",
        ("confirm", "--space", "space.yaml", "--db", "exp.db", "--repeats", "0"),
        "--repeats",
        (("space.yaml", _space()),),
    ),
    Case("unknown-option", ("status", "--bogus"), "unrecognized arguments"),
    *[Case(f"hardening-{c.id}", c.argv, c.phrase, c.files, c.make) for c in HARDENING],
    Case("unknown-command", ("launch",), "invalid choice"),
]


def _space_mistakes() -> list[Case]:
    spec = importlib.util.spec_from_file_location(
        "space_error_cases", ROOT / "tests/unit/test_space_errors.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [Case(f"space-{c[0]}", RUN, c[4], (("space.yaml", c[1].encode()),)) for c in module.CASES]


CORPUS = TABLE + _space_mistakes()


def test_the_corpus_is_large_enough() -> None:
    assert len(TABLE) >= 40 and len(CORPUS) >= 60 + 20, len(CORPUS)


def _snapshot(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(folder.rglob("*"))
    }


def _prepare(case: Case, tmp: Path) -> dict[str, str]:
    for name, data in case.files:
        (tmp / name).write_bytes(data)
    if case.make is not None:
        case.make(tmp)
    return _snapshot(tmp)


@pytest.fixture
def signals() -> Iterator[None]:
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)
    INTERRUPTS.clear()


@pytest.mark.parametrize("case", CORPUS, ids=[c.id for c in CORPUS])
def test_bad_input_is_one_line_exit_2_and_touches_nothing(
    case: Case,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    signals: None,
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


# The inputs that ended in a traceback (the table), through real processes.
TRACEBACKS = [
    "binary-space",
    "deep-flow-nesting",
    "python-apply-tag",
    "db-in-proc",
    "db-of-another-program",
    "gpus-huge",
    "trials-minus-1",
    "status-missing-db",
    "space-dev-zero",
]


@pytest.mark.parametrize("case_id", TRACEBACKS)
def test_former_tracebacks_through_the_real_cli(case_id: str, tmp_path: Path) -> None:
    case = next(c for c in TABLE if c.id == case_id)
    before = _prepare(case, tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "tuner", *case.argv], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and case.phrase in lines[0], done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert _snapshot(tmp_path) == before
