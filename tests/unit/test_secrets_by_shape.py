"""Secrets by their shape as well as their name; the tuner's own schema keys kept; database URLs
masked through SQLAlchemy's URL object (tuner.secrets, tuner.store.connect, tuner.cli.output)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from tuner.cli.output import result_json, schema_keys
from tuner.secrets import (
    REDACTED,
    is_secret_env,
    is_secret_flag,
    redact_argv,
    redact_env,
    redact_space_text,
    scrub,
    scrub_tree,
    secret_values,
)
from tuner.store.connect import mask_url

# Made-up credentials of each known format (none is real).
TOKENS = {
    "hugging-face": "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345",
    "openai-project": "sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12Mn34",
    "anthropic": "sk-ant-api03-Ab12Cd34Ef56Gh78Ij90Kl12",
    "stripe": "sk_live_Ab12Cd34Ef56Gh78Ij90",
    "github-classic": "ghp_Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr",
    "github-fine-grained": "github_pat_11ABCDEFG0123456789_abcdefghijklmnop",
    "gitlab": "glpat-Ab12Cd34Ef56Gh78Ij90",
    "slack": "xoxb-123456789012-abcdefABCDEF",
    "aws-access-key": "AKIAIOSFODNN7EXAMPLE",
    "google": "AIzaSyAb12Cd34Ef56Gh78Ij90Kl12Mn34Op5",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
}
SHAPED = {
    "query-token": ("https://h.example/f?token=Zz9Yy8Xx7&x=1", "Zz9Yy8Xx7"),
    "query-signature": ("https://acct.blob.core.windows.net/c?sv=2024&sig=QmFzZTY0U2ln%3D", "QmFzZTY0U2ln"),
    "s3-presigned": ("https://b.s3.amazonaws.com/k?X-Amz-Signature=abcdef0123456789", "abcdef0123456789"),
    "query-password": ("postgresql://u@h/db?password=hunter2hunter2", "hunter2hunter2"),
    "bearer-header": ("Authorization: Bearer opaque-credential-42", "opaque-credential-42"),
    "token-header": ('-H "Authorization: Token abcd1234efgh"', "abcd1234efgh"),
    "basic-header": ("Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA=="),
    "pem-key": ("-----BEGIN PRIVATE KEY-----\nMIIEv\n-----END PRIVATE KEY-----", "MIIEv"),
}


@pytest.mark.parametrize("kind", sorted(TOKENS))
def test_a_known_token_format_is_hidden_under_any_name(kind: str) -> None:
    token = TOKENS[kind]
    assert token not in redact_env({"MODEL_REVISION": token, "NOTE": f"use {token} here"}).values()
    assert not any(token in a for a in redact_argv(["--served-model-name", token, f"--revision={token}"]))
    assert token not in scrub(f"loading with {token}\n", ())
    assert token in secret_values([], {"NEUTRAL": token})
    text = f"fixed_flags:\n  revision: {token}\n# comment {token}\n"
    assert token not in redact_space_text(text)


@pytest.mark.parametrize("kind", sorted(SHAPED))
def test_credentials_in_urls_and_headers_are_hidden(kind: str) -> None:
    text, secret = SHAPED[kind]
    shown = scrub(text, ())
    assert secret not in shown and REDACTED in shown


@pytest.mark.parametrize(
    "name", ["MYSQL_PWD", "DB_PASS", "REDIS_PASS", "GPG_PASSPHRASE", "SENTRY_DSN", "dbPass", "SESSION_COOKIE"]
)
def test_common_credential_names_are_secret(name: str) -> None:
    assert is_secret_env(name)


@pytest.mark.parametrize(
    "name", ["PWD", "OLDPWD", "BYPASS_CACHE", "COMPASS_DIR", "PASSTHROUGH", "TOKENIZERS_PARALLELISM"]
)
def test_words_that_only_contain_a_credential_word_are_not(name: str) -> None:
    assert not is_secret_env(name)


@pytest.mark.parametrize("flag", ["--db-pass", "--ssl-keyfile-passphrase", "--sentry-dsn"])
def test_credential_flags_by_word(flag: str) -> None:
    assert is_secret_flag(flag)


@pytest.mark.parametrize(
    "text",
    [
        "Basic usage of the API",
        "Token generation throughput: 5123.4 tok/s",
        "max_total_num_tokens=424242, chunked_prefill_size=8192",
        "https://huggingface.co/org/model?revision=main",
        "--key-file /etc/ssl/server.pem",
    ],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert scrub(text, ()) == text


@dataclass(frozen=True)
class _Launch:
    key: str
    output_tokens_source: str
    env: dict[str, str]
    api_key: str = field(default="", repr=False)  # a secret field: never a schema key


@dataclass(frozen=True)
class _Result:
    launch: _Launch
    token_count: int


def test_schema_keys_are_kept_and_secrets_still_hidden() -> None:
    result = _Result(
        launch=_Launch(
            key="3f2a9c",
            output_tokens_source="usage",
            env={"HF_TOKEN": "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345", "key": "plain"},
            api_key="sk-live-secret-value-0001",
        ),
        token_count=7,
    )
    keep = schema_keys(result)
    assert {"key", "output_tokens_source", "env", "launch"} <= keep and "api_key" not in keep
    data = json.loads(result_json(result, secrets=["sk-live-secret-value-0001"]))
    assert data["launch"]["key"] == "3f2a9c" and data["launch"]["output_tokens_source"] == "usage"
    assert data["launch"]["env"]["HF_TOKEN"] == REDACTED
    assert data["launch"]["api_key"] == REDACTED


def test_scrub_tree_without_schema_keys_still_hides_secret_names() -> None:
    assert scrub_tree({"key": "abc", "output_tokens_source": "usage"}, ()) == {
        "key": REDACTED,
        "output_tokens_source": REDACTED,
    }
    assert scrub_tree({"key": "abc"}, (), keep=frozenset({"key"})) == {"key": "abc"}


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://tuner:pa/ss@db.example:5432/exp",
        "postgresql://tuner:pa ss@db.example/exp",
        "postgresql://tuner:p@ss@db.example/exp",
        "postgresql://tuner:p:a:ss@db.example/exp",
        "postgresql+psycopg://tuner@db.example/exp?password=pa55word&sslmode=require",
        "postgresql://tuner:x@db.example/exp?sslpassword=pa55word",
    ],
)
def test_a_database_url_prints_without_its_password(url: str) -> None:
    shown = mask_url(url)
    for secret in ("pa/ss", "pa ss", "p@ss", "ss@", "p:a:ss", "pa55word"):
        assert secret not in shown, shown
    assert "db.example" in shown and shown.startswith("postgresql")
    assert REDACTED in shown
