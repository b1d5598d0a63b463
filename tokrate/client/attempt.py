"""One attempt of a request on the httpx-based clients (``httpx`` and ``openai``): the
set-up, deadlines and failure handling both paths share, so they differ only in how
they send and read.

An :class:`Attempt` holds the live :class:`~tokrate.client.accumulate.StreamState`,
the connection trace, the stamp just before the send (``t0``; the result's t0 is the
trace's stamp right after the body was written, where it was) and the total deadline. Deadlines are enforced with one anyio cancel scope: first byte, then each
idle gap (:meth:`Attempt.read_on`), capped by the total; when the scope fires,
:meth:`Attempt.after_scope` records which timeout it was. Every failure becomes data on
the state; only cancellation propagates (after handing the partial facts over).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from time import perf_counter_ns

import anyio

from tokrate.client.accumulate import StreamState
from tokrate.client.connect_trace import ConnectTrace
from tokrate.client.failures import classify_httpx_exception
from tokrate.client.request import PreparedRequest
from tokrate.client.result import StreamResult
from tokrate.spec.types import TimeoutsSpec

__all__ = ["Attempt", "timeout_message"]


def timeout_message(t: TimeoutsSpec, state: StreamState, *, total_hit: bool) -> str:
    """The same one-line timeout messages as the fast client."""
    if total_hit:
        return f"total timeout {t.total_s:g} s expired"
    if state.first_byte_ns is None:
        return f"first-byte timeout {t.first_byte_s:g} s expired (no response body)"
    return f"idle-gap timeout {t.idle_s:g} s expired after {state.bytes_received} bytes"


class Attempt:
    """The shared part of one attempt (see the module doc)."""

    def __init__(
        self,
        kind: str,
        req: PreparedRequest,
        timeouts: TimeoutsSpec,
        *,
        attempt: int,
        usage_rejected: bool,
        watch: Callable[[StreamState], None] | None,
    ) -> None:
        self.kind = kind
        self.req = req
        self.timeouts = timeouts
        self.attempt = attempt
        self.usage_rejected = usage_rejected
        self.state = StreamState(
            max_chunks=req.max_response_chunks,
            chunk_limit_source=req.chunk_limit_source,
            max_bytes=req.max_response_bytes,
            api=req.api,
            keep_text=req.keep_text,
        )
        if watch is not None:
            watch(self.state)
        self.trace = ConnectTrace()
        self.loop = asyncio.get_running_loop()
        self.got_headers = False
        self.started_at = time.time()
        self.t0 = perf_counter_ns()
        self.total_deadline = self.loop.time() + timeouts.total_s

    def scope(self) -> anyio.CancelScope:
        """The cancel scope of the request, first armed for the first byte."""
        deadline = self.loop.time() + self.timeouts.first_byte_s
        return anyio.CancelScope(deadline=min(self.total_deadline, deadline))

    def read_on(self, scope: anyio.CancelScope, wait_s: float | None = None) -> None:
        """Re-arm ``scope`` for the next idle gap (or ``wait_s``), within the total."""
        wait = self.timeouts.idle_s if wait_s is None else wait_s
        scope.deadline = min(self.total_deadline, self.loop.time() + wait)

    def after_scope(self, scope: anyio.CancelScope) -> None:
        """Record the timeout when the scope fired: ``timeout`` once the request was
        written (the server's latency), ``not_sent`` when it expired before that (the
        client's own pool, loop or connect held it; the server never saw it)."""
        if scope.cancelled_caught:
            total_hit = self.loop.time() >= self.total_deadline - 0.001
            message = timeout_message(self.timeouts, self.state, total_hit=total_hit)
            if self.trace.request_sent:
                self.state.fail("timeout", message, perf_counter_ns())
            else:
                expired = message.removesuffix(" (no response body)")
                self.state.fail(
                    "not_sent",
                    f"request never sent: {expired} {self.trace.unsent_stage}",
                    perf_counter_ns(),
                )

    def cancelled(self, on_partial: Callable[[StreamResult], None] | None) -> None:
        """A cancellation (the grace period ended): record it and hand over what was
        measured; the caller re-raises."""
        self.state.fail("cancelled", "cancelled", perf_counter_ns())
        if on_partial is not None:
            on_partial(self.result())

    def transport_failure(self, exc: BaseException) -> None:
        """Any transport exception as data: a connection that ended mid-stream is
        ``truncated`` (with the transport's words), the rest by class."""
        cls, message = classify_httpx_exception(exc, got_headers=self.got_headers)
        if cls == "timeout" and not self.trace.request_sent:
            # A pool timeout, or a write that never completed: the server never had it.
            cls, message = "not_sent", f"request never sent: {message}"
        now = perf_counter_ns()
        if cls == "truncated":
            self.state.finish(now)
            if self.state.error_class == "truncated":
                self.state.error_message = f"{self.state.error_message} ({message})"
        else:
            self.state.fail(cls, message, now)

    def result(self) -> StreamResult:
        self.state.connect_ns = self.trace.connect_ns
        # t0: when the request's body was written (httpcore's trace), else (never
        # sent) the stamp before the send.
        t0 = self.trace.sent_ns or self.t0
        return self.state.result(
            client=self.kind,
            api=self.req.api,
            endpoint=self.req.endpoint,
            model=self.req.model,
            t0_ns=t0,
            started_at=self.started_at + (t0 - self.t0) / 1e9,
            usage_rejected=self.usage_rejected,
            attempt=self.attempt,
        )
