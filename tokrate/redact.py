"""The one redactor: secrets never reach a record, a file or the terminal.

Two rules, applied together everywhere tokrate writes text a server, a user or the
environment gave it (records, run.json, summaries, reports, terminal lines):

- **by value**: every secret tokrate knows (API keys read from the environment, the
  values of secret-named headers, a password inside a base URL) is replaced wherever
  it occurs, whatever the field is called — a server that echoes the key in an error
  event, a header named ``X-Pass``;
- **by shape**: bearer tokens and ``sk-...`` keys tokrate was never told about, and the
  password part of any ``scheme://user:password@host`` URL.

Mappings (configs, header lists) are also redacted **by name**: the value of a key
that looks like a credential (``api_key``, ``authorization``, ``token``, ...) is
replaced, except ``*_env`` keys, which hold the *name* of an environment variable.

The replacement is always :data:`REDACTED`. Values shorter than
:data:`MIN_SECRET_CHARS` are not replaced by value (a 2-character "secret" would
shred unrelated text); they are still redacted by name.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

__all__ = [
    "MIN_SECRET_CHARS",
    "REDACTED",
    "Redactor",
    "is_secret_name",
    "redact_text",
    "redact_url",
    "split_url_credentials",
    "strip_control",
]

REDACTED: Final = "<redacted>"

#: Secrets shorter than this are redacted by name only, never searched for as text.
MIN_SECRET_CHARS: Final = 4

#: Words of a field or header name that mark its value as a secret ("x-api-key",
#: "access_token", "X-Pass"); whole words, so "max_tokens" or "keyword" are not.
_SECRET_WORDS: Final = frozenset(
    {
        "apikey",
        "auth",
        "authorization",
        "bearer",
        "cookie",
        "credential",
        "credentials",
        "key",
        "pass",
        "passwd",
        "password",
        "pwd",
        "secret",
        "session",
        "signature",
        "token",
    }
)
#: tokrate's own config keys whose names carry a secret word but hold none: the answer
#: quality bar (docs/quality.md) is a pass *rate*, shown as written, never redacted.
_NOT_SECRET: Final = frozenset({"min_pass_rate", "min_pass_rate_by_task"})
_WORD_SPLIT: Final = re.compile(r"[^a-z0-9]+")
_BEARER: Final = re.compile(r"(?i)(bearer\s+)([^\s\"',;]+)")
#: Words that follow "bearer" in a server's own error text ("Missing bearer token in
#: header", "Bearer realm=...", "invalid bearer authentication"): the message, not a
#: credential, so they stay readable. Anything else after "bearer" is taken for one.
_BEARER_WORDS: Final = frozenset(
    {
        "auth",
        "authentication",
        "authorization",
        "credential",
        "credentials",
        "error",
        "format",
        "header",
        "is",
        "key",
        "missing",
        "not",
        "realm",
        "required",
        "scheme",
        "token",
        "tokens",
        "type",
        "value",
    }
)
#: The parameters of a ``WWW-Authenticate: Bearer ...`` challenge (RFC 6750).
_CHALLENGE_PARAMS: Final = frozenset({"realm", "scope", "error", "error_description", "error_uri"})
_KEYLIKE: Final = re.compile(r"\b(sk-(?:ant-)?)[A-Za-z0-9_\-]{8,}")
_URL_PASSWORD: Final = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://[^/\s:@]*:)([^/\s@]+)(@)")
# C0 controls (but tab, newline), DEL and C1 controls: a server's text must not move
# the cursor, clear the screen or retitle the terminal of whoever reads it.
_CONTROL: Final = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def is_secret_name(name: str) -> bool:
    """Whether a field or header called ``name`` holds a secret (``*_env`` never does:
    it names an environment variable; nor do tokrate's pass-rate keys)."""
    lowered = name.lower()
    if lowered.endswith("_env") or lowered in _NOT_SECRET:
        return False
    return any(word in _SECRET_WORDS for word in _WORD_SPLIT.split(lowered))


def strip_control(text: str) -> str:
    """``text`` without terminal control characters (tab and newline kept)."""
    return _CONTROL.sub("", text)


def split_url_credentials(url: str) -> tuple[str, str | None, str | None]:
    """(url without ``user:password@``, user, password); user/password None if absent.

    A URL that does not parse is returned unchanged with no credentials.
    """
    try:
        parts = urlsplit(url)
        user, password = parts.username, parts.password
        host = parts.hostname
        port = parts.port
    except ValueError:
        return url, None, None
    if user is None and password is None:
        return url, None, None
    netloc = host or ""
    if ":" in netloc:  # IPv6 literal
        netloc = f"[{netloc}]"
    if port is not None:
        netloc = f"{netloc}:{port}"
    return urlunsplit(parts._replace(netloc=netloc)), user, password


def redact_url(url: str) -> str:
    """``url`` with the password of its user info replaced (the user name is kept)."""
    if "://" not in url:  # what _URL_PASSWORD needs (a scan of every word otherwise)
        return url
    return _URL_PASSWORD.sub(rf"\1{REDACTED}\3", url)


def _cut_tail(text: str, secret: str) -> str:
    """``text`` with a trailing *start* of ``secret`` replaced: a message cut to a length
    limit (with or without a "..." marker) may end inside a secret it quoted."""
    body, dots = (text[:-3], "...") if text.endswith("...") else (text, "")
    # Every start this could replace begins with the secret's first MIN_SECRET_CHARS
    # characters, within the body's last len(secret) - 1: none there, nothing to cut
    # (the common case, once per redacted string: the loop below is several µs).
    if body.find(secret[:MIN_SECRET_CHARS], max(0, len(body) - len(secret) + 1)) < 0:
        return text
    for n in range(min(len(secret) - 1, len(body)), MIN_SECRET_CHARS - 1, -1):
        if body.endswith(secret[:n]):
            return body[:-n] + REDACTED + dots
    return text


def _bearer_value(match: re.Match[str]) -> str:
    value = match.group(2)
    if "=" in value:  # WWW-Authenticate's parameters; "token=..." is a credential
        keep = value.split("=", 1)[0].lower() in _CHALLENGE_PARAMS
    else:
        keep = value.rstrip(".:!?").lower() in _BEARER_WORDS
    return match.group(0) if keep else match.group(1) + REDACTED


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with each known secret, bearer tokens, ``sk-`` keys and URL passwords
    replaced by :data:`REDACTED`."""
    for secret in _longest_first(secrets):
        text = _cut_tail(text.replace(secret, REDACTED), secret)
    text = _BEARER.sub(_bearer_value, text)
    if "sk-" in text:  # what _KEYLIKE needs (a scan of every word boundary otherwise)
        text = _KEYLIKE.sub(rf"\1{REDACTED}", text)
    return redact_url(text)


def _longest_first(secrets: Iterable[str]) -> tuple[str, ...]:
    """The secrets worth searching for (long enough), longest first, so a secret that
    contains another is replaced whole."""
    if isinstance(secrets, frozenset):
        return _longest_first_cached(secrets)
    return _longest_first_cached(frozenset(secrets))


@functools.lru_cache(maxsize=16)
def _longest_first_cached(secrets: frozenset[str]) -> tuple[str, ...]:
    return tuple(sorted({s for s in secrets if len(s) >= MIN_SECRET_CHARS}, key=len, reverse=True))


@dataclass(frozen=True, slots=True)
class Redactor:
    """Redaction with a fixed set of known secret values (see the module doc).

    ``Redactor()`` knows no values and still redacts by shape and by name. Picklable,
    so a worker process or Ray actor redacts exactly as the driver does.
    """

    secrets: frozenset[str] = frozenset()

    def with_secrets(self, values: Iterable[str | None]) -> Redactor:
        """A redactor that also knows ``values`` (None and short values are skipped
        for text search)."""
        extra = {v for v in values if v}
        return Redactor(self.secrets | frozenset(extra))

    def text(self, value: str) -> str:
        """One string, redacted (by value and shape)."""
        return redact_text(value, self.secrets)

    def optional(self, value: str | None) -> str | None:
        return None if value is None else self.text(value)

    def value(self, value: Any) -> Any:
        """A JSON-like value (mapping, list, tuple, str, number) redacted recursively:
        strings by value and shape, mapping entries and ``[name, value]`` pairs also by
        name. Returns a new object; tuples become lists."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {
                k: (
                    REDACTED
                    if is_secret_name(str(k)) and v is not None and not isinstance(v, bool)
                    else self.value(v)
                )
                for k, v in value.items()
            }
        if isinstance(value, list | tuple):
            if len(value) == 2 and isinstance(value[0], str) and is_secret_name(value[0]):
                return [value[0], REDACTED]
            return [self.value(v) for v in value]
        return value

    def headers(self, headers: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
        """Header pairs with secret-named (or secret-valued) values replaced."""
        return tuple(
            (k, REDACTED if is_secret_name(k) or v in self.secrets else self.text(v))
            for k, v in headers
        )
