"""``--client openai``: the official SDK's streaming, to measure what an application
using it sees.

Chunks are stamped when the SDK yields them (after its SSE decoding and pydantic
parsing: that is the point of this mode), then classified by the same code as the other
clients via ``chunk.to_dict()``. A thin httpx transport wrapper stamps the first raw body
byte and watches the raw bytes for ``[DONE]`` (the SDK hides it), so ``first_byte_s``
and truncation mean the same as elsewhere; it also hands httpcore a ``trace`` callback
(:class:`~tokrate.client.connect_trace.ConnectTrace`), so ``connect_ns`` is measured
as on the httpx path. ``max_retries=0``: no hidden retries.
One ``AsyncOpenAI`` per (base URL, key) over one pooled ``httpx.AsyncClient``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextvars import ContextVar
from time import perf_counter_ns
from typing import Any, Final

import anyio
import openai
import orjson

from tokrate.client.accumulate import (
    ERROR_BODY_LIMIT,
    ResponseLimitExceeded,
    StreamState,
    lenient_json,
    needs_error_body,
)
from tokrate.client.attempt import Attempt
from tokrate.client.base import with_usage_fallback
from tokrate.client.chunks import ChunkError
from tokrate.client.connect_trace import ConnectTrace
from tokrate.client.connection import proxy_for
from tokrate.client.httpx_client import HTTP2_AVAILABLE, preconnect_http
from tokrate.client.request import PreparedRequest
from tokrate.client.result import StreamResult
from tokrate.client.sse import DEFAULT_MAX_LINE_BYTES, SSEProtocolError
from tokrate.spec.types import TimeoutsSpec

try:  # openai >= 3 is built on the httpx2 fork; older releases on httpx itself
    import httpx2 as httpx
except ImportError:  # pragma: no cover - depends on the installed openai
    import httpx  # type: ignore[no-redef]

__all__ = ["SdkClient"]

_CURRENT: ContextVar[tuple[StreamState, ConnectTrace] | None] = ContextVar(
    "tokrate_sdk_state", default=None
)
_DONE: Final = b"data: [DONE]"


class _StampingStream(httpx.AsyncByteStream):
    """Passes raw body bytes through, noting the first byte's arrival and [DONE], and
    judging each raw event that carries ``usage`` by the rule every client applies
    (tokrate.client.chunks): the SDK's parser turns ``true`` into 1 before it yields."""

    def __init__(self, inner: httpx.AsyncByteStream, state: StreamState) -> None:
        self._inner = inner
        self._state = state
        self._tail = b""
        self._line = 0
        #: The raw line being read (at most the line limit: the check below).
        self._pending = b""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        state = self._state
        async for chunk in self._inner:
            if state.count_bytes(len(chunk), perf_counter_ns()):
                # The SDK reads on regardless of what we return: only raising stops it.
                raise ResponseLimitExceeded(state.error_message)
            # Keep a short tail so a [DONE] split across reads is still seen.
            window = self._tail + chunk
            if _DONE in window:
                state.done = True
            self._tail = window[-len(_DONE) :]
            # The SDK's own SSE decoder buffers lines without limit: bound it here.
            newline = max(chunk.rfind(b"\n"), chunk.rfind(b"\r"))
            self._line = len(chunk) - newline - 1 if newline >= 0 else self._line + len(chunk)
            if self._line > DEFAULT_MAX_LINE_BYTES:
                raise SSEProtocolError(f"SSE line longer than {DEFAULT_MAX_LINE_BYTES} bytes")
            if newline >= 0:
                lines, self._pending = self._pending + chunk[:newline], chunk[newline + 1 :]
                if b'"usage"' in lines:
                    _judge_usage(lines, state)
            else:
                self._pending += chunk
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


def _judge_usage(lines: bytes, state: StreamState) -> None:
    """Classify each raw ``data:`` line carrying usage as the other clients do (the
    state's own classifier, on the data as parsed without coercion); a chunk it refuses
    fails the stream, before the SDK yields its coerced copy."""
    for line in lines.splitlines():
        if not line.startswith(b"data:") or b'"usage"' not in line:
            continue
        obj = lenient_json(line[5:])
        if obj is None:
            continue  # the SDK's own parser fails on it, as data that is not JSON
        try:
            state.classify(obj, None)
        except ChunkError as exc:
            state.fail("protocol", str(exc), perf_counter_ns())


#: Where a redirect's Location is kept (:func:`_location`). The SDK tells httpx to
#: follow redirects; tokrate follows none (a redirect means a wrong base_url, and it
#: may point at any host), so the transport takes the header off before httpx sees it.
_LOCATION: Final = "tokrate.location"


def _location(response: httpx.Response) -> str | None:
    """The Location of a redirect the transport kept from httpx (``_LOCATION``)."""
    value = response.extensions.get(_LOCATION)
    return value if isinstance(value, str) else None


class _StampingTransport(httpx.AsyncBaseTransport):
    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        current = _CURRENT.get()
        if current is not None:
            request.extensions = {**request.extensions, "trace": current[1]}
        response = await self._inner.handle_async_request(request)
        if 300 <= response.status_code < 400 and "location" in response.headers:
            response.extensions = {**response.extensions, _LOCATION: response.headers["location"]}
            del response.headers["location"]
        if current is not None and isinstance(response.stream, httpx.AsyncByteStream):
            response.stream = _StampingStream(response.stream, current[0])
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


#: The route each API's SDK call appends to the client's base URL.
_ROUTES: Final = {
    "chat": "/chat/completions",
    "completions": "/completions",
    "responses": "/responses",
}
#: The body field each API's SDK call takes as its required text argument.
_TEXT_FIELDS: Final = {"chat": "messages", "completions": "prompt", "responses": "input"}


def _split_url(url: str, api: str) -> tuple[str, dict[str, str]]:
    """(the SDK's base URL, query parameters) of a prepared request's URL: the route
    the SDK appends comes off, and a query (Azure's ``api-version``) rides along as
    ``extra_query``."""
    from urllib.parse import parse_qsl

    path, _, query = url.partition("?")
    suffix = _ROUTES.get(api, "")
    base = path[: -len(suffix)] if suffix and path.endswith(suffix) else path
    return base, dict(parse_qsl(query))


class SdkClient:
    """Streaming through ``openai.AsyncOpenAI`` (``kind = "openai"``)."""

    kind: Final = "openai"

    def __init__(
        self,
        *,
        pool_size: int,
        timeouts: TimeoutsSpec,
        ssl_context: Any = None,
    ) -> None:
        self.pool_size = pool_size
        self.timeouts = timeouts
        self.notices: list[str] = []
        self._timeout = httpx.Timeout(
            connect=timeouts.connect_s, read=None, write=timeouts.idle_s, pool=None
        )
        self._ssl_context = ssl_context
        #: One pooled httpx client per proxy (None: direct), built on first use.
        self._clients: dict[str | None, httpx.AsyncClient] = {}
        self._sdks: dict[tuple[str, str | None], openai.AsyncOpenAI] = {}

    async def __aenter__(self) -> SdkClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        for sdk in self._sdks.values():
            await sdk.close()
        self._sdks.clear()
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()

    def _http_for(self, url: str) -> httpx.AsyncClient:
        """The pooled httpx client that reaches ``url``: through the proxy the
        environment sets for it (HTTP(S)_PROXY, ALL_PROXY, NO_PROXY: the rule every
        client follows, tokrate.client.connection.proxy_for), else directly. The
        transport is given explicitly (it stamps reads), and httpx reads no proxy from
        the environment for an explicit transport: so it is named here."""
        proxy = proxy_for(url)
        client = self._clients.get(proxy)
        if client is None:
            limits = httpx.Limits(max_connections=None, max_keepalive_connections=self.pool_size)
            inner = httpx.AsyncHTTPTransport(
                verify=self._ssl_context if self._ssl_context is not None else True,
                http2=HTTP2_AVAILABLE,
                limits=limits,
                proxy=proxy,
            )
            client = self._clients[proxy] = httpx.AsyncClient(
                transport=_StampingTransport(inner), timeout=self._timeout, limits=limits
            )
        return client

    async def preconnect(self, url: str, n: int) -> list[int | None]:
        """Open up to ``n`` connections to ``url``'s origin in the SDK's pool (see
        :func:`tokrate.client.httpx_client.preconnect_http`)."""
        return await preconnect_http(self._http_for(url), url, n, self.pool_size)

    def _sdk(self, base_url: str, api_key: str | None) -> openai.AsyncOpenAI:
        key = (base_url, api_key)
        sdk = self._sdks.get(key)
        if sdk is None:
            sdk = self._sdks[key] = openai.AsyncOpenAI(
                base_url=base_url,
                # The SDK insists on a key; without one the header is removed per call.
                api_key=api_key or "unused",
                max_retries=0,
                timeout=self._timeout,
                http_client=self._http_for(base_url),
            )
        return sdk

    async def stream(
        self,
        req: PreparedRequest,
        *,
        on_partial: Callable[[StreamResult], None] | None = None,
        watch: Callable[[StreamState], None] | None = None,
    ) -> StreamResult:
        """Like :meth:`tokrate.client.stream.FastClient.stream`."""
        return await with_usage_fallback(
            lambda r, **kw: self._attempt(r, on_partial, watch, **kw), req
        )

    async def _attempt(
        self,
        req: PreparedRequest,
        on_partial: Callable[[StreamResult], None] | None,
        watch: Callable[[StreamState], None] | None,
        *,
        attempt: int,
        usage_rejected: bool,
    ) -> StreamResult:
        a = Attempt(
            self.kind,
            req,
            self.timeouts,
            attempt=attempt,
            usage_rejected=usage_rejected,
            watch=watch,
        )
        sdk, model, body, headers, query = self._call(req)
        token = _CURRENT.set((a.state, a.trace))
        try:
            with a.scope() as scope:
                # Attribute by attribute: the SDK imports each resource on first use.
                if req.api == "chat":
                    create: Any = sdk.chat.completions.create
                elif req.api == "completions":
                    create = sdk.completions.create
                else:
                    create = sdk.responses.create
                field = _TEXT_FIELDS[req.api]
                text = {field: body.pop(field)}
                stream: Any = await create(
                    model=model,
                    stream=True,
                    extra_body=body,
                    extra_headers=headers,
                    extra_query=query or None,
                    **text,
                )
                a.got_headers = True
                try:
                    await self._read(a, stream, scope)
                finally:
                    with anyio.CancelScope(shield=True):  # close even when timed out
                        await stream.response.aclose()
            a.after_scope(scope)
        except asyncio.CancelledError:
            a.cancelled(on_partial)
            raise
        except Exception as exc:  # every failure becomes data, none escapes
            self._failure(a, exc)
        finally:
            _CURRENT.reset(token)
        return a.result()

    def _call(
        self, req: PreparedRequest
    ) -> tuple[openai.AsyncOpenAI, str, dict[str, Any], dict[str, Any], dict[str, str]]:
        """(SDK client, model, remaining body fields, extra headers, query) of a
        prepared request: the bearer key moves to the SDK client, the rest (Azure's
        ``api-key`` header and ``api-version`` query too) rides along.

        Raises:
            ValueError: an API the SDK path cannot send (anthropic: refused earlier,
                when the config was loaded).
        """
        if req.api not in _ROUTES:
            raise ValueError(f"the openai SDK client cannot send api {req.api!r}")
        body = orjson.loads(req.body)
        api_key: str | None = None
        headers: dict[str, Any] = {}
        for name, value in req.headers:
            low = name.lower()
            if low == "authorization":
                api_key = value.split(" ", 1)[1] if " " in value else value
            elif low != "content-type":
                headers[name] = value
        if api_key is None:
            headers["Authorization"] = openai.Omit()
        # As every client: a compressed stream has no token timings (refused by name).
        headers["Accept-Encoding"] = "identity"
        model = body.pop("model")
        body.pop("stream", None)
        base, query = _split_url(req.url, req.api)
        return self._sdk(base, api_key), model, body, headers, query

    async def _read(self, a: Attempt, stream: Any, scope: anyio.CancelScope) -> None:
        """The SDK's stream into the attempt's state (a 200 HTML/JSON page, on which
        the SDK would just yield nothing, as an HTTP error with its body)."""
        state = a.state
        response = stream.response
        state.http_status = response.status_code
        ctype = response.headers.get("content-type", "")
        if needs_error_body(response.status_code, ctype):
            with anyio.CancelScope(shield=True):
                raw = await response.aread()
            state.fail_http(
                response.status_code,
                response.reason_phrase,
                ctype,
                raw[:ERROR_BODY_LIMIT],
                perf_counter_ns(),
                response.headers.get("retry-after"),
                _location(response),
            )
            return
        if state.refuse_encoding(response.headers.get("content-encoding"), perf_counter_ns()):
            return
        async for chunk in stream:
            # finished: the raw bytes already failed the stream (_judge_usage).
            if state.finished or state.feed_chunk(chunk.to_dict(warnings=False), perf_counter_ns()):
                break
            a.read_on(scope)
        state.finish(perf_counter_ns())

    @staticmethod
    def _failure(a: Attempt, exc: Exception) -> None:
        """The SDK's exceptions as data: an HTTP status with its body, an error event
        inside the stream, bad framing or JSON, or a transport failure."""
        state = a.state
        if isinstance(exc, ResponseLimitExceeded):
            return  # recorded on the state when it was raised
        if isinstance(exc, openai.APIStatusError):
            response = exc.response
            try:
                raw = response.content
            except httpx.ResponseNotRead:
                raw = orjson.dumps(exc.body) if exc.body is not None else b""
            state.fail_http(
                response.status_code,
                response.reason_phrase,
                response.headers.get("content-type", ""),
                raw,
                perf_counter_ns(),
                response.headers.get("retry-after"),
                _location(response),
            )
        elif isinstance(exc, openai.APIError) and not isinstance(exc, openai.APIConnectionError):
            # An error object inside the stream: classify it like the other clients.
            # "type" makes it an error event of the typed protocols too.
            body = exc.body or {"message": exc.message}
            state.feed_chunk({"type": "error", "error": body}, perf_counter_ns())
        elif isinstance(exc, SSEProtocolError):
            state.fail("protocol", str(exc), perf_counter_ns())
        elif isinstance(exc, ValueError):  # json.JSONDecodeError from the SDK's SSE decoding
            state.fail("protocol", f"data is not JSON: {exc}", perf_counter_ns())
        else:
            a.transport_failure(exc)
