"""Recognising the two request shapes a server may refuse and tokrate resends once
(:func:`tokrate.client.base.with_usage_fallback`): ``stream_options`` (see
:func:`tokrate.client.failures.is_usage_rejection`) and ``max_tokens`` on models that
only take ``max_completion_tokens`` (OpenAI's o-series: HTTP 400 "Unsupported
parameter: 'max_tokens' is not supported with this model. Use
'max_completion_tokens' instead.")."""

from __future__ import annotations

from typing import Final

__all__ = ["MAX_COMPLETION_NOTE", "is_max_tokens_rejection"]

#: Note on the resent result: the request now names its limit max_completion_tokens
#: (the sender remembers it for the target).
MAX_COMPLETION_NOTE: Final = "max_tokens unsupported: resent with max_completion_tokens"


def is_max_tokens_rejection(status: int, body: bytes) -> bool:
    """True for a 400/422 that refuses the ``max_tokens`` field itself (it points to
    ``max_completion_tokens``, or calls max_tokens unsupported), not one that says a
    limit is too large."""
    if status not in (400, 422):
        return False
    low = body[:8192].lower()
    if b"max_tokens" not in low:
        return False
    return b"max_completion_tokens" in low or b"unsupported" in low or b"not supported" in low
