"""The client seam: one ``StreamClient`` protocol (``tokrate.client.factory.open_client``
builds one; this module imports none of them).

Three implementations produce identical :class:`StreamResult` facts: ``fast`` (the
default, :mod:`tokrate.client.stream`), ``httpx`` (:mod:`tokrate.client.httpx_client`)
and ``openai`` (:mod:`tokrate.client.sdk`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final, Protocol

from tokrate.client.request import PreparedRequest
from tokrate.client.result import StreamResult

#: Longest wait (seconds, before t0) for a connection that delivered [DONE] and awaits
#: only its body terminator, rather than opening a new connection.
DRAIN_WAIT_S: Final = 0.05

if TYPE_CHECKING:
    from tokrate.client.accumulate import StreamState

__all__ = ["CLIENT_KINDS", "STALE_NOTE", "StreamClient", "with_usage_fallback"]

CLIENT_KINDS = ("fast", "httpx", "openai")

PartialSink = Callable[[StreamResult], None]
#: Receives each attempt's live StreamState when it starts (read-only use: progress).
StateWatch = Callable[["StreamState"], None]


class StreamClient(Protocol):
    """Streams one request at a time per call; many calls may run concurrently.

    ``stream`` never raises for a request failure (the result carries it); it lets
    cancellation propagate after handing the partial facts to ``on_partial``.
    ``notices`` are one-line remarks for the run's warnings. Every result carries
    ``connect_ns``: the set-up of the connection the request opened, 0 when it reused
    one, None when unknown.
    """

    @property
    def kind(self) -> str: ...

    @property
    def notices(self) -> list[str]: ...

    async def stream(
        self,
        req: PreparedRequest,
        *,
        on_partial: PartialSink | None = None,
        watch: StateWatch | None = None,
    ) -> StreamResult: ...

    async def preconnect(self, url: str, n: int) -> list[int | None]:
        """Open up to ``n`` keep-alive connections to ``url``'s origin before any
        measured request (at most ``pool_size`` stay); returns the set-up time in ns of
        each connection opened, None for one that failed. Never raises for network
        errors: a failure shows again on the request that needs the connection."""
        ...

    async def aclose(self) -> None: ...


#: The note on a result whose request went out on a kept-alive connection the server
#: had already closed, and was sent once more (the server never read the first).
STALE_NOTE: Final = "stale keep-alive connection: resent once"

#: One send of a request, called as ``send(req, attempt=n, usage_rejected=flag)``.
Attempt = Callable[..., Awaitable[StreamResult]]


async def with_usage_fallback(send: Attempt, req: PreparedRequest) -> StreamResult:
    """Send ``req``; when the server rejected ``stream_options`` (a 400/422 naming it),
    send it once more without, marked ``usage_rejected``; when it rejected
    ``max_tokens`` (a model that takes only ``max_completion_tokens``), send it once
    more with the limit renamed, noted :data:`~tokrate.client.fallbacks.MAX_COMPLETION_NOTE`.
    The only resends a client makes on its own, and the result says so."""
    import dataclasses

    from tokrate.client.accumulate import MAX_TOKENS_NOTE, REJECTED_NOTE
    from tokrate.client.fallbacks import MAX_COMPLETION_NOTE
    from tokrate.client.request import with_max_completion_tokens, without_stream_options

    result = await send(req, attempt=1, usage_rejected=False)
    if REJECTED_NOTE in result.notes and req.include_usage:
        req = without_stream_options(req)
        result = await send(req, attempt=2, usage_rejected=True)
    if MAX_TOKENS_NOTE in result.notes and req.max_tokens_field == "max_tokens":
        rejected = result.usage_rejected
        result = await send(
            with_max_completion_tokens(req), attempt=result.attempt + 1, usage_rejected=rejected
        )
        result = dataclasses.replace(result, notes=(*result.notes, MAX_COMPLETION_NOTE))
    return result
