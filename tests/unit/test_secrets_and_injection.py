"""tuner.secrets (the one secrets rule) and tuner.names: no export runs injected text or leaks a secret."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml
from support.reports import make_row, study_data

from tuner.names import name_problem, one_line, version_problem
from tuner.report.export import build_profile, select
from tuner.report.profile import render_json, render_sh, render_yaml
from tuner.secrets import (
    is_secret_env,
    is_secret_flag,
    redact_argv,
    redact_env,
    redact_space_text,
    scrub,
    scrub_tree,
    secret_values,
)
from tuner.sglang.options import builtin_table

TABLE = builtin_table("0.5.9")
NOW = datetime(2026, 5, 2, 8, 0, tzinfo=timezone.utc)
HOSTILE = "a\ntouch PWNED #"


# --- which names are secret -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "PGPASSWORD",
        "DBPASSWORD",
        "db_passwd",
        "HF_AUTH",
        "MYTOKEN",
        "apikey",
        "x_secret_y",
        "AWS_CREDENTIALS",
    ],
)
def test_a_secret_word_anywhere_in_an_env_name_is_secret(name: str) -> None:
    assert is_secret_env(name)


@pytest.mark.parametrize("name", ["TOKENIZERS_PARALLELISM", "SGLANG_MAX_TOKENS", "CUDA_VISIBLE_DEVICES"])
def test_counts_and_tokenizers_are_not_secrets(name: str) -> None:
    assert not is_secret_env(name)


@pytest.mark.parametrize(
    ("flag", "secret"),
    [
        ("--api-key", True),
        ("--admin-api-key", True),
        ("--ssl-keyfile-password", True),
        ("--hub-auth", True),
        ("--db-secret-file", True),
        ("--max-total-tokens", False),
        ("--ssl-keyfile", False),
        ("--speculative-token-map", False),
        ("--tokenizer-path", False),
    ],
)
def test_secret_flags(flag: str, secret: bool) -> None:
    assert is_secret_flag(flag) is secret


def test_values_in_argv_and_env_positions_go_whatever_their_length() -> None:
    argv = ("--api-key", "Q7z", "--admin-api-key=x", "--db", "postgresql://u:pw@h/db")
    assert redact_argv(argv) == ("--api-key", "***", "--admin-api-key=***", "--db", "postgresql://u:***@h/db")
    env = {"PGPASSWORD": "a", "DATABASE_URL": "postgresql://me:hunter2@db:5432/x", "NCCL_DEBUG": "WARN"}
    assert redact_env(env) == {
        "PGPASSWORD": "***",
        "DATABASE_URL": "postgresql://me:***@db:5432/x",
        "NCCL_DEBUG": "WARN",
    }
    assert secret_values(argv, env) == {"Q7z", "x", "pw", "a", "hunter2"}


def test_free_text_loses_short_secrets_where_they_are_quoted_and_long_ones_everywhere() -> None:
    secrets = {"Q7z", "x", "hunter2"}
    line = "server_args=ServerArgs(api_key='x', model='x-large', admin='Q7z') hunter2 Q7z2"
    assert (
        scrub(line, secrets) == "server_args=ServerArgs(api_key='***', model='x-large', admin='***') *** ***2"
    )
    assert scrub('{"k": "x"}', {"x"}) == '{"k": "***"}'
    assert scrub("connect postgresql://me:pw@db/x failed", ()) == "connect postgresql://me:***@db/x failed"


def test_a_whole_result_tree_is_scrubbed() -> None:
    tree = {"launch": {"env": {"HF_AUTH": "abc"}, "argv": ["--api-key", "abc"]}, "log": "key abc seen"}
    assert scrub_tree(tree, {"abc"}) == {
        "launch": {"env": {"HF_AUTH": "***"}, "argv": ["--api-key", "***"]},
        "log": "key *** seen",
    }


SPACE = """\
name: s  # api-key Q7z in a comment stays a comment
fixed_flags:
  model-path: /m
  api-key: "Q7z"
env:
  PGPASSWORD: hunter2
  DATABASE_URL: postgresql://me:pw@db/x
  NCCL_DEBUG: WARN
bench:
  workload: {kind: random, input_len: 16}
"""


def test_the_stored_space_text_stays_valid_yaml_with_quoted_placeholders() -> None:
    text = redact_space_text(SPACE, {"Q7z", "hunter2"})
    data = yaml.safe_load(text)
    assert data["fixed_flags"] == {"model-path": "/m", "api-key": "***"}
    assert data["env"] == {
        "PGPASSWORD": "***",
        "DATABASE_URL": "postgresql://me:***@db/x",
        "NCCL_DEBUG": "WARN",
    }
    assert data["bench"] == {"workload": {"kind": "random", "input_len": 16}}  # the rest survives
    assert "Q7z" not in text and "hunter2" not in text and ":pw@" not in text


# --- names ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["", "s\ntouch x", "a/b", "..", "-x", "a" * 161, "caf\u00e9", "a b"])
def test_unsafe_study_names_are_refused(name: str) -> None:
    assert name_problem(name)


def test_versions_cannot_name_a_path() -> None:
    assert version_problem("1/../../../x") and version_problem("..") and version_problem(-1)
    assert version_problem(2) is None and version_problem("2b.rc-1") is None


def test_one_line_escapes_every_control_character() -> None:
    assert one_line("a\nb\r\x1b[31m\x00\u2028") == "a\\nb\\r\\x1b[31m\\x00\\u2028"


# --- exported files ----------------------------------------------------------------------------------


def hostile_profile(launcher: tuple[str, ...]):
    argv = (*launcher, "--model-path", HOSTILE, "--api-key", "Q7z", "--host", "127.0.0.1", "--port", "41000")
    env = {"PGPASSWORD": "pg", "DATABASE_URL": "postgresql://u:dbpw@h/x", "HF_AUTH": "hfa", "NOTE": HOSTILE}
    row = make_row(0, argv=argv, env=env, study=f"s{HOSTILE}", gate_reason=f"odd\n{HOSTILE}")
    data = replace(study_data([row]), name=f"s{HOSTILE}")
    profile = build_profile(data, select(data, trial=0), now=NOW)
    return replace(profile, params={"mode": HOSTILE, "mem-fraction-static": 0.8})


def test_no_injected_line_runs_from_an_exported_script(tmp_path: Path) -> None:
    bash, true = shutil.which("bash"), shutil.which("true")
    if bash is None or true is None:
        pytest.skip("no bash")
    script = render_sh(hostile_profile((true,)), TABLE)
    head = script[: script.index("set -euo pipefail")]
    assert all(line.startswith("#") for line in head.splitlines()), head
    (tmp_path / "l.sh").write_text(script)
    env = {"PATH": "/usr/bin:/bin", "SGLANG_API_KEY": "k", "PGPASSWORD": "p", "HF_AUTH": "h"}
    subprocess.run([bash, "l.sh"], cwd=tmp_path, env=env, check=True, timeout=30)
    assert not (tmp_path / "PWNED").exists()


def test_yaml_and_json_exports_keep_hostile_text_as_values_and_leak_nothing() -> None:
    profile = hostile_profile(("/venv/bin/python", "-m", "tuner.sim"))
    yml, js, sh = render_yaml(profile, TABLE), render_json(profile, TABLE), render_sh(profile, TABLE)
    comments = [line for line in yml.splitlines() if not line.startswith("#")]
    assert yaml.safe_load(yml)["model-path"] == HOSTILE
    assert all(":" in line for line in comments), comments  # no injected key or stray line
    assert json.loads(js)["knobs"]["mode"] == HOSTILE
    for text in (yml, js, sh):
        for secret in ("Q7z", "dbpw", "hfa", ": pg"):
            assert secret not in text, (secret, text)


def test_a_space_stored_by_an_older_version_is_yaml_again() -> None:
    from tuner.secrets import readable_space_text

    old = "fixed_flags:\n  api-key: ***\n  model-path: /m\nenv:\n  HF_TOKEN: ***  # scrubbed\n"
    assert yaml.safe_load(readable_space_text(old)) == {
        "fixed_flags": {"api-key": "***", "model-path": "/m"},
        "env": {"HF_TOKEN": "***"},
    }
