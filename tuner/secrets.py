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
- A name is also secret when one of its words (split at `_`, `-`, `.`) is a short credential word:
  PASS, PWD, PW, PASSPHRASE, DSN, CREDS, COOKIE, SIG, SIGNATURE, PAT, JWT, BEARER (MYSQL_PWD,
  DB_PASS, REDIS_PASS, GPG_PASSPHRASE, SENTRY_DSN); the shell's own PWD and OLDPWD stay readable.
- A value is secret by its shape, whatever its name (`SHAPES`): known token formats (Hugging Face
  `hf_`, OpenAI/Anthropic `sk-`, Stripe `sk_live_`, GitHub `ghp_`/`gho_`/`github_pat_`, GitLab
  `glpat-`, Slack `xox?-`, AWS `AKIA`/`ASIA`, Google `AIza`, npm, PyPI), JSON Web Tokens, PEM
  private keys, `Bearer`/`Basic`/`Token` credentials (an `Authorization:` header in a value), and
  URL query parameters that carry a credential (`?token=`, `&sig=`, `X-Amz-Signature=`,
  `?password=`: a secret-named parameter or a signature).
- The password of a URL's user-info (`postgresql://user:pw@host/db`) is secret in any value.
- The tuner's own schema keys (`scrub_tree(..., keep=...)`: field names of its dataclasses, such as
  `output_tokens_source` or a config's `key`) are not credential names; their values are still
  scrubbed of every known secret and shape.
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

_WORDS = ("PASSWORD", "PASSWD", "PASSPHRASE", "PGPASS", "TOKEN", "SECRET", "KEY", "AUTH", "CREDENTIAL")
_SECRET_NAME = re.compile("|".join(_WORDS), re.IGNORECASE)
# whole words of a name that name a credential (as substrings they would catch BYPASS, COMPASS)
_SECRET_WORDS = frozenset(
    {"PASS", "PWD", "PW", "DSN", "CREDS", "COOKIE", "SIG", "SIGNATURE", "PAT", "JWT", "BEARER", "APIKEY"}
)
_NOT_SECRET_NAMES = frozenset({"PWD", "OLDPWD"})  # the shell's working directories
_NAME_WORDS = re.compile(r"[_\-.\s]+|(?<=[a-z])(?=[A-Z])")
# words that merely contain one of those: TOKENIZERS_PARALLELISM, SGLANG_MAX_TOKENS (a count)
_NOT_SECRET = re.compile(r"TOKENIZ|(?:MAX|MIN|NUM)_?TOKENS(?![A-Z])", re.IGNORECASE)
_FLAG_ANY_WORD = re.compile(r"password|passwd|passphrase|pgpass|secret|credential", re.IGNORECASE)
_FLAG_LAST_WORD = frozenset({"key", "token", "auth", "apikey", "authkey"})
# scheme://user:password@host : the password is everything between the first ':' and the last '@'
_URL_PASSWORD = re.compile(r"(?P<head>(?:\b[A-Za-z][A-Za-z0-9+.-]*)?://[^\s:/@]*:)(?P<pw>[^\s/]*)(?P<at>@)")


def is_secret_env(name: str) -> bool:
    """True for an environment variable (or space key) whose value is a credential."""
    if name.upper() in _NOT_SECRET_NAMES:
        return False
    if _SECRET_NAME.search(_NOT_SECRET.sub("", name)):
        return True
    return any(w.upper() in _SECRET_WORDS for w in _NAME_WORDS.split(name) if w)


def is_secret_flag(flag: str) -> bool:
    """True for a launch flag whose value is a credential (`--api-key`, `--ssl-keyfile-password`)."""
    words = [w for w in re.split(r"[-_]+", flag.lstrip("-").split("=", 1)[0]) if w]
    if not words:
        return False
    return (
        words[-1].lower() in _FLAG_LAST_WORD
        or any(_FLAG_ANY_WORD.search(w) for w in words)
        or any(w.upper() in _SECRET_WORDS for w in words)
    )


def is_secret_name(name: str) -> bool:
    """True for a key of a space file (a fixed flag without dashes, or an env name) that holds a secret."""
    return is_secret_flag(name) or is_secret_env(name)


# Known token formats: a value of one of these shapes is a credential under any name.
SHAPES: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p)
    for p in (
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|$)",
        r"\bhf_[A-Za-z0-9]{16,}",  # Hugging Face
        r"\bsk-(?:proj-|ant-(?:api\d+-)?|svcacct-|admin-)?[A-Za-z0-9_\-]{16,}",  # OpenAI, Anthropic
        r"\b[rsp]k_(?:live|test)_[A-Za-z0-9]{12,}",  # Stripe
        r"\bgh[pousr]_[A-Za-z0-9]{20,}",  # GitHub
        r"\bgithub_pat_[A-Za-z0-9_]{20,}",
        r"\bglpat-[A-Za-z0-9_\-]{16,}",  # GitLab
        r"\bxox[abposre]-[A-Za-z0-9\-]{8,}",  # Slack
        r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[A-Z0-9]{16}\b",  # AWS access key ids
        r"\bAIza[0-9A-Za-z_\-]{30,}",  # Google API keys
        r"\bnpm_[A-Za-z0-9]{30,}",
        r"\bpypi-[A-Za-z0-9_\-]{30,}",
        r"\beyJ[A-Za-z0-9_\-]{6,}\.[A-Za-z0-9_\-]{6,}\.[A-Za-z0-9_\-]*",  # a JSON Web Token
    )
)
# `Authorization: <scheme> x` anywhere, and a bare `Bearer x` / `Basic <base64>`: the credential
_AUTH_HEADER = re.compile(
    r"(?P<head>\b(?:Proxy-)?Authori[sz]ation[\"']?\s*[:=]\s*[\"']?(?:[A-Za-z]+\s+)?)(?P<cred>[^\s\\\"',;]+)",
    re.IGNORECASE,
)
_AUTH_SCHEME = re.compile(
    r"(?P<head>\b(?i:Bearer)\s+)(?P<cred>[A-Za-z0-9._~+/=\-]{6,})"
    r"|(?P<bhead>\b(?i:Basic)\s+)(?P<bcred>(?=[A-Za-z0-9+/]*[0-9=+/]|[A-Za-z0-9+/]+[A-Z])[A-Za-z0-9+/]{8,}={0,2})"
)
# a URL query parameter: ?name=value or &name=value
_QUERY_PARAM = re.compile(r"(?P<head>[?&;](?P<name>[A-Za-z0-9_.\-]{1,64})=)(?P<value>[^&\s#\"'<>;]+)")
_QUERY_SECRET = frozenset(
    {
        "sig",
        "signature",
        "x-amz-signature",
        "x-amz-credential",
        "x-amz-security-token",
        "x-goog-signature",
        "x-goog-credential",
        "code",
        "client_secret",
        "access_token",
        "refresh_token",
        "id_token",
    }
)


# A literal each shape's match contains: a substring test (C speed) before the regex, so that a log
# line without any of them costs a few microseconds.
_MARKERS: tuple[tuple[str, ...], ...] = (
    ("-----BEGIN",),
    ("hf_",),
    ("sk-",),
    ("k_live_", "k_test_"),
    ("gh",),
    ("github_pat_",),
    ("glpat-",),
    ("xox",),
    ("AKIA", "ASIA", "AGPA", "AIDA", "AROA", "ANPA"),
    ("AIza",),
    ("npm_",),
    ("pypi-",),
    ("eyJ",),
)
_GUARDED = tuple(zip(_MARKERS, SHAPES, strict=True))


def _shape_subs(text: str) -> str:
    for markers, shape in _GUARDED:
        if any(m in text for m in markers):
            text = shape.sub(REDACTED, text)
    return text


def _query_secret(name: str) -> bool:
    low = name.lower()
    return low in _QUERY_SECRET or (is_secret_name(name) and low not in ("key_id",))


def redact_shapes(text: str) -> str:
    """`text` with every credential found by its shape replaced by *** (see the module)."""
    if not text:
        return text
    text = _shape_subs(text)
    lowered = text.lower()
    if "author" in lowered:
        text = _AUTH_HEADER.sub(lambda m: m["head"] + REDACTED, text)
    if "bearer" in lowered or "basic" in lowered:
        text = _AUTH_SCHEME.sub(lambda m: (m["head"] or m["bhead"]) + REDACTED, text)
    if "=" not in text:
        return text
    return _QUERY_PARAM.sub(
        lambda m: m["head"] + REDACTED if _query_secret(m["name"]) and m["value"] != REDACTED else m[0], text
    )


def _has_shape(text: str) -> bool:
    return redact_shapes(text) != text


def shape_values(text: str) -> set[str]:
    """The credentials `redact_shapes` would hide in `text`, as literals (to scrub their echoes)."""
    found: set[str] = set()
    for markers, shape in _GUARDED:
        if any(m in text for m in markers):
            found.update(m[0] for m in shape.finditer(text))
    found.update(m["cred"] or m["bcred"] for m in _AUTH_SCHEME.finditer(text))
    found.update(m["cred"] for m in _AUTH_HEADER.finditer(text))
    found.update(m["value"] for m in _QUERY_PARAM.finditer(text) if _query_secret(m["name"]))
    return {f for f in found if len(f) >= MIN_FREE_TEXT_LEN and f != REDACTED}


def redact_url(text: str) -> str:
    """`text` with the password of every `scheme://user:password@host` replaced by ***, and every
    credential of a known shape (tokens, bearer headers, query tokens and signatures) hidden."""
    text = _URL_PASSWORD.sub(lambda m: f"{m['head']}{REDACTED}{m['at']}" if m["pw"] else m[0], text)
    return redact_shapes(text)


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
        found |= _url_passwords(arg) | shape_values(arg)
    items = env.items() if isinstance(env, Mapping) else env
    for key, value in items:
        if is_secret_env(key):
            found.add(value)
        found |= _url_passwords(value) | shape_values(value)
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


def scrub_tree(value: object, secrets: Iterable[str], keep: frozenset[str] = frozenset()) -> object:
    """A JSON-ready value (dicts, lists, strings) with every string scrubbed, and every secret-named key's
    string value replaced by *** (a whole result printed by `trial --json`).

    `keep`: the caller's own schema keys (field names such as `output_tokens_source`, `key`), whose
    names are not credentials; their values are scrubbed like any string."""
    found = frozenset(secrets)
    if isinstance(value, str):
        return scrub(value, found)
    if isinstance(value, (list, tuple)):
        return [scrub_tree(v, found, keep) for v in value]
    if isinstance(value, dict):
        return {
            scrub(str(k), found) if isinstance(k, str) else k: REDACTED
            if isinstance(v, str) and _secret_key(k, keep)
            else scrub_tree(v, found, keep)
            for k, v in value.items()
        }
    return value


def _secret_key(key: object, keep: frozenset[str]) -> bool:
    return isinstance(key, str) and key not in keep and is_secret_name(key)


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
    elif isinstance(node, yaml.ScalarNode) and (
        _url_passwords(str(node.value)) or _has_shape(str(node.value))
    ):
        out.append((node.start_mark.index, node.end_mark.index))


def _placeholder(original: str) -> str:
    """A secret scalar's replacement: "***", or for a URL the URL with its password hidden, quoted."""
    try:
        value = yaml.safe_load(original)
    except yaml.YAMLError:
        value = None
    if isinstance(value, str) and (_url_passwords(value) or _has_shape(value)):
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
