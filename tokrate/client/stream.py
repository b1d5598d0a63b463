"""The default ("fast") client: an asyncio Protocol per connection, httptools parsing.

Why not httpx/aiohttp on the hot path: per-read overhead lands in every timestamp
(issue 7). Here ``data_received`` takes ``perf_counter_ns()`` as its very first action,
then feeds the bytes to httptools' C parser, whose body callback hands them to the
shared :class:`~tokrate.client.accumulate.StreamState` (SSE + orjson after the stamp).
No task, future or timer is created per read; one future per request is the only
await. Runs on whatever asyncio loop is current (uvloop when the caller installed it).

HTTP/1.1 with keep-alive, chunked / content-length / close-delimited bodies, TLS via
``ssl`` contexts. Timeouts (TimeoutsSpec): connect, first body byte (from send), idle
gap between reads (after the first body byte), total; one watchdog timer per request,
re-armed only when it fires, so a timeout costs nothing per read.

The pool keeps up to ``pool_size`` idle keep-alive connections per origin and never
caps concurrency: when more requests are in flight to an origin than ``pool_size`` it
opens extra connections (closed after use when the pool is full) and records one
notice saying so; it says it only then. A connection whose response already gave
[DONE] but whose body terminator has not been read yet (the next read, microseconds
later) is waited for, up to :data:`DRAIN_WAIT_S`, before a new one is opened, so a
closed loop keeps one connection per stream. :meth:`FastClient.preconnect` opens
connections ahead of the measurement. ``connect_ns`` of each result is the DNS + TCP
(+ TLS) set-up of the connection it opened, 0 on a reused one.

A request to an origin that an HTTP(S)_PROXY / ALL_PROXY variable applies to goes
through the httpx client instead (with a one-line notice on stderr), since this client
speaks no proxy protocol.
"""

from __future__ import annotations

import asyncio
import ssl
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Any, Final
from urllib.parse import urlsplit

import httptools

from tokrate import __version__
from tokrate.client.accumulate import (
    ERROR_BODY_LIMIT,
    StreamState,
    needs_error_body,
)
from tokrate.client.base import with_usage_fallback
from tokrate.client.failures import classify_exception
from tokrate.client.request import PreparedRequest
from tokrate.client.result import NS_PER_S, StreamResult
from tokrate.spec import TimeoutsSpec

__all__ = ["DRAIN_WAIT_S", "FastClient"]

_USER_AGENT: Final = f"tokrate/{__version__}"
#: Longest wait (seconds, before t0) for a connection that delivered [DONE] and awaits
#: only its body terminator, rather than opening a new connection.
DRAIN_WAIT_S: Final = 0.05
#: Connections :meth:`FastClient.preconnect` opens at once (a burst of hundreds of
#: SYNs can overflow a server's accept backlog).
_PRECONNECT_BATCH: Final = 64


@dataclass(frozen=True, slots=True)
class _Target:
    scheme: str
    host: str
    port: int
    path: str
    host_header: str

    @property
    def origin(self) -> tuple[str, str, int]:
        return (self.scheme, self.host, self.port)


def _parse_target(url: str) -> _Target:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"unsupported URL {url!r} (need http:// or https://)")
    default = 443 if scheme == "https" else 80
    port = parts.port or default
    host = parts.hostname
    shown = f"[{host}]" if ":" in host else host
    host_header = shown if port == default else f"{shown}:{port}"
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return _Target(scheme, host, port, path, host_header)


def proxy_for(url: str) -> str | None:
    """The proxy URL the environment sets for ``url`` (None when none applies)."""
    parts = urlsplit(url)
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(parts.scheme.lower()) or proxies.get("all")
    if not proxy:
        return None
    host = parts.hostname or ""
    if urllib.request.proxy_bypass_environment(host, proxies):  # type: ignore[attr-defined]
        return None
    return proxy


class _Conn(asyncio.Protocol):
    """One HTTP/1.1 connection; serves one request at a time (no pipelining)."""

    def __init__(self, client: FastClient, origin: tuple[str, str, int]) -> None:
        self.client = client
        self.origin = origin
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.state: StreamState | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.now = 0
        self.last_rx_ns = 0
        self.rx_bytes = 0
        self.reason = b""
        self.headers_done = False
        self.content_type = b""
        self.retry_after: str | None = None
        self.err_body: bytearray | None = None
        self.draining = False
        self.timer: asyncio.TimerHandle | None = None
        self.t0_ns = 0
        self.total_deadline_ns = 0
        self.first_byte_deadline_ns = 0
        self.idle_ns = 0
        self.timeouts = TimeoutsSpec()

    # --- transport callbacks ----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        now = perf_counter_ns()  # first: the arrival stamp of these bytes
        # Parse later, once per loop iteration: when many sockets are readable at once
        # every one of them is stamped before any is parsed, so parsing stream k never
        # delays the stamp of stream k+1 (the burst lag at hundreds of streams).
        client = self.client
        client._pending.append((self, data, now))
        if not client._drain_scheduled:
            client._drain_scheduled = True
            self.loop.call_soon(client._drain)

    def process(self, data: bytes, now: int) -> None:
        """Parse one read stamped ``now`` (called from FastClient._drain)."""
        self.now = now
        self.last_rx_ns = now
        self.rx_bytes += len(data)
        if self.state is None and not self.draining:
            # Bytes nobody asked for on an idle connection: it cannot be trusted.
            self.close()
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            msg = " ".join(str(exc).split())[:120]
            self._fail("protocol", f"invalid HTTP response: {type(exc).__name__} {msg}")
            self.close()

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        now = perf_counter_ns()
        self.client._drain()  # bytes that arrived before the close come first
        self.closed = True
        self.draining = False
        self.client._forget(self)
        state = self.state
        if state is None:
            return
        if self.err_body is not None:
            self._finish_error_body(now)
        elif not self.headers_done:
            if exc is not None:
                cls, message = classify_exception(exc, connected=True)
                state.fail(cls, message, now)
            else:
                state.fail(
                    "truncated" if self.rx_bytes else "protocol",
                    "connection closed before response headers",
                    now,
                )
        else:
            # Close-delimited bodies end here; otherwise truncated unless [DONE] or a
            # finish_reason was seen (StreamState.finish decides).
            state.finish(now)
        self._resolve()

    # --- httptools callbacks ----------------------------------------------------------

    def on_status(self, status: bytes) -> None:
        self.reason = status

    def on_header(self, name: bytes, value: bytes) -> None:
        lower = name.lower()
        if lower == b"content-type":
            self.content_type = value.lower()
        elif lower == b"retry-after":
            self.retry_after = value.decode("latin-1", "replace")

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if status < 200:  # 100 Continue / 103 Early Hints: a final response follows
            return
        self.headers_done = True
        state = self.state
        if state is None:
            return
        state.http_status = status
        if needs_error_body(status, self.content_type.decode("latin-1")):
            self.err_body = bytearray()

    def on_body(self, body: bytes) -> None:
        err = self.err_body
        if err is not None:
            if len(err) < ERROR_BODY_LIMIT:
                err += body[: ERROR_BODY_LIMIT - len(err)]
            return
        state = self.state
        if state is not None and state.feed(body, self.now):
            if state.done and state.error_class is None:
                # [DONE]: the result is complete; the terminating chunk usually follows
                # in the same read, and the connection returns to the pool then.
                self.draining = True
                self._resolve()
            else:
                self._resolve()
                self.close()

    def on_message_complete(self) -> None:
        if self.parser.get_status_code() < 200:
            return  # an interim 1xx response; the real one follows on this connection
        now = self.now
        state = self.state
        if state is not None:
            if self.err_body is not None:
                self._finish_error_body(now)
            else:
                state.finish(now)
            self._resolve()
        keep = self.parser.should_keep_alive()
        if self.draining or state is not None:
            self.draining = False
            if keep and not self.closed:
                self.client._release(self)
            else:
                self.close()

    # --- request lifecycle ------------------------------------------------------------

    def start(
        self, state: StreamState, waiter: asyncio.Future[None], t0_ns: int, t: TimeoutsSpec
    ) -> None:
        self.state = state
        self.waiter = waiter
        self.headers_done = False
        self.content_type = b""
        self.retry_after = None
        self.err_body = None
        self.reason = b""
        self.rx_bytes = 0
        self.t0_ns = t0_ns
        self.total_deadline_ns = t0_ns + int(t.total_s * NS_PER_S)
        self.first_byte_deadline_ns = perf_counter_ns() + int(t.first_byte_s * NS_PER_S)
        self.idle_ns = int(t.idle_s * NS_PER_S)
        self.timeouts = t
        self._arm(min(self.total_deadline_ns, self.first_byte_deadline_ns))

    def _arm(self, deadline_ns: int) -> None:
        delay = max(0.0, (deadline_ns - perf_counter_ns()) / NS_PER_S)
        self.timer = self.loop.call_later(delay, self._check)

    def _check(self) -> None:
        self.timer = None
        self.client._drain()  # a read stamped but not yet parsed is not idle time
        state = self.state
        if state is None:
            return
        now = perf_counter_ns()
        t = self.timeouts
        if now >= self.total_deadline_ns:
            message = f"total timeout {t.total_s:g} s expired"
        elif state.first_byte_ns is None:
            if now < self.first_byte_deadline_ns:
                self._arm(min(self.total_deadline_ns, self.first_byte_deadline_ns))
                return
            message = f"first-byte timeout {t.first_byte_s:g} s expired (no response body)"
        else:
            idle_deadline = self.last_rx_ns + self.idle_ns
            if now < idle_deadline:
                self._arm(min(self.total_deadline_ns, idle_deadline))
                return
            message = f"idle-gap timeout {t.idle_s:g} s expired after {state.bytes_received} bytes"
        state.fail("timeout", message, now)
        self._resolve()
        self.close()

    def _finish_error_body(self, now: int) -> None:
        state = self.state
        assert state is not None and self.err_body is not None
        state.fail_http(
            state.http_status or 0,
            self.reason.decode("latin-1", "replace"),
            self.content_type.decode("latin-1", "replace"),
            bytes(self.err_body),
            now,
            self.retry_after,
        )

    def _fail(self, error_class: str, message: str) -> None:
        state = self.state
        if state is not None:
            state.fail(error_class, message, perf_counter_ns())
            self._resolve()

    def _resolve(self) -> None:
        """Hand the result to the waiting request exactly once and detach from it."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.state = None
        waiter = self.waiter
        self.waiter = None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def close(self) -> None:
        self.draining = False
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.abort()
        self.client._forget(self)
        self.client._wake(self.origin)


class FastClient:
    """The default streaming client (``kind = "fast"``). See the module docstring.

    Use as ``async with FastClient(...) as c: await c.stream(req)`` or call
    :meth:`aclose`. ``notices`` collects one-line remarks (pool overflow, proxy
    fallback) for the run's warnings.
    """

    kind: Final = "fast"

    def __init__(
        self,
        *,
        pool_size: int,
        timeouts: TimeoutsSpec,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        if pool_size < 1:
            raise ValueError("pool_size must be >= 1")
        self.pool_size = pool_size
        self.timeouts = timeouts
        self.notices: list[str] = []
        self._ssl_context = ssl_context
        self._idle: dict[tuple[str, str, int], list[_Conn]] = {}
        self._open: dict[tuple[str, str, int], set[_Conn]] = {}
        self._targets: dict[str, _Target] = {}
        self._proxied: dict[str, bool] = {}
        self._fallback: Any = None
        self._closed = False
        self._pending: list[tuple[_Conn, bytes, int]] = []
        self._drain_scheduled = False
        # Requests holding (or opening) a connection, per origin: the pool overflowed
        # only when this exceeds pool_size.
        self._busy: dict[tuple[str, str, int], int] = {}
        self._drain_waiters: dict[tuple[str, str, int], list[asyncio.Future[None]]] = {}

    async def __aenter__(self) -> FastClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _drain(self) -> None:
        """Parse every stamped-but-unparsed read, in arrival order."""
        self._drain_scheduled = False
        pending = self._pending
        if pending:
            self._pending = []
            for conn, data, now in pending:
                conn.process(data, now)

    # --- pool -------------------------------------------------------------------------

    def _forget(self, conn: _Conn) -> None:
        idle = self._idle.get(conn.origin)
        if idle is not None and conn in idle:
            idle.remove(conn)
        opened = self._open.get(conn.origin)
        if opened is not None:
            opened.discard(conn)

    def _release(self, conn: _Conn) -> None:
        idle = self._idle.setdefault(conn.origin, [])
        if self._closed or len(idle) >= self.pool_size:
            conn.close()
        else:
            idle.append(conn)
            self._wake(conn.origin)

    def _wake(self, origin: tuple[str, str, int]) -> None:
        """A connection of ``origin`` went idle or away: wake one drain waiter."""
        waiters = self._drain_waiters.get(origin)
        while waiters:
            waiter = waiters.pop(0)
            if not waiter.done():
                waiter.set_result(None)
                return

    def _take_idle(self, origin: tuple[str, str, int]) -> _Conn | None:
        idle = self._idle.get(origin)
        while idle:
            conn = idle.pop()
            if not conn.closed and conn.transport is not None and not conn.transport.is_closing():
                return conn
        return None

    async def _idle_or_drained(self, origin: tuple[str, str, int]) -> _Conn | None:
        """An idle connection; else, while some connection is only reading its body
        terminator and no other request already waits for it, that one (waited for
        up to DRAIN_WAIT_S); else None: then a new connection must be opened. One
        waiter per draining connection, so concurrent requests are never serialized
        onto one connection."""
        conn = self._take_idle(origin)
        if conn is not None:
            return conn
        draining = sum(1 for c in self._open.get(origin, ()) if c.draining)
        waiters = self._drain_waiters.setdefault(origin, [])
        if draining <= sum(1 for w in waiters if not w.done()):
            return None
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters.append(waiter)
        try:
            await asyncio.wait_for(waiter, DRAIN_WAIT_S)
        except TimeoutError:
            return None
        finally:
            if waiter in waiters:
                waiters.remove(waiter)
        return self._take_idle(origin)

    async def _connect(self, target: _Target) -> tuple[_Conn, int]:
        """Open a new connection to ``target``'s origin; returns it and its set-up time
        (ns: DNS + TCP + TLS). Raises what create_connection raises, or TimeoutError."""
        origin = target.origin
        opened = self._open.setdefault(origin, set())
        loop = asyncio.get_running_loop()
        conn = _Conn(self, origin)
        ctx: ssl.SSLContext | None = None
        if target.scheme == "https":
            ctx = self._ssl_context or ssl.create_default_context()
        opened.add(conn)  # before the await, so concurrent connects count too
        start = perf_counter_ns()
        try:
            await asyncio.wait_for(
                loop.create_connection(
                    lambda: conn,
                    target.host,
                    target.port,
                    ssl=ctx,
                    server_hostname=target.host if ctx is not None else None,
                ),
                self.timeouts.connect_s,
            )
        except BaseException:
            opened.discard(conn)
            raise
        return conn, perf_counter_ns() - start

    def _note_overflow(self, target: _Target) -> None:
        """Called before a request opens a new connection: the pool overflowed only when
        more requests are in flight to the origin than pool_size."""
        in_flight = self._busy.get(target.origin, 0)
        if in_flight <= self.pool_size:
            return
        if not any("pool_size" in n for n in self.notices):
            self.notices.append(
                f"more requests in flight to {target.host_header} ({in_flight}) than"
                f" pool_size={self.pool_size}: opened extra connections (not kept alive)"
            )

    async def preconnect(self, url: str, n: int) -> list[int | None]:
        """Open up to ``n`` new connections to ``url``'s origin and park them idle (at
        most ``pool_size`` stay), so the measured requests reuse them. Returns each
        connection's set-up time in ns, None for one that failed (its error shows again
        on the request that needs the connection). Never raises for network errors."""
        if n < 1:
            return []
        if self._proxied_url(url):
            assert self._fallback is not None
            fallback: list[int | None] = await self._fallback.preconnect(url, n)
            return fallback
        try:
            target = self._target(url)
        except ValueError:
            return [None] * n
        out: list[int | None] = []

        async def one() -> None:
            try:
                conn, took = await self._connect(target)
            except (OSError, TimeoutError, ssl.SSLError):
                out.append(None)
                return
            out.append(took)
            self._release(conn)

        remaining = min(n, self.pool_size)
        while remaining > 0:
            batch = min(remaining, _PRECONNECT_BATCH)
            await asyncio.gather(*(one() for _ in range(batch)))
            remaining -= batch
        return out

    # --- requests ---------------------------------------------------------------------

    def _target(self, url: str) -> _Target:
        target = self._targets.get(url)
        if target is None:
            target = self._targets[url] = _parse_target(url)
        return target

    def _head(self, req: PreparedRequest, target: _Target) -> bytes:
        lines = [
            f"POST {target.path} HTTP/1.1",
            f"Host: {target.host_header}",
            f"User-Agent: {_USER_AGENT}",
            "Accept-Encoding: identity",
            f"Content-Length: {len(req.body)}",
        ]
        lines.extend(f"{k}: {v}" for k, v in req.headers)
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _proxied_url(self, url: str) -> bool:
        """Whether a proxy applies to ``url`` (then the httpx fallback serves it)."""
        proxied = self._proxied.get(url)
        if proxied is None:
            proxy = proxy_for(url)
            proxied = self._proxied[url] = proxy is not None
            if proxied:
                notice = (
                    f"tokrate: a proxy applies to {url.split('/')[2]}; "
                    "using the httpx client for it"
                )
                self.notices.append(notice)
                print(notice, file=sys.stderr)
        if proxied and self._fallback is None:
            from tokrate.client.httpx_client import HttpxClient

            self._fallback = HttpxClient(pool_size=self.pool_size, timeouts=self.timeouts)
        return proxied

    async def _via_proxy(
        self, req: PreparedRequest, on_partial: Any, watch: Any
    ) -> StreamResult | None:
        if not self._proxied_url(req.url):
            return None
        result: StreamResult = await self._fallback.stream(req, on_partial=on_partial, watch=watch)
        return result

    async def stream(
        self,
        req: PreparedRequest,
        *,
        on_partial: Callable[[StreamResult], None] | None = None,
        watch: Callable[[StreamState], None] | None = None,
    ) -> StreamResult:
        """Send ``req`` and read its stream to the end.

        Never raises for a request failure: the result carries error_class/message and
        whatever timings were observed. Cancellation is not swallowed: the connection is
        dropped, ``on_partial`` (when given) receives the partial result with
        error_class "cancelled", and CancelledError propagates. ``watch`` (when given)
        receives each attempt's live StreamState as it starts, so a caller can read
        ``len(state.chunk_ns)`` while the stream runs (live progress) at no cost per
        chunk.
        """
        via = await self._via_proxy(req, on_partial, watch)
        if via is not None:
            return via
        try:
            target = self._target(req.url)
        except ValueError as exc:
            return _failed(req, "connect", str(exc))
        return await with_usage_fallback(
            lambda r, **kw: self._attempt(r, target, on_partial, watch, **kw), req
        )

    async def _attempt(
        self,
        req: PreparedRequest,
        target: _Target,
        on_partial: Callable[[StreamResult], None] | None,
        watch: Callable[[StreamState], None] | None,
        *,
        attempt: int,
        usage_rejected: bool = False,
    ) -> StreamResult:
        head = self._head(req, target)
        payload = head + req.body
        loop = asyncio.get_running_loop()
        origin = target.origin
        stale_retry = False
        self._busy[origin] = self._busy.get(origin, 0) + 1
        try:
            while True:
                state = StreamState()
                if watch is not None:
                    watch(state)
                if stale_retry:
                    state.notes.append("stale keep-alive connection: resent on a new one")
                # Waiting for a connection that is only reading its body terminator is
                # the previous request's tail, not this one's latency: before t0.
                conn = await self._idle_or_drained(origin)
                started_at = time.time()
                t0 = perf_counter_ns()
                reused = conn is not None
                if conn is None:
                    self._note_overflow(target)
                    try:
                        conn, state.connect_ns = await self._connect(target)
                    except asyncio.CancelledError:
                        state.fail("cancelled", "cancelled while connecting", perf_counter_ns())
                        if on_partial is not None:
                            on_partial(_freeze(state, req, t0, started_at, attempt, usage_rejected))
                        raise
                    except TimeoutError:
                        state.fail(
                            "connect",
                            f"connect timeout {self.timeouts.connect_s:g} s to {target.host_header}",
                            perf_counter_ns(),
                        )
                        return _freeze(state, req, t0, started_at, attempt, usage_rejected)
                    except OSError as exc:
                        cls, message = classify_exception(exc, connected=False)
                        state.fail(cls, f"{message} ({target.host_header})", perf_counter_ns())
                        return _freeze(state, req, t0, started_at, attempt, usage_rejected)
                else:
                    state.connect_ns = 0
                waiter: asyncio.Future[None] = loop.create_future()
                conn.start(state, waiter, t0, self.timeouts)
                assert conn.transport is not None
                conn.transport.write(payload)
                try:
                    await waiter
                except asyncio.CancelledError:
                    conn._resolve()
                    conn.close()
                    state.fail("cancelled", "cancelled", perf_counter_ns())
                    if on_partial is not None:
                        on_partial(_freeze(state, req, t0, started_at, attempt, usage_rejected))
                    raise
                # A reused keep-alive connection the server had already closed gives EOF
                # with no byte of response: resend once on a fresh connection (recorded).
                if (
                    reused
                    and not stale_retry
                    and conn.rx_bytes == 0
                    and state.http_status is None
                    and state.error_class in ("protocol", "truncated")
                ):
                    stale_retry = True
                    continue
                return _freeze(state, req, t0, started_at, attempt, usage_rejected)
        finally:
            self._busy[origin] -= 1

    async def aclose(self) -> None:
        """Close every connection (idle or busy) and the proxy fallback client."""
        self._closed = True
        for conns in list(self._open.values()):
            for conn in list(conns):
                conn.close()
        self._open.clear()
        self._idle.clear()
        for waiters in self._drain_waiters.values():
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)
        self._drain_waiters.clear()
        if self._fallback is not None:
            await self._fallback.aclose()


def _freeze(
    state: StreamState,
    req: PreparedRequest,
    t0: int,
    started_at: float,
    attempt: int,
    usage_rejected: bool,
) -> StreamResult:
    return state.result(
        client="fast",
        api=req.api,
        endpoint=req.endpoint,
        model=req.model,
        t0_ns=t0,
        started_at=started_at,
        usage_rejected=usage_rejected,
        attempt=attempt,
    )


def _failed(req: PreparedRequest, error_class: str, message: str) -> StreamResult:
    now = perf_counter_ns()
    state = StreamState()
    state.fail(error_class, message, now)
    return _freeze(state, req, now, time.time(), 1, False)
