"""``--client httpx``: httpx streaming (HTTP/2 when the ``h2`` package is installed,
proxies from the environment), stamping each raw read as httpx yields it.

Same facts as the fast client (shared :class:`~tokrate.client.accumulate.StreamState`),
same timeouts: connect (httpx), first body byte from send, idle gap between reads and
total, enforced with one ``asyncio.timeout`` rescheduled per read. The pool never caps
concurrency (``max_connections=None``); ``pool_size`` keep-alive connections are kept.
"""

from __future__ import annotations

import asyncio
import importlib.util
import ssl
import time
from collections.abc import Callable
from time import perf_counter_ns
from typing import Final

import anyio
import httpx

from tokrate.client.accumulate import (
    ERROR_BODY_LIMIT,
    StreamState,
    needs_error_body,
)
from tokrate.client.base import with_usage_fallback
from tokrate.client.failures import classify_httpx_exception
from tokrate.client.request import PreparedRequest
from tokrate.client.result import StreamResult
from tokrate.spec import TimeoutsSpec

__all__ = ["HttpxClient", "timeout_message"]

HTTP2_AVAILABLE: Final = importlib.util.find_spec("h2") is not None


def timeout_message(t: TimeoutsSpec, state: StreamState, *, total_hit: bool) -> str:
    """The same one-line timeout messages as the fast client."""
    if total_hit:
        return f"total timeout {t.total_s:g} s expired"
    if state.first_byte_ns is None:
        return f"first-byte timeout {t.first_byte_s:g} s expired (no response body)"
    return f"idle-gap timeout {t.idle_s:g} s expired after {state.bytes_received} bytes"


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
        self._client = httpx.AsyncClient(
            http2=HTTP2_AVAILABLE,
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=pool_size),
            # read/pool None: first-byte, idle and total are enforced below.
            timeout=httpx.Timeout(
                connect=timeouts.connect_s, read=None, write=timeouts.idle_s, pool=None
            ),
            verify=ssl_context if ssl_context is not None else True,
            trust_env=True,
        )

    async def __aenter__(self) -> HttpxClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._client.aclose()

    async def stream(
        self,
        req: PreparedRequest,
        *,
        on_partial: Callable[[StreamResult], None] | None = None,
    ) -> StreamResult:
        """Like :meth:`tokrate.client.stream.FastClient.stream`."""
        return await with_usage_fallback(lambda r, **kw: self._attempt(r, on_partial, **kw), req)

    async def _attempt(
        self,
        req: PreparedRequest,
        on_partial: Callable[[StreamResult], None] | None,
        *,
        attempt: int,
        usage_rejected: bool,
    ) -> StreamResult:
        t = self.timeouts
        request = self._client.build_request(
            "POST",
            req.url,
            content=req.body,
            headers=[*req.headers, ("Accept-Encoding", "identity")],
        )
        state = StreamState()
        loop = asyncio.get_running_loop()
        got_headers = False
        started_at = time.time()
        t0 = perf_counter_ns()
        total_deadline = loop.time() + t.total_s

        def freeze() -> StreamResult:
            return state.result(
                client=self.kind,
                api=req.api,
                endpoint=req.endpoint,
                model=req.model,
                t0_ns=t0,
                started_at=started_at,
                usage_rejected=usage_rejected,
                attempt=attempt,
            )

        try:
            with anyio.CancelScope(
                deadline=min(total_deadline, loop.time() + t.first_byte_s)
            ) as cm:
                response = await self._client.send(request, stream=True)
                got_headers = True
                try:
                    status = response.status_code
                    state.http_status = status
                    ctype = response.headers.get("content-type", "")
                    if needs_error_body(status, ctype):
                        body = bytearray()
                        async for data in response.aiter_raw():
                            body += data
                            if len(body) >= ERROR_BODY_LIMIT:
                                break
                        reason = response.reason_phrase
                        state.fail_http(
                            status,
                            reason,
                            ctype,
                            bytes(body[:ERROR_BODY_LIMIT]),
                            perf_counter_ns(),
                            response.headers.get("retry-after"),
                        )
                    else:
                        idle = t.idle_s
                        async for data in response.aiter_raw():
                            now = perf_counter_ns()
                            if state.feed(data, now):
                                break
                            cm.deadline = min(total_deadline, loop.time() + idle)
                        state.finish(perf_counter_ns())
                finally:
                    with anyio.CancelScope(shield=True):  # close even when timed out
                        await response.aclose()
            if cm.cancelled_caught:
                total_hit = loop.time() >= total_deadline - 0.001
                now = perf_counter_ns()
                state.fail("timeout", timeout_message(t, state, total_hit=total_hit), now)
        except asyncio.CancelledError:
            state.fail("cancelled", "cancelled", perf_counter_ns())
            if on_partial is not None:
                on_partial(freeze())
            raise
        except Exception as exc:  # every transport failure becomes data, none escapes
            cls, message = classify_httpx_exception(exc, got_headers=got_headers)
            now = perf_counter_ns()
            if cls == "truncated":
                state.finish(now)
                if state.error_class == "truncated":
                    state.error_message = f"{state.error_message} ({message})"
            else:
                state.fail(cls, message, now)
        return freeze()
