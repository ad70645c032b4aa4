"""The one secrets rule: which names hold credentials, and how their values are hidden.

Every file the tool writes (the store's argv/env columns and stored space text, exported
scripts, YAML and JSON, the HTML report, `studies --show-space`, `trial --json`) goes through
these functions; nothing else decides what is secret.

- An environment variable (or any other key of a space file) is secret when its name contains
  PASSWORD, PASSWD, PGPASS, TOKEN, SECRET, KEY, AUTH or CREDENTIAL anywhere, in any case
  (PGPASSWORD, DBPASSWORD, HF_AUTH, OPENAI_API_KEY). TOKENIZER and token counts
  (TOKENIZERS_PARALLELISM, SGLANG_MAX_TOKENS) stay readable.
- A launch flag takes a secret when one of its words names a credential (`--ssl-keyfile-password`)
  or its last word is key/token/auth (`--api-key`, `--hf-token`); counts such as
  `--max-total-tokens` and paths such as `--ssl-keyfile` are knobs, not secrets.
- The password of a URL's user-info (`postgresql://user:pw@host/db`) is secret in any value.
- Values in argv and env positions are replaced whatever their length; free text (logs a server
  echoes) is scrubbed of every known secret of at least `MIN_FREE_TEXT_LEN` characters, shorter ones
  where they stand quoted or after `=`.
- A stored space file stays valid YAML: a secret value becomes the quoted placeholder `"***"`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence

import yaml

__all__ = [
    "REDACTED",
    "is_secret_env",
    "is_secret_flag",
    "is_secret_name",
    "redact_argv",
    "redact_env",
    "readable_space_text",
    "redact_space_text",
    "redact_url",
    "redact_value",
    "scrub",
    "scrub_tree",
    "secret_values",
]

REDACTED = "***"
MIN_FREE_TEXT_LEN = 3  # a shorter secret is scrubbed from free text only where it stands quoted or after =

_WORDS = ("PASSWORD", "PASSWD", "PGPASS", "TOKEN", "SECRET", "KEY", "AUTH", "CREDENTIAL")
_SECRET_NAME = re.compile("|".join(_WORDS), re.IGNORECASE)
# words that merely contain one of those: TOKENIZERS_PARALLELISM, SGLANG_MAX_TOKENS (a count)
_NOT_SECRET = re.compile(r"TOKENIZ|(?:MAX|MIN|NUM)_?TOKENS(?![A-Z])", re.IGNORECASE)
_FLAG_ANY_WORD = re.compile(r"password|passwd|pgpass|secret|credential", re.IGNORECASE)
_FLAG_LAST_WORD = frozenset({"key", "token", "auth", "apikey", "authkey"})
# scheme://user:password@host : the password is everything between the first ':' and the last '@'
_URL_PASSWORD = re.compile(r"(?P<head>(?:\b[A-Za-z][A-Za-z0-9+.-]*)?://[^\s:/@]*:)(?P<pw>[^\s/]*)(?P<at>@)")


def is_secret_env(name: str) -> bool:
    """True for an environment variable (or space key) whose value is a credential."""
    return bool(_SECRET_NAME.search(_NOT_SECRET.sub("", name)))


def is_secret_flag(flag: str) -> bool:
    """True for a launch flag whose value is a credential (`--api-key`, `--ssl-keyfile-password`)."""
    words = [w for w in re.split(r"[-_]+", flag.lstrip("-").split("=", 1)[0]) if w]
    if not words:
        return False
    return words[-1].lower() in _FLAG_LAST_WORD or any(_FLAG_ANY_WORD.search(w) for w in words)


def is_secret_name(name: str) -> bool:
    """True for a key of a space file (a fixed flag without dashes, or an env name) that holds a secret."""
    return is_secret_flag(name) or is_secret_env(name)


def redact_url(text: str) -> str:
    """`text` with the password of every `scheme://user:password@host` replaced by ***."""
    return _URL_PASSWORD.sub(lambda m: f"{m['head']}{REDACTED}{m['at']}" if m["pw"] else m[0], text)


def _url_passwords(text: str) -> set[str]:
    return {m["pw"] for m in _URL_PASSWORD.finditer(text) if m["pw"]}


def redact_value(name: str, value: str) -> str:
    """The value of variable `name` as it may be written anywhere: *** for a secret name, else URL-safe."""
    return REDACTED if is_secret_env(name) else redact_url(value)


def redact_argv(argv: Sequence[str]) -> tuple[str, ...]:
    """The argv with every secret flag's value (`--api-key X`, `--api-key=X`) and URL password hidden."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        flag, eq, _ = arg.partition("=")
        if flag.startswith("-") and is_secret_flag(flag):
            if eq:
                out.append(f"{flag}={REDACTED}")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(redact_url(arg))
    return tuple(out)


def redact_env(env: Mapping[str, str] | Iterable[tuple[str, str]]) -> dict[str, str]:
    """The environment with every secret-named value replaced by *** and URL passwords hidden."""
    items = env.items() if isinstance(env, Mapping) else env
    return {k: redact_value(k, v) for k, v in items}


def secret_values(argv: Sequence[str], env: Mapping[str, str] | Iterable[tuple[str, str]]) -> frozenset[str]:
    """The literal secrets in an argv and environment, to scrub from every other text (logs echo them)."""
    found: set[str] = set()
    for i, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        if flag.startswith("-") and is_secret_flag(flag):
            if eq:
                found.add(value)
            elif i + 1 < len(argv):
                found.add(argv[i + 1])
        found |= _url_passwords(arg)
    items = env.items() if isinstance(env, Mapping) else env
    for key, value in items:
        if is_secret_env(key):
            found.add(value)
        found |= _url_passwords(value)
    return frozenset(s for s in found if s and s != REDACTED)


def _short_pattern(secret: str) -> re.Pattern[str]:
    quoted = re.escape(secret)
    return re.compile(rf"(?<=['\"=]){quoted}(?=['\"\s,;)}}\]]|$)")


def scrub(text: str, secrets: Iterable[str]) -> str:
    """The text with every secret (raw or JSON-escaped) and every URL password replaced by ***."""
    for secret in sorted(secrets, key=len, reverse=True):
        for form in {secret, json.dumps(secret)[1:-1]}:
            if len(form) >= MIN_FREE_TEXT_LEN:
                text = text.replace(form, REDACTED)
            else:
                text = _short_pattern(form).sub(REDACTED, text)
    return redact_url(text)


def scrub_tree(value: object, secrets: Iterable[str]) -> object:
    """A JSON-ready value (dicts, lists, strings) with every string scrubbed, and every secret-named key's
    string value replaced by *** (a whole result printed by `trial --json`)."""
    found = frozenset(secrets)
    if isinstance(value, str):
        return scrub(value, found)
    if isinstance(value, list):
        return [scrub_tree(v, found) for v in value]
    if isinstance(value, dict):
        return {
            k: REDACTED if isinstance(v, str) and is_secret_name(str(k)) else scrub_tree(v, found)
            for k, v in value.items()
        }
    return value


# ------------------------------------------------------------------------------ space text


def _secret_spans(node: yaml.Node, out: list[tuple[int, int]]) -> None:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if (
                isinstance(key, yaml.ScalarNode)
                and is_secret_name(str(key.value))
                and isinstance(value, yaml.ScalarNode)
            ):
                out.append((value.start_mark.index, value.end_mark.index))
            else:
                _secret_spans(value, out)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _secret_spans(item, out)
    elif isinstance(node, yaml.ScalarNode) and _url_passwords(str(node.value)):
        out.append((node.start_mark.index, node.end_mark.index))


def _placeholder(original: str) -> str:
    """A secret scalar's replacement: "***", or for a URL the URL with its password hidden, quoted."""
    try:
        value = yaml.safe_load(original)
    except yaml.YAMLError:
        value = None
    if isinstance(value, str) and _url_passwords(value):
        return json.dumps(redact_url(value))
    return json.dumps(REDACTED)


_BARE_PLACEHOLDER = re.compile(r"(:[ \t]+)\*\*\*(?=[ \t]*(?:#.*)?$)", re.MULTILINE)


def readable_space_text(text: str) -> str:
    """A stored space file as YAML again: older versions wrote a bare `***` (an alias to YAML), which
    made the whole text unreadable; it becomes the quoted placeholder."""
    return _BARE_PLACEHOLDER.sub(lambda m: f'{m[1]}"{REDACTED}"', text)


def redact_space_text(text: str, secrets: Iterable[str] = ()) -> str:
    """A space file as it may be stored: every secret value a quoted placeholder, still valid YAML.

    Values are found by position (the value of a secret-named key, a URL with a password), so a
    secret of any length goes; `secrets` (values resolved from ${VAR}) are then replaced in the rest
    of the text (comments) by a plain word that keeps the YAML valid.
    """
    spans: list[tuple[int, int]] = []
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        root = None
    if root is not None:
        _secret_spans(root, spans)
    for start, end in sorted(spans, reverse=True):
        text = text[:start] + _placeholder(text[start:end]) + text[end:]
    for secret in sorted(set(secrets) - {REDACTED}, key=len, reverse=True):
        if len(secret) >= MIN_FREE_TEXT_LEN:
            text = text.replace(secret, "REDACTED")
    return redact_url(text)
