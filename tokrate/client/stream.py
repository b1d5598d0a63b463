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
closed loop keeps one connection per stream; the waiter is handed that connection
directly when it frees, so no request arriving in between can take it first. :meth:`FastClient.preconnect` opens
connections ahead of the measurement. ``connect_ns`` of each result is the TCP (+ TLS)
handshake of the connection it opened (:mod:`tokrate.client.handshake`), 0 on a reused
one.

A request to an origin that an HTTP(S)_PROXY / ALL_PROXY variable applies to goes
through the httpx client instead (with a one-line notice on stderr), since this client
speaks no proxy protocol.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable
from time import perf_counter_ns
from typing import Any, Final

from tokrate._version import __version__
from tokrate.client.accumulate import (
    StreamState,
)
from tokrate.client.base import DRAIN_WAIT_S, STALE_NOTE, with_usage_fallback
from tokrate.client.connection import Connection, SentFacts, URLTarget, parse_target, proxy_for
from tokrate.client.failures import classify_exception
from tokrate.client.handshake import connect_ns
from tokrate.client.kernel_stamps import clock_bridge, open_kernel_connection
from tokrate.client.request import PreparedRequest
from tokrate.client.result import StreamResult
from tokrate.spec.types import TimeoutsSpec

__all__ = ["FastClient"]

_USER_AGENT: Final = f"tokrate/{__version__}"
#: Connections :meth:`FastClient.preconnect` opens at once (a burst of hundreds of
#: SYNs can overflow a server's accept backlog).
_PRECONNECT_BATCH: Final = 64


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
        kernel_stamps: str = "auto",
    ) -> None:
        if pool_size < 1:
            raise ValueError("pool_size must be >= 1")
        self.pool_size = pool_size
        self.timeouts = timeouts
        self.notices: list[str] = []
        # Kernel receive stamps (tokrate.client.kernel_stamps); None: user stamps.
        self._bridge = clock_bridge(kernel_stamps, self.notices)
        self._ssl_context = ssl_context
        self._idle: dict[tuple[str, str, int], list[Connection]] = {}
        self._open: dict[tuple[str, str, int], set[Connection]] = {}
        self._targets: dict[str, URLTarget] = {}
        self._proxied: dict[str, bool] = {}
        self._fallback: Any = None
        self._closed = False
        self.pending_reads: list[tuple[Connection, bytes, int]] = []
        self.drain_scheduled = False
        # Requests holding (or opening) a connection, per origin: the pool overflowed
        # only when this exceeds pool_size.
        self._busy: dict[tuple[str, str, int], int] = {}
        self._drain_waiters: dict[
            tuple[str, str, int], list[asyncio.Future[Connection | None]]
        ] = {}

    async def __aenter__(self) -> FastClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def drain_reads(self) -> None:
        """Parse every stamped-but-unparsed read, in arrival order."""
        self.drain_scheduled = False
        pending = self.pending_reads
        if pending:
            self.pending_reads = []
            for conn, data, now in pending:
                conn.process(data, now)

    # --- pool -------------------------------------------------------------------------

    def forget(self, conn: Connection) -> None:
        idle = self._idle.get(conn.origin)
        if idle is not None and conn in idle:
            idle.remove(conn)
        opened = self._open.get(conn.origin)
        if opened is not None:
            opened.discard(conn)

    def release(self, conn: Connection) -> None:
        """A response ended and ``conn`` may serve another: handed straight to a request
        waiting for a draining connection (so no request arriving in between can take
        it from the idle list first: T10), else parked idle, else closed."""
        if self._closed:
            conn.close()
            return
        if self._hand_over(conn.origin, conn):
            return
        idle = self._idle.setdefault(conn.origin, [])
        if len(idle) >= self.pool_size:
            conn.close()
        else:
            idle.append(conn)

    def wake(self, origin: tuple[str, str, int]) -> None:
        """A connection of ``origin`` went away: wake one drain waiter (it opens a new
        connection or takes an idle one)."""
        self._hand_over(origin, None)

    def _hand_over(self, origin: tuple[str, str, int], conn: Connection | None) -> bool:
        waiters = self._drain_waiters.get(origin)
        while waiters:
            waiter = waiters.pop(0)
            if not waiter.done():
                waiter.set_result(conn)
                return True
        return False

    def _take_idle(self, origin: tuple[str, str, int]) -> Connection | None:
        idle = self._idle.get(origin)
        while idle:
            conn = idle.pop()
            if _usable(conn):
                return conn
        return None

    async def _idle_or_drained(self, origin: tuple[str, str, int]) -> Connection | None:
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
        waiter: asyncio.Future[Connection | None] = asyncio.get_running_loop().create_future()
        waiters.append(waiter)
        try:
            handed = await asyncio.wait_for(waiter, DRAIN_WAIT_S)
        except TimeoutError:
            return None
        except asyncio.CancelledError:
            # Handed a connection just as this request was cancelled: give it back.
            if waiter.done() and not waiter.cancelled() and waiter.result() is not None:
                self.release(waiter.result())  # type: ignore[arg-type]
            raise
        finally:
            if waiter in waiters:
                waiters.remove(waiter)
        if handed is not None and _usable(handed):
            return handed
        return self._take_idle(origin)

    async def _connect(self, target: URLTarget) -> tuple[Connection, int]:
        """Open a new connection to ``target``'s origin; returns it and its set-up time
        (ns, :func:`tokrate.client.handshake.connect_ns`: the kernel's TCP handshake
        round trip + the TLS handshake, not the loop's scheduling). Raises what
        create_connection raises, or TimeoutError."""
        origin = target.origin
        opened = self._open.setdefault(origin, set())
        loop = asyncio.get_running_loop()
        conn = Connection(self, origin)
        ctx: ssl.SSLContext | None = None
        if target.scheme == "https":
            ctx = self._ssl_context or ssl.create_default_context()
        opened.add(conn)  # before the await, so concurrent connects count too
        start = perf_counter_ns()
        hostname = target.host if ctx is not None else None
        try:
            if self._bridge is not None:
                opening: Any = open_kernel_connection(
                    lambda: conn,
                    target.host,
                    target.port,
                    bridge=self._bridge,
                    ssl_context=ctx,
                    server_hostname=hostname,
                )
            else:
                opening = loop.create_connection(
                    lambda: conn, target.host, target.port, ssl=ctx, server_hostname=hostname
                )
            transport, _ = await asyncio.wait_for(opening, self.timeouts.connect_s)
        except BaseException:
            opened.discard(conn)
            raise
        timed = perf_counter_ns() - start
        # asyncio's own TLS is not timed apart from the rest (None): the span stands.
        tls_ns = transport.get_extra_info("tls_handshake_ns", 0 if ctx is None else None)
        return conn, connect_ns(transport.get_extra_info("socket"), timed, tls_ns)

    def _note_overflow(self, target: URLTarget) -> None:
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
            self.release(conn)

        remaining = min(n, self.pool_size)
        while remaining > 0:
            batch = min(remaining, _PRECONNECT_BATCH)
            await asyncio.gather(*(one() for _ in range(batch)))
            remaining -= batch
        return out

    # --- requests ---------------------------------------------------------------------

    def _target(self, url: str) -> URLTarget:
        target = self._targets.get(url)
        if target is None:
            target = self._targets[url] = parse_target(url)
        return target

    def _head(self, req: PreparedRequest, target: URLTarget) -> bytes:
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
                    + (" (user-space stamps)" if self._bridge is not None else "")
                )
                self.notices.append(notice)
        if proxied and self._fallback is None:
            from tokrate.client.httpx_client import HttpxClient

            self._fallback = HttpxClient(
                pool_size=self.pool_size, timeouts=self.timeouts, ssl_context=self._ssl_context
            )
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
        target: URLTarget,
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
                state = StreamState(
                    max_chunks=req.max_response_chunks,
                    chunk_limit_source=req.chunk_limit_source,
                    max_bytes=req.max_response_bytes,
                    keep_text=req.keep_text,
                    api=req.api,
                )
                if watch is not None:
                    watch(state)
                if stale_retry:
                    state.notes.append(STALE_NOTE)
                # Waiting for a connection that is only reading its body terminator is
                # the previous request's tail, not this one's latency: before t0.
                # A resend goes on a fresh connection: the other idle ones may be just as
                # stale (a server that closes each connection after its response).
                conn = None if stale_retry else await self._idle_or_drained(origin)
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
                waiter: asyncio.Future[SentFacts] = loop.create_future()
                conn.start(state, waiter, t0, self.timeouts)
                assert conn.transport is not None
                conn.transport.write(payload)
                if not conn.kernel_transport:
                    # The transport wrote what the socket took at once (asyncio and
                    # uvloop try that first): the stamp after the write is its t0.
                    conn.stamped_send(perf_counter_ns(), False)
                try:
                    sent = await waiter
                except asyncio.CancelledError:
                    sent = conn.sent_facts()
                    conn._resolve()
                    conn.close()
                    state.fail("cancelled", "cancelled", perf_counter_ns())
                    if on_partial is not None:
                        on_partial(
                            _freeze(state, req, t0, started_at, attempt, usage_rejected, sent)
                        )
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
                return _freeze(state, req, t0, started_at, attempt, usage_rejected, sent)
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
        # A transport's close completes in a loop callback: let it run, or a loop that
        # ends right after (an error path) leaves the sockets to the garbage collector.
        await asyncio.sleep(0)
        for waiters in self._drain_waiters.values():
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)
        self._drain_waiters.clear()
        if self._fallback is not None:
            await self._fallback.aclose()


def _usable(conn: Connection) -> bool:
    return not conn.closed and conn.transport is not None and not conn.transport.is_closing()


def _freeze(
    state: StreamState,
    req: PreparedRequest,
    before_ns: int,
    started_at: float,
    attempt: int,
    usage_rejected: bool,
    sent: SentFacts | None = None,
) -> StreamResult:
    """The result of one attempt. Its t0 is when the request's last byte left (``sent``:
    the kernel's transmit stamp, else the moment the write handed it to the kernel);
    ``before_ns``, taken just before the connection was taken or opened, where the
    request never went out. ``started_at`` (wall clock at ``before_ns``) moves with it."""
    t0, source, stamp_source = before_ns, "user", "user"
    if sent is not None:
        sent_ns, kernel, stamp_source = sent
        if sent_ns:
            t0, source = sent_ns, "kernel" if kernel else "user"
    return state.result(
        client="fast",
        api=req.api,
        endpoint=req.endpoint,
        model=req.model,
        t0_ns=t0,
        started_at=started_at + (t0 - before_ns) / 1e9,
        usage_rejected=usage_rejected,
        attempt=attempt,
        stamp_source=stamp_source,
        t0_source=source,
    )


def _failed(req: PreparedRequest, error_class: str, message: str) -> StreamResult:
    now = perf_counter_ns()
    state = StreamState()
    state.fail(error_class, message, now)
    return _freeze(state, req, now, time.time(), 1, False)
