"""What the typed-event protocols (Responses, Anthropic Messages) share: reading an
event's type, the in-band error classes, and merging usage that arrives in parts.

Pure functions over parsed JSON; nothing here reads a clock or does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, TypeGuard

from tokrate.client.chunks import ChunkError, ChunkFacts

__all__ = [
    "ERROR_TYPE_CLASSES",
    "event_object",
    "event_type",
    "fail_facts",
    "has_text",
    "in_band_error_class",
    "merge_usage",
]

#: An in-band error's ``code`` or ``type`` -> the record error class it stands for.
#: OpenAI's codes/types, and Anthropic's error types by the HTTP status Anthropic
#: documents for them: ``overloaded_error`` is its 529, so ``http_5xx`` (a server that
#: is out of capacity, retryable like a 503), ``rate_limit_error`` its 429.
ERROR_TYPE_CLASSES: Final[Mapping[str, str]] = {
    "server_error": "http_5xx",
    "internal_error": "http_5xx",
    "internal_server_error": "http_5xx",
    "api_error": "http_5xx",
    "overloaded": "http_5xx",
    "overloaded_error": "http_5xx",
    "service_unavailable": "http_5xx",
    "timeout_error": "http_5xx",
    "rate_limit_exceeded": "http_429",
    "rate_limit_error": "http_429",
    "insufficient_quota": "http_429",
    "invalid_request_error": "http_4xx",
    "authentication_error": "http_4xx",
    "permission_error": "http_4xx",
    "not_found_error": "http_4xx",
    "request_too_large": "http_4xx",
    "invalid_api_key": "http_4xx",
    "invalid_prompt": "http_4xx",
    "context_length_exceeded": "context_length",
}


def in_band_error_class(code: object, type_: object) -> str:
    """Record error class of an error that arrived inside a 200 stream: a numeric
    ``code`` 400-599 by its status class, else the first of ``code``/``type`` that
    :data:`ERROR_TYPE_CLASSES` knows, else ``protocol``."""
    if isinstance(code, str) and code.isdigit():
        code = int(code)
    if isinstance(code, int) and not isinstance(code, bool) and 400 <= code <= 599:
        return "http_429" if code == 429 else "http_4xx" if code < 500 else "http_5xx"
    for word in (code, type_):
        if isinstance(word, str) and word in ERROR_TYPE_CLASSES:
            return ERROR_TYPE_CLASSES[word]
    return "protocol"


def merge_usage(
    previous: dict[str, int] | None, update: dict[str, int] | None
) -> dict[str, int] | None:
    """``previous`` with every key ``update`` reports replaced (later events carry the
    newer counts: Anthropic's ``message_delta`` output count is final and cumulative)."""
    if update is None:
        return previous
    if previous is None:
        return dict(update)
    return {**previous, **update}


def event_object(obj: object) -> dict[str, Any]:
    """The event's JSON object. Raises ChunkError when it is not one."""
    if not isinstance(obj, dict):
        raise ChunkError(f"event data is not a JSON object: {obj!r:.60}")
    return obj


def event_type(obj: Mapping[str, Any], event_name: str | None) -> str:
    """The data's ``type`` field, else the SSE ``event:`` name (the field wins, so a
    proxy that drops ``event:`` lines changes nothing)."""
    t = obj.get("type")
    return t if isinstance(t, str) else (event_name or "")


def has_text(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and value != ""


def fail_facts(facts: ChunkFacts, message: object, code: object, type_: object) -> ChunkFacts:
    """``facts`` as an in-band error (message one line, at most 200 characters)."""
    text = message or type_ or code or "error"
    facts.error = " ".join(str(text).split())[:200] or "error"
    facts.error_class = in_band_error_class(code, type_)
    if isinstance(code, int) and not isinstance(code, bool) and 100 <= code <= 599:
        facts.error_code = code
    return facts
