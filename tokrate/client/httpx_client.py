"""``--client httpx``: httpx streaming (HTTP/2 when the ``h2`` package is installed,
proxies from the environment), stamping each raw read as httpx yields it.

Same facts as the fast client (shared :class:`~tokrate.client.accumulate.StreamState`),
same timeouts: connect (httpx), first body byte from send, idle gap between reads and
total, enforced with one ``asyncio.timeout`` rescheduled per read. The pool never caps
concurrency (``max_connections=None``); ``pool_size`` keep-alive connections are kept
(idle for httpx's default 5 s), in pools of at most 16 (:class:`PoolShards`: httpcore's
pool costs O(connections²) per request). A request that went out on a kept-alive
connection the server had just closed (no byte of response) is sent once more, noted.
Connection set-up (``connect_ns``) comes from httpcore's ``trace`` extension
(:class:`~tokrate.client.connect_trace.ConnectTrace`); :func:`preconnect_http` opens
connections ahead of the measurement with cheap GET requests held open together.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import ssl
from collections.abc import Callable, Iterator
from time import perf_counter_ns
from typing import Any, Final

import anyio
import httpx

from tokrate.client.accumulate import (
    ERROR_BODY_LIMIT,
    StreamState,
    needs_error_body,
)
from tokrate.client.attempt import Attempt
from tokrate.client.base import DRAIN_WAIT_S, STALE_NOTE, with_usage_fallback
from tokrate.client.connect_trace import ConnectTrace
from tokrate.client.request import PreparedRequest
from tokrate.client.result import StreamResult
from tokrate.spec.types import TimeoutsSpec

__all__ = ["HTTP2_AVAILABLE", "SHARD_CONNECTIONS", "HttpxClient", "PoolShards", "preconnect_http"]

HTTP2_AVAILABLE: Final = importlib.util.find_spec("h2") is not None
#: Warm-up requests preconnect_http sends at once, and how long it reads each answer.
_PRECONNECT_BATCH: Final = 64
_PRECONNECT_READ_S: Final = 5.0
#: Kept-alive connections per httpx pool (see :class:`PoolShards`).
SHARD_CONNECTIONS: Final = 16


async def preconnect_http(client: Any, url: str, n: int, pool_size: int) -> list[int | None]:
    """Open up to ``min(n, pool_size)`` connections of ``client`` (an httpx-style
    AsyncClient) to ``url``'s origin: GET ``url`` that many times, every response held
    open until all have answered (so each takes its own connection; HTTP/2 multiplexes
    them on one), then each body read and closed, which leaves the connections in the
    pool. Any status counts. Returns the set-up time (ns) of every connection
    opened, None for one that failed. Never raises for network errors."""
    out: list[int | None] = []
    held: list[Any] = []
    remaining = min(n, pool_size)

    async def one() -> None:
        trace = ConnectTrace()
        try:
            request = client.build_request("GET", url, extensions={"trace": trace})
            held.append(await client.send(request, stream=True))
        except Exception:  # every failure is the request's own business later
            out.append(None)
            return
        took = trace.connect_ns
        if took:  # 0: an HTTP/2 stream on a connection already open
            out.append(took)

    try:
        while remaining > 0:
            batch = min(remaining, _PRECONNECT_BATCH)
            async with anyio.create_task_group() as tg:
                for _ in range(batch):
                    tg.start_soon(one)
            remaining -= batch
    finally:
        # Read each (small) body to its end, so its connection goes back to the pool
        # rather than being closed half-read; give up on one that takes too long.
        with anyio.CancelScope(shield=True):
            for response in held:
                with anyio.move_on_after(_PRECONNECT_READ_S):
                    await response.aread()
                await response.aclose()
    return out


class PoolShards:
    """The httpx client's connections split over pools of at most
    :data:`SHARD_CONNECTIONS` kept-alive connections each; a request goes to the pool
    with the fewest requests in flight (in a closed loop, the one its stream just left,
    so it reuses that stream's connection).

    Why not one pool: httpcore 1.0's pool re-examines every connection, and for each
    idle one counts every connection again, each time a request starts or ends
    (``AsyncConnectionPool._assign_requests_to_connections``), which is O(connections²)
    per request; that count also takes busy connections for idle ones, so idle
    connections are closed whenever the pool holds more than its keep-alive limit. At
    1,000 streams in one pool that pass took most of the client's CPU (21 s of a 51 s
    run beside two CPU-bound processes), the loop lagged 5-11 s, the server's 5 s
    keep-alive closed the waiting connections, nearly every request opened a new one
    and 0.2-1.2% of those bursts of connects ran past the connect timeout
    (``benchmarks/httpx_streams.py``). The openai SDK's pool (httpcore2) does the pass
    in one sweep, which is why the openai client never lost them. Small pools keep the
    pass short; HTTP/2 then multiplexes each pool's streams on its own connection.
    """

    def __init__(self, pool_size: int, make: Callable[[int], httpx.AsyncClient]) -> None:
        count = max(1, -(-pool_size // SHARD_CONNECTIONS))
        #: Kept-alive connections per shard: ``pool_size`` in all, rounded up.
        self.keep = max(1, -(-pool_size // count))
        self.clients = [make(self.keep) for _ in range(count)]
        self._in_flight = [0] * count

    @contextlib.contextmanager
    def take(self) -> Iterator[httpx.AsyncClient]:
        """The least busy shard's client, counted busy while the block runs."""
        shard = min(range(len(self._in_flight)), key=self._in_flight.__getitem__)
        self._in_flight[shard] += 1
        try:
            yield self.clients[shard]
        finally:
            self._in_flight[shard] -= 1

    async def preconnect(self, url: str, n: int) -> list[int | None]:
        """:func:`preconnect_http` with ``n`` spread evenly over the shards."""
        count = len(self.clients)
        out: list[int | None] = []
        for i, client in enumerate(self.clients):
            share = n // count + (i < n % count)
            if share:
                out += await preconnect_http(client, url, share, self.keep)
        return out

    async def aclose(self) -> None:
        for client in self.clients:
            await client.aclose()


def _stale_reuse(a: Attempt) -> bool:
    """The request went out on a reused connection (no connect step) that closed before
    a byte of the response came back."""
    state = a.state
    return (
        a.trace.connect_ns == 0
        and not a.got_headers
        and state.bytes_received == 0
        and state.error_class == "protocol"
        and (state.error_message or "").startswith("connection closed before response headers")
    )


class HttpxClient:
    """Streaming over one shared ``httpx.AsyncClient`` (``kind = "httpx"``)."""

    kind: Final = "httpx"

    def __init__(
        self,
        *,
        pool_size: int,
        timeouts: TimeoutsSpec,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.pool_size = pool_size
        self.timeouts = timeouts
        self.notices: list[str] = []
        self._shards = PoolShards(
            pool_size,
            lambda keep: httpx.AsyncClient(
                http2=HTTP2_AVAILABLE,
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=keep),
                # read/pool None: first-byte, idle and total are enforced below.
                timeout=httpx.Timeout(
                    connect=timeouts.connect_s, read=None, write=timeouts.idle_s, pool=None
                ),
                verify=ssl_context if ssl_context is not None else True,
                trust_env=True,
            ),
        )

    async def __aenter__(self) -> HttpxClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._shards.aclose()

    async def preconnect(self, url: str, n: int) -> list[int | None]:
        """Open up to ``n`` connections to ``url``'s origin (see :func:`preconnect_http`),
        spread evenly over the shards."""
        return await self._shards.preconnect(url, n)

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
        a = await self._send(req, on_partial, watch, attempt, usage_rejected)
        if _stale_reuse(a):
            # A kept-alive connection the server had closed as the request went out on
            # it: the server never read it (the fast client does the same, once).
            a = await self._send(req, on_partial, watch, attempt, usage_rejected)
            a.state.notes.append(STALE_NOTE)
        return a.result()

    async def _send(
        self,
        req: PreparedRequest,
        on_partial: Callable[[StreamResult], None] | None,
        watch: Callable[[StreamState], None] | None,
        attempt: int,
        usage_rejected: bool,
    ) -> Attempt:
        a = Attempt(
            self.kind,
            req,
            self.timeouts,
            attempt=attempt,
            usage_rejected=usage_rejected,
            watch=watch,
        )
        with self._shards.take() as client:
            await self._send_on(client, a, req, on_partial)
        return a

    async def _send_on(
        self,
        client: httpx.AsyncClient,
        a: Attempt,
        req: PreparedRequest,
        on_partial: Callable[[StreamResult], None] | None,
    ) -> None:
        request = client.build_request(
            "POST",
            req.url,
            content=req.body,
            headers=[*req.headers, ("Accept-Encoding", "identity")],
            extensions={"trace": a.trace},
        )
        try:
            with a.scope() as scope:
                response = await client.send(request, stream=True)
                a.got_headers = True
                try:
                    await self._read(a, response, scope)
                finally:
                    with anyio.CancelScope(shield=True):  # close even when timed out
                        await response.aclose()
            a.after_scope(scope)
        except asyncio.CancelledError:
            a.cancelled(on_partial)
            raise
        except Exception as exc:  # every transport failure becomes data, none escapes
            a.transport_failure(exc)

    async def _read(self, a: Attempt, response: httpx.Response, scope: anyio.CancelScope) -> None:
        """The response into the attempt's state: an error body, or the stream."""
        state = a.state
        status = response.status_code
        state.http_status = status
        ctype = response.headers.get("content-type", "")
        if needs_error_body(status, ctype):
            body = bytearray()
            async for data in response.aiter_raw():
                body += data
                if len(body) >= ERROR_BODY_LIMIT:
                    break
            state.fail_http(
                status,
                response.reason_phrase,
                ctype,
                bytes(body[:ERROR_BODY_LIMIT]),
                perf_counter_ns(),
                response.headers.get("retry-after"),
                response.headers.get("location"),
            )
            return
        if state.refuse_encoding(response.headers.get("content-encoding"), perf_counter_ns()):
            return
        raw = response.aiter_raw()
        line_ns: int | None = -1  # re-arm the idle gap on the first read, then per line
        async for data in raw:
            if state.feed(data, perf_counter_ns()):
                break
            # Idle runs from the last read that ended a line, as in the fast client: a
            # server dripping bytes that never finish a line is idle.
            if state.last_line_ns != line_ns:
                line_ns = state.last_line_ns
                a.read_on(scope)
        state.finish(perf_counter_ns())
        if state.done and state.error_class is None:
            # Read the body to its end (the chunked terminator follows [DONE]), so the
            # connection goes back to the pool instead of being closed half-read.
            a.read_on(scope, DRAIN_WAIT_S)
            async for _ in raw:
                pass
