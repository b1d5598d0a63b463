"""Map every way a request can fail to one record error class and a short message.

Error classes are those of :data:`tokrate.runfolder.records.ERROR_CLASSES`. A 400/413/422 (or an
in-band error) that says the prompt does not fit the model's context is
``context_length``, not ``http_4xx``: llama.cpp's ``exceed_context_size_error``, OpenAI's
(and the simulator's) ``context_length_exceeded`` code, vLLM's "maximum context length"
text, SGLang's and TGI's wording (:func:`is_context_overflow`). Messages are one
line, at most a few hundred characters, and pass through the one redactor
(:mod:`tokrate.redact`) so that a server echoing a bearer token cannot leak it into
records.
"""

from __future__ import annotations

import errno
import re
import socket
import ssl
from typing import Any, Final

import orjson

from tokrate.redact import redact_text, strip_control

__all__ = [
    "SNIPPET_CHARS",
    "classify_exception",
    "classify_httpx_exception",
    "encoded_stream_message",
    "http_error_message",
    "is_context_overflow",
    "is_usage_rejection",
    "out_of_descriptors",
    "snippet",
    "status_class",
]

#: Characters of a response body kept in an error message.
SNIPPET_CHARS: Final = 200


def snippet(body: bytes | str, limit: int = SNIPPET_CHARS) -> str:
    """First ``limit`` characters of a body, whitespace collapsed, invalid UTF-8 replaced,
    redacted; ``"<empty body>"`` for an empty one."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes | bytearray) else body
    text = " ".join(text[: limit * 4].split())
    if not text:
        return "<empty body>"
    return redact_text(text[:limit] + ("..." if len(text) > limit else ""))


def status_class(status: int) -> str:
    """Error class of a non-2xx HTTP status (1xx/3xx are ``protocol``: tokrate follows
    no redirects, so a redirect means a wrong base_url)."""
    if status == 429:
        return "http_429"
    if 400 <= status < 500:
        return "http_4xx"
    if 500 <= status < 600:
        return "http_5xx"
    return "protocol"


def _error_text(body: bytes) -> str:
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return snippet(body)
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            msg = err.get("message") or err.get("detail") or err
            return snippet(msg if isinstance(msg, str) else orjson.dumps(msg))
        if isinstance(err, str):
            return snippet(err)
        detail = obj.get("detail")
        if isinstance(detail, str):
            return snippet(detail)
    return snippet(body)


def http_error_message(status: int, reason: str, body: bytes, location: str | None = None) -> str:
    """``"HTTP 503 Service Unavailable: <message or body snippet>"``; a redirect names
    where it points, which is what the user needs (tokrate follows no redirect):
    ``"HTTP 301 Moved Permanently to https://...: ...; set base_url to where it
    points"``."""
    head = f"HTTP {status} {reason}".rstrip()
    if 300 <= status < 400:
        where = " to " + snippet(strip_control(location), 200) if location else ""
        hint = "; set base_url to where it points" if location else ""
        return f"{head}{where} (tokrate follows no redirects): {_error_text(body)}{hint}"
    return f"{head}: {_error_text(body)}"


def encoded_stream_message(encoding: str) -> str | None:
    """The error of an event stream that came with a Content-Encoding (every client
    asks for ``identity``): a compressed stream arrives in the compressor's blocks, not
    token by token, so no timing of it means anything. None for ``identity``."""
    name = strip_control(encoding).strip().lower()[:40]
    if name in ("", "identity"):
        return None
    return (
        f"the event stream came with Content-Encoding: {name} (tokrate asks for identity):"
        " a compressed stream arrives in blocks, not as tokens; turn compression off for"
        " text/event-stream at the server or proxy"
    )


def is_usage_rejection(status: int, body: bytes) -> bool:
    """True for a 400/422 whose body names ``stream_options`` (or ``include_usage``):
    the server rejects the usage request, not the prompt."""
    if status not in (400, 422):
        return False
    low = body[:8192].lower()
    return b"stream_options" in low or b"include_usage" in low


#: Error ``type`` / ``code`` values that mean "the prompt does not fit the context".
_CONTEXT_KINDS: Final = frozenset({"exceed_context_size_error", "context_length_exceeded"})
#: Wording of the engines that say it only in text (vLLM, SGLang, TGI, LiteLLM).
_CONTEXT_TEXT: Final = re.compile(
    r"(?:maximum|available|model'?s?) context (?:length|size|window)"
    r"|context[ _](?:length|size|window)[^.]{0,40}(?:exceed|too long|longer)"
    r"|(?:exceed|longer than)[^.]{0,60}context[ _](?:length|size|window)"
    r"|tokens \+ `max_new_tokens` must be <=",
    re.IGNORECASE,
)


def is_context_overflow(status: int, body: bytes | str, *, kind: str | None = None) -> bool:
    """True when a 400/413/422 answer (``body``: its raw bytes or an error message;
    ``kind``: an in-band error's type/code) says the prompt plus max_tokens do not fit
    the model's context window."""
    if status not in (400, 413, 422):
        return False
    if kind in _CONTEXT_KINDS:
        return True
    raw = body[:8192]
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes | bytearray) else raw
    if isinstance(raw, bytes | bytearray):
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            obj = None
        err = obj.get("error") if isinstance(obj, dict) else None
        if isinstance(err, dict) and (
            err.get("type") in _CONTEXT_KINDS or err.get("code") in _CONTEXT_KINDS
        ):
            return True
    return any(k in text for k in _CONTEXT_KINDS) or _CONTEXT_TEXT.search(text) is not None


#: What a request that failed for want of a file descriptor says (error class
#: ``not_sent``: the socket was never made, the server never saw the request).
_NO_DESCRIPTORS: Final = (
    "request never sent: this process has no file descriptor left for a connection"
    " ({name}: {text}); raise its limit (ulimit -n) or lower the concurrency"
)


def out_of_descriptors(exc: BaseException) -> OSError | None:
    """The EMFILE / ENFILE error (this process's, or the system's, file table is full)
    behind ``exc`` or anything it was raised from; None when there is none."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, OSError) and cause.errno in (errno.EMFILE, errno.ENFILE):
            return cause
        cause = cause.__cause__ or cause.__context__
    return None


def classify_exception(exc: BaseException, *, connected: bool) -> tuple[str, str]:
    """(error_class, one-line message) for a transport-level exception.

    ``connected`` says whether the connection had been established; before that, any
    OSError is ``connect``, after it a reset or EOF is ``truncated``. Running out of
    file descriptors (EMFILE, ENFILE) is the client's failure, never the server's:
    ``not_sent`` (:func:`out_of_descriptors`).
    """
    name = type(exc).__name__
    text = " ".join(str(exc).split())[:SNIPPET_CHARS]
    message = redact_text(f"{name}: {text}" if text else name)
    no_fd = out_of_descriptors(exc)
    if no_fd is not None and not connected:
        return "not_sent", _NO_DESCRIPTORS.format(name=type(no_fd).__name__, text=no_fd.strerror)
    if isinstance(exc, TimeoutError):
        return ("connect" if not connected else "timeout"), message
    if isinstance(exc, socket.gaierror):
        return "connect", message
    if isinstance(exc, ssl.SSLError | ssl.CertificateError):
        return ("connect" if not connected else "protocol"), message
    if isinstance(exc, OSError):
        return ("connect" if not connected else "truncated"), message
    return "protocol", message


def _httpx_modules() -> tuple[Any, ...]:
    """httpx, plus httpx2 (the fork newer openai SDKs are built on) when installed."""
    import httpx

    mods: list[Any] = [httpx]
    try:
        import httpx2

        mods.append(httpx2)
    except ImportError:  # pragma: no cover - depends on the openai version installed
        pass
    return tuple(mods)


def _classes(mods: tuple[Any, ...], *names: str) -> tuple[type[BaseException], ...]:
    return tuple(getattr(m, n) for m in mods for n in names if hasattr(m, n))


def classify_httpx_exception(exc: BaseException, *, got_headers: bool) -> tuple[str, str]:
    """(error_class, message) for an httpx/httpx2 (or openai-wrapped) exception.

    ``got_headers``: the response head had arrived. A disconnect before it is
    ``protocol`` ("closed before response headers", as in the fast client); after it the
    caller decides between ok and ``truncated`` from what the stream carried.
    """
    no_fd = out_of_descriptors(exc)
    if no_fd is not None and not got_headers:
        return "not_sent", _NO_DESCRIPTORS.format(name=type(no_fd).__name__, text=no_fd.strerror)
    mods = _httpx_modules()
    http_error = _classes(mods, "HTTPError")
    cause = exc
    # openai.APIConnectionError / APITimeoutError wrap the httpx exception.
    while not isinstance(cause, http_error) and cause.__cause__ is not None:
        cause = cause.__cause__
    name = type(cause).__name__
    text = " ".join(str(cause).split())[:SNIPPET_CHARS]
    message = redact_text(f"{name}: {text}" if text else name)
    if isinstance(
        cause, _classes(mods, "ConnectTimeout", "ConnectError", "UnsupportedProtocol", "ProxyError")
    ):
        return "connect", message
    if isinstance(cause, _classes(mods, "TimeoutException")):
        return "timeout", message
    if isinstance(cause, _classes(mods, "RemoteProtocolError", "ReadError", "WriteError")):
        if not got_headers:
            return "protocol", f"connection closed before response headers ({message})"
        return "truncated", message
    if isinstance(cause, http_error):
        return "protocol", message
    return classify_exception(cause, connected=got_headers)
