"""Connection set-up time for the httpx and openai paths, from httpcore's ``trace``.

httpcore calls a request's ``extensions["trace"]`` callback around every step it
takes for that request; a request that opens a connection sees
``connection.connect_tcp.started`` ... ``connection.connect_tcp.complete`` (and, on
https, ``connection.start_tls.*``; through a proxy the same names under ``proxy.``),
one that reuses a kept-alive connection (or an HTTP/2 stream on an open connection)
sees none of them. :class:`ConnectTrace` turns that into the record's ``connect_ns``:
the kernel's round trip of the TCP handshake (``connect_tcp.complete`` hands over the
stream, whose socket's ``TCP_INFO`` is read right then: by the time the result is
built the connection may be closed, and uvloop's stand-in for a closed socket raises)
plus the span of ``start_tls`` (:func:`tokrate.client.handshake.set_up_ns`); where the kernel has no figure, the
``perf_counter_ns`` span from the first connect step's start to the last one's
completion. 0 when no connect step ran, None when one started and never completed.

It also says whether, and when, the request left the client
(:attr:`ConnectTrace.request_sent`, :attr:`ConnectTrace.sent_ns`: the request's t0 on
these paths):
httpcore traces the write of the request's headers and body on its connection, so a
request that timed out before that was never sent, however long it waited: for a
connection of the client's own pool, for its event loop, or for its own connect to
finish. That is the client's failure, not the server's (error class ``not_sent``).
"""

from __future__ import annotations

from time import perf_counter_ns
from typing import Any, Final

from tokrate.client.handshake import set_up_ns, tcp_handshake_rtt_ns

__all__ = ["ConnectTrace"]

_STEPS: Final = ("connect_tcp", "connect_unix_socket", "start_tls")


class ConnectTrace:
    """An async ``trace`` extension callback (httpcore awaits it on async clients)."""

    __slots__ = (
        "_done",
        "_last_step",
        "_open_steps",
        "_rtt_ns",
        "_rtt_read",
        "_started_ns",
        "_tls_ns",
        "_tls_started",
        "request_sent",
        "sent_ns",
    )

    def __init__(self) -> None:
        self._started_ns: int | None = None
        self._done: int | None = None
        self._open_steps = 0
        self._rtt_ns: int | None = None
        self._rtt_read = False
        self._tls_started: int | None = None
        self._tls_ns = 0
        self._last_step: tuple[str, str] | None = None
        #: The whole request was written on its connection (body complete, or the
        #: response head awaited after a write the server cut short).
        self.request_sent = False
        #: perf_counter_ns right after the request's body was written (0: not yet):
        #: the request's t0 on these paths (a user-space stamp).
        self.sent_ns = 0

    async def __call__(self, name: str, info: dict[str, Any]) -> None:
        _prefix, _, rest = name.partition(".")
        step, _, phase = rest.rpartition(".")
        self._last_step = (step, phase)
        if (step == "send_request_body" and phase == "complete") or (
            step == "receive_response_headers"
        ):
            if not self.sent_ns:
                self.sent_ns = perf_counter_ns()
            self.request_sent = True
        if step not in _STEPS:
            return
        now = perf_counter_ns()
        if phase == "started":
            if self._started_ns is None:
                self._started_ns = now
            if step == "start_tls":
                self._tls_started = now
            self._open_steps += 1
        elif phase == "complete":
            self._open_steps -= 1
            self._done = now
            if step == "start_tls" and self._tls_started is not None:
                self._tls_ns += now - self._tls_started
            elif step == "connect_tcp" and not self._rtt_read:
                stream = info.get("return_value")
                if stream is not None:
                    self._rtt_read = True
                    self._rtt_ns = tcp_handshake_rtt_ns(stream.get_extra_info("socket"))
        # "failed" leaves the step open: the connection never came up.

    @property
    def connect_ns(self) -> int | None:
        """Set-up span in ns; 0 when the request reused a connection; None when a
        connect step started but did not complete."""
        if self._started_ns is None:
            return 0
        if self._open_steps > 0 or self._done is None:
            return None
        return set_up_ns(self._rtt_ns, self._done - self._started_ns, self._tls_ns)

    @property
    def unsent_stage(self) -> str:
        """Where a request that was never sent stood, in words for its message."""
        if self._last_step is None:
            return "before it had a connection (waiting for the client's pool or event loop)"
        step, phase = self._last_step
        if step in _STEPS:
            return "opening its connection" if phase != "complete" else "on a new connection"
        if step.startswith("send_request"):
            return "writing the request"
        return "on its connection"
