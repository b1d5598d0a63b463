"""One HTTP/1.1 connection of the fast client: an asyncio Protocol that stamps every
read with ``perf_counter_ns()`` first and feeds httptools' C parser; and the URL facts
(origin, Host header, proxy) a connection is opened for.

On a :class:`~tokrate.client.kernel_stamps.KernelTransport` each read arrives through
:meth:`Connection.stamped_read` with the kernel's receive time of its bytes instead;
``stamp_source`` says which kind of stamp the current request's reads carried. The
request's own last byte is stamped when it left (:meth:`Connection.stamped_send`: the
kernel's transmit stamp, else the moment it was handed to the kernel); ``sent_ns`` and
``sent_kernel`` hold it for the request's t0.

The pool that owns connections (:class:`tokrate.client.stream.FastClient`) is seen here
only through :class:`ConnectionPool`, so this module does not import it.
"""

from __future__ import annotations

import asyncio
import urllib.request
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Final, Protocol
from urllib.parse import urlsplit

import httptools

from tokrate.client.accumulate import ERROR_BODY_LIMIT, StreamState, needs_error_body
from tokrate.client.failures import classify_exception
from tokrate.client.kernel_stamps import KernelTransport
from tokrate.client.result import NS_PER_S
from tokrate.spec.types import TimeoutsSpec

__all__ = [
    "Connection",
    "ConnectionPool",
    "SentFacts",
    "URLTarget",
    "parse_target",
    "proxy_for",
]

Origin = tuple[str, str, int]
#: What a finished request learned of its own send and reads, handed over with its end
#: (the connection may serve another request before the waiting task runs): when its
#: last byte left (perf_counter ns, 0: unknown), whether that is the kernel's transmit
#: stamp, and its reads' ``stamp_source``.
SentFacts = tuple[int, bool, str]

#: Response status line + headers, at most (h11, under httpx and the SDK, allows 16 KiB;
#: a real server's are well under 8 KiB).
MAX_HEAD_BYTES: Final = 64 * 1024


class ConnectionPool(Protocol):
    """What a connection needs of the pool it belongs to."""

    pending_reads: list[tuple[Connection, bytes, int]]
    drain_scheduled: bool

    def drain_reads(self) -> None:
        """Parse the reads stamped so far, in arrival order."""

    def forget(self, conn: Connection) -> None:
        """Drop a closed connection."""

    def release(self, conn: Connection) -> None:
        """Take back a connection whose response ended."""

    def wake(self, origin: Origin) -> None:
        """A connection to ``origin`` became free (or closed): wake one waiter."""


@dataclass(frozen=True, slots=True)
class URLTarget:
    scheme: str
    host: str
    port: int
    path: str
    host_header: str

    @property
    def origin(self) -> tuple[str, str, int]:
        return (self.scheme, self.host, self.port)


def parse_target(url: str) -> URLTarget:
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
    return URLTarget(scheme, host, port, path, host_header)


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


class Connection(asyncio.Protocol):
    """One HTTP/1.1 connection; serves one request at a time (no pipelining)."""

    __slots__ = (
        "client",
        "closed",
        "content_type",
        "draining",
        "encoding",
        "err_body",
        "first_byte_deadline_ns",
        "headers_done",
        "idle_ns",
        "kernel_transport",
        "last_rx_ns",
        "location",
        "loop",
        "now",
        "origin",
        "parser",
        "reason",
        "retry_after",
        "rx_bytes",
        "sent_kernel",
        "sent_ns",
        "state",
        "t0_ns",
        "timeouts",
        "timer",
        "total_deadline_ns",
        "transport",
        "user_stamped",
        "waiter",
    )

    def __init__(self, client: ConnectionPool, origin: tuple[str, str, int]) -> None:
        self.client = client
        self.origin = origin
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.state: StreamState | None = None
        self.waiter: asyncio.Future[SentFacts] | None = None
        self.now = 0
        self.last_rx_ns = 0
        self.rx_bytes = 0
        self.reason = b""
        self.headers_done = False
        self.content_type = b""
        self.retry_after: str | None = None
        self.location: str | None = None
        self.encoding: str | None = None
        self.err_body: bytearray | None = None
        self.draining = False
        self.timer: asyncio.TimerHandle | None = None
        self.t0_ns = 0
        self.total_deadline_ns = 0
        self.first_byte_deadline_ns = 0
        self.idle_ns = 0
        self.timeouts = TimeoutsSpec()
        #: Whether the transport stamps reads in the kernel (KernelTransport).
        self.kernel_transport = False
        #: Whether some read of the current request got a user-space stamp.
        self.user_stamped = True
        #: When the current request's last byte left (0: not yet known), and whether
        #: that is the kernel's transmit stamp.
        self.sent_ns = 0
        self.sent_kernel = False

    @property
    def stamp_source(self) -> str:
        """ "kernel" when every read of the current request had a kernel stamp."""
        return "user" if self.user_stamped else "kernel"

    # --- transport callbacks ----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.kernel_transport = isinstance(transport, KernelTransport)

    def data_received(self, data: bytes) -> None:
        self.stamped_read(data, perf_counter_ns(), False)  # first: the arrival stamp

    def stamped_send(self, sent_ns: int, kernel: bool) -> None:
        """The current request's last byte left at ``sent_ns`` (kernel_stamps'
        StampedProtocol); a kernel stamp is never replaced by a user one."""
        if kernel or not self.sent_kernel:
            self.sent_ns = sent_ns
            self.sent_kernel = kernel

    def stamped_read(self, data: bytes, now: int, kernel: bool) -> None:
        """Parse (kernel stamp) or queue (user stamp) one read that arrived at ``now``."""
        client = self.client
        if kernel and not client.pending_reads:
            # The kernel's stamp does not depend on when this runs, so parsing now
            # delays no stamp; nothing is queued, so reads stay in arrival order.
            self.process(data, now)
            return
        if not kernel:
            self.user_stamped = True
        # Parse later, once per loop iteration: when many sockets are readable at once
        # every one of them is stamped before any is parsed, so parsing stream k never
        # delays the user stamp of stream k+1 (the burst lag at hundreds of streams).
        client.pending_reads.append((self, data, now))
        if not client.drain_scheduled:
            client.drain_scheduled = True
            self.loop.call_soon(client.drain_reads)

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
            return
        if not self.headers_done and self.rx_bytes > MAX_HEAD_BYTES and self.state is not None:
            # The parser keeps a header it has not finished: bounded here, as h11 bounds
            # it for httpx and the SDK (a 50 MB header was buffered whole, then called
            # truncated).
            self._fail("protocol", f"response headers larger than {MAX_HEAD_BYTES // 1024} KiB")
            self.close()

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        now = perf_counter_ns()
        self.client.drain_reads()  # bytes that arrived before the close come first
        self.closed = True
        self.draining = False
        self.client.forget(self)
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
        elif lower == b"location":
            self.location = value.decode("latin-1", "replace")
        elif lower == b"content-encoding":
            self.encoding = value.decode("latin-1", "replace")

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
        elif state.refuse_encoding(self.encoding, self.now or perf_counter_ns()):
            self._resolve()
            self.close()

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
                self.client.release(self)
            else:
                self.close()

    # --- request lifecycle ------------------------------------------------------------

    def start(
        self,
        state: StreamState,
        waiter: asyncio.Future[SentFacts],
        t0_ns: int,
        t: TimeoutsSpec,
    ) -> None:
        self.state = state
        self.waiter = waiter
        self.user_stamped = not self.kernel_transport
        self.headers_done = False
        self.content_type = b""
        self.retry_after = None
        self.location = None
        self.encoding = None
        self.err_body = None
        self.reason = b""
        self.rx_bytes = 0
        self.sent_ns = 0
        self.sent_kernel = False
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
        self.client.drain_reads()  # a read stamped but not yet parsed is not idle time
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
            # Idle is measured from the last line the stream finished (an event, a
            # comment), not the last byte: a byte a second never finishing a line is
            # no progress. An error body (no event stream) counts bytes.
            if self.err_body is not None:
                base = self.last_rx_ns
            else:
                base = state.last_line_ns if state.last_line_ns is not None else state.first_byte_ns
            idle_deadline = base + self.idle_ns
            if now < idle_deadline:
                self._arm(min(self.total_deadline_ns, idle_deadline))
                return
            dripping = " (bytes came, no line ended)" if self.last_rx_ns > base else ""
            message = (
                f"idle-gap timeout {t.idle_s:g} s expired after {state.bytes_received} bytes"
                + dripping
            )
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
            self.location,
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
            waiter.set_result(self.sent_facts())

    def sent_facts(self) -> SentFacts:
        """The current request's :data:`SentFacts`. A transmit stamp still waiting on
        the error queue is read first: the response's reads can be handled before the
        loop woke for it (both wake the same socket)."""
        if self.kernel_transport and not self.sent_kernel and self.sent_ns:
            transport = self.transport
            if isinstance(transport, KernelTransport):
                transport.poll_sent()
        return (self.sent_ns, self.sent_kernel, self.stamp_source)

    def close(self) -> None:
        self.draining = False
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.abort()
        self.client.forget(self)
        self.client.wake(self.origin)
