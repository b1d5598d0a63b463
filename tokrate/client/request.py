"""Build the exact bytes of one streaming request, before the clock starts.

:func:`build_request` turns (endpoint, model, prompt, client settings) into a
:class:`PreparedRequest`: URL, JSON body bytes (orjson) and headers. All the work of
serialising happens here, so nothing but the write remains between t0 and the wire.

The API key is passed in (read from the endpoint's env var by the caller) and lives
only in the Authorization header; ``repr()`` of a PreparedRequest redacts it.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from tokrate.client.accumulate import MAX_RESPONSE_BYTES, MAX_RESPONSE_CHUNKS
from tokrate.errors import ConfigError, PromptError
from tokrate.prompts import Prompt
from tokrate.redact import Redactor
from tokrate.targets import Target

__all__ = [
    "PreparedRequest",
    "RequestSettings",
    "build_request",
    "new_unique_prefix",
    "without_stream_options",
]

#: Body keys tokrate owns; a model's extra_body may not override them silently.
_RESERVED_BODY_KEYS = frozenset({"model", "messages", "prompt", "stream"})


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """One request, ready to send. ``body`` is the final JSON bytes; ``headers`` include
    Content-Type, Accept and (when a key was given) Authorization. ``api`` is "chat" or
    "completions"; ``endpoint``/``model`` are names for records. ``include_usage`` says
    whether the body asks for ``stream_options.include_usage``. ``max_response_chunks``
    / ``max_response_bytes`` bound what the client reads of the response (riding on the
    request, so every client and the fast client's proxy fallback enforce the same)."""

    url: str
    body: bytes
    headers: tuple[tuple[str, str], ...]
    api: str
    endpoint: str
    model: str
    include_usage: bool = False
    prompt_id: str = ""
    max_response_chunks: int = MAX_RESPONSE_CHUNKS
    max_response_bytes: int = MAX_RESPONSE_BYTES
    #: Keep the answer's text (``StreamResult.answer_text``): multi-turn sessions only.
    keep_text: bool = False

    def __repr__(self) -> str:
        return (
            f"PreparedRequest(url={self.url!r}, body=<{len(self.body)} bytes>, "
            f"headers={Redactor().headers(self.headers)!r}, api={self.api!r}, "
            f"endpoint={self.endpoint!r}, model={self.model!r}, "
            f"include_usage={self.include_usage!r}, prompt_id={self.prompt_id!r})"
        )

    __str__ = __repr__


def new_unique_prefix() -> str:
    """A short random tag (``[ref:1a2b3c4d5e6f]``) that defeats provider prompt caching
    (caches match on the prompt's prefix) at a cost of ~8 input tokens."""
    return f"[ref:{secrets.token_hex(6)}]"


def _prefixed_messages(messages: Sequence[Any], prefix: str | None, at: int = 0) -> list[Any]:
    out = [dict(m) if isinstance(m, dict) else m for m in messages]
    if prefix is None or not out:
        return out
    first = out[min(at, len(out) - 1)]
    if not isinstance(first, dict):
        return out
    content = first.get("content")
    if isinstance(content, str):
        first["content"] = f"{prefix} {content}"
    elif isinstance(content, list):
        first["content"] = [{"type": "text", "text": prefix}, *content]
    return out


def _flatten(messages: Sequence[Any]) -> str:
    parts = []
    for m in messages:
        content = m.get("content") if isinstance(m, dict) else m
        if isinstance(content, list):
            content = " ".join(
                str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("text")
            )
        parts.append(str(content or ""))
    return "\n\n".join(parts)


@dataclass(frozen=True, slots=True)
class RequestSettings:
    """How every request of a run is built: the API (``chat`` | ``completions``),
    whether to ask for usage in the stream, ``ignore_eos`` (vLLM/SGLang: generate
    exactly max_tokens) and ``unique_prompts`` (a random prefix per request that
    defeats provider prompt caching), and the per-response bounds
    (``[client] max_response_chunks`` / ``max_response_bytes``)."""

    api: str = "chat"
    include_usage: bool = True
    ignore_eos: bool = False
    unique_prompts: bool = True
    max_response_chunks: int = MAX_RESPONSE_CHUNKS
    max_response_bytes: int = MAX_RESPONSE_BYTES


def build_request(
    target: Target,
    prompt: Prompt,
    settings: RequestSettings,
    *,
    include_usage: bool,
    unique_prefix: str | None,
    api_key: str | None,
    keep_text: bool = False,
) -> PreparedRequest:
    """Build the request for one prompt against one target.

    ``prompt.max_tokens`` is the output limit (``[prompts] max_tokens`` was applied to
    every prompt when they were loaded); ``settings.ignore_eos`` adds ``ignore_eos:
    true`` and ``min_tokens = max_tokens`` (vLLM/SGLang extensions) so the server
    generates exactly max_tokens (so does ``prompt.exact_output``); ``unique_prefix``
    is prepended to the first message after the prompt's ``shared_messages`` (or to
    the prompt text), so a shared prefix stays cacheable; ``keep_text`` makes the
    client keep the answer's text (session turns). The model's ``extra_body`` is merged last but may not
    replace model/messages/prompt/stream.

    Raises:
        ConfigError: extra_body tries to override a reserved key.
        PromptError: the prompt has neither messages nor prompt text.
    """
    endpoint, model = target.endpoint, target.model
    api = settings.api
    messages, text = prompt.messages, prompt.prompt
    body: dict[str, Any] = {"model": model.name}
    if api == "chat":
        if messages:
            body["messages"] = _prefixed_messages(messages, unique_prefix, prompt.shared_messages)
        elif text is not None:
            content = f"{unique_prefix} {text}" if unique_prefix else text
            body["messages"] = [{"role": "user", "content": content}]
        else:
            raise PromptError(f"prompt {prompt.id!r}: no messages or prompt")
        path = "/chat/completions"
    else:
        shared = ""
        if text is None and messages:
            n = min(prompt.shared_messages, len(messages) - 1)
            shared = _flatten(messages[:n]) + "\n\n" if n else ""
            text = _flatten(messages[n:])
        if text is None:
            raise PromptError(f"prompt {prompt.id!r}: no messages or prompt")
        body["prompt"] = shared + (f"{unique_prefix} {text}" if unique_prefix else text)
        path = "/completions"
    body["stream"] = True
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    limit = prompt.max_tokens
    if limit is not None:
        body["max_tokens"] = int(limit)
        if settings.ignore_eos or prompt.exact_output:
            body["ignore_eos"] = True
            body["min_tokens"] = int(limit)
    elif settings.ignore_eos:
        body["ignore_eos"] = True
    for key, value in model.extra_body:
        if key in _RESERVED_BODY_KEYS:
            raise ConfigError(f"model {model.name!r}: extra_body may not set {key!r}")
        body[key] = value

    headers: list[tuple[str, str]] = [
        ("Content-Type", "application/json"),
        ("Accept", "text/event-stream"),
    ]
    if api_key:
        headers.append(("Authorization", f"Bearer {api_key}"))
    headers.extend(endpoint.headers)
    return PreparedRequest(
        url=endpoint.base_url.rstrip("/") + path,
        body=orjson.dumps(body),
        headers=tuple(headers),
        api=api,
        endpoint=endpoint.name,
        model=model.name,
        include_usage="stream_options" in body,
        prompt_id=prompt.id,
        max_response_chunks=settings.max_response_chunks,
        max_response_bytes=settings.max_response_bytes,
        keep_text=keep_text,
    )


def without_stream_options(req: PreparedRequest) -> PreparedRequest:
    """The same request without ``stream_options`` (for servers that reject it)."""
    body = orjson.loads(req.body)
    body.pop("stream_options", None)
    return PreparedRequest(
        url=req.url,
        body=orjson.dumps(body),
        headers=req.headers,
        api=req.api,
        endpoint=req.endpoint,
        model=req.model,
        include_usage=False,
        prompt_id=req.prompt_id,
        max_response_chunks=req.max_response_chunks,
        max_response_bytes=req.max_response_bytes,
        keep_text=req.keep_text,
    )
