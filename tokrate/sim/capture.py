"""What the truth log keeps of a request: its knobs, never its prompt or its secrets.

``request_capture(raw_body, headers)`` -> ``{"body": {...}, "fields": [...],
"digests": {...}, "headers": {...}}`` for the truth log line's ``request`` key, so a
test (or a user) can check server-side which body fields and headers reached the wire.
``fields`` names every top-level body field that arrived, in its order; ``digests``
has each one's :func:`field_digest` (the prompt fields' too), so a field of any size can
be proved to have arrived unchanged as a JSON value. Bounded: ``body`` leaves the prompt
fields (``messages``, ``input``, ``prompt``, ``system``, ``instructions``) out, a field
whose JSON is over :data:`MAX_FIELD_BYTES` is replaced by ``"<N bytes>"``, at most
:data:`MAX_FIELDS` fields and :data:`MAX_HEADERS` headers are kept. Header names are
lower-cased; the value of a header whose name carries a secret word (``authorization``,
``x-api-key``, ``api-key``, ``*token*``, ...) is ``"<redacted>"`` — the name alone
says which auth scheme arrived.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any, Final

import orjson

__all__ = ["MAX_FIELD_BYTES", "MAX_FIELDS", "MAX_HEADERS", "field_digest", "request_capture"]

MAX_FIELD_BYTES: Final = 512
MAX_FIELDS: Final = 64
MAX_HEADERS: Final = 64
_PROMPT_FIELDS: Final = frozenset({"messages", "input", "prompt", "system", "instructions"})
_SECRET_WORDS: Final = ("auth", "key", "token", "secret", "password", "cookie", "credential")


def _field(value: Any) -> Any:
    size = len(orjson.dumps(value))
    return value if size <= MAX_FIELD_BYTES else f"<{size} bytes>"


def field_digest(value: Any) -> str:
    """SHA-256 (hex, first 32 digits) of ``value`` as canonical JSON (orjson, keys
    sorted): two values have the same digest exactly when they are the same JSON value,
    whatever the key order or spacing they were written with."""
    return hashlib.sha256(orjson.dumps(value, option=orjson.OPT_SORT_KEYS)).hexdigest()[:32]


def request_capture(raw_body: bytes, headers: Iterable[tuple[bytes, bytes]]) -> dict[str, Any]:
    """The request's non-prompt body fields, every field's name and digest, and its
    headers (see the module doc)."""
    try:
        body = orjson.loads(raw_body)
    except orjson.JSONDecodeError:
        body = None
    fields: dict[str, Any] = {}
    names: list[str] = []
    digests: dict[str, str] = {}
    if isinstance(body, dict):
        for key, value in body.items():
            if key not in _PROMPT_FIELDS and len(fields) < MAX_FIELDS:
                fields[str(key)] = _field(value)
            if len(names) < MAX_FIELDS:
                names.append(str(key))
                digests[str(key)] = field_digest(value)
    kept: dict[str, str] = {}
    for raw_name, raw_value in headers:
        name = raw_name.decode("latin-1").lower()
        if len(kept) >= MAX_HEADERS:
            break
        secret = any(word in name for word in _SECRET_WORDS)
        kept[name] = "<redacted>" if secret else raw_value.decode("latin-1")[:MAX_FIELD_BYTES]
    return {"body": fields, "fields": names, "digests": digests, "headers": kept}
