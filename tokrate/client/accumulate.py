"""The hot path shared by every client: body bytes (already stamped) -> facts.

A transport calls :meth:`StreamState.feed` with each read and the
``perf_counter_ns()`` stamp it took the moment the read arrived; SSE decoding, JSON
parsing (orjson) and chunk classification all happen after the stamp, so parsing cost
never lands in a timestamp. Every event of one read shares that read's stamp (they
arrived together). Failures inside the stream (bad framing, bad JSON, an in-band error
object) are recorded, never raised: feed() returns True when the stream is finished.
"""

from __future__ import annotations

import orjson

from tokrate.client.chunks import ChunkError, classify_chunk
from tokrate.client.failures import (
    http_error_message,
    is_usage_rejection,
    snippet,
    status_class,
)
from tokrate.client.result import StreamResult
from tokrate.client.sse import SSEDecoder, SSEProtocolError

__all__ = [
    "ERROR_BODY_LIMIT",
    "MAX_RESPONSE_BYTES",
    "MAX_RESPONSE_CHUNKS",
    "REJECTED_NOTE",
    "ResponseLimitExceeded",
    "StreamState",
    "needs_error_body",
]

_DONE = b"[DONE]"
#: Bytes of a non-2xx (or non-stream 200) body kept for the error message.
ERROR_BODY_LIMIT = 8192
#: Note on a result whose server rejected ``stream_options`` (triggers the one retry).
REJECTED_NOTE = "server rejected stream_options"
#: Defaults of ``[client] max_response_chunks`` / ``max_response_bytes``: well past any
#: real answer, low enough that one endless stream cannot exhaust memory (each chunk
#: keeps an 8-byte stamp here and a float offset in its record).
MAX_RESPONSE_CHUNKS = 1_000_000
MAX_RESPONSE_BYTES = 256 * 1024 * 1024


class ResponseLimitExceeded(Exception):
    """Raised by a transport that counts bytes outside :meth:`StreamState.feed` (the
    SDK path) to stop the read; the failure is already recorded on the state."""


def needs_error_body(status: int, content_type: str) -> bool:
    """True when the response is not an event stream: a non-2xx status, or a 200 that
    is an HTML page or a JSON document (read its body for the error message)."""
    ctype = content_type.lower()
    return status >= 300 or "text/html" in ctype or "application/json" in ctype


class StreamState:
    """Mutable per-request accumulator; :meth:`result` freezes it into a StreamResult.

    ``chunk_ns`` gets one stamp per content-bearing chunk. ``end_ns`` is set at [DONE],
    at a failure, or by :meth:`finish` (connection end).
    """

    __slots__ = (
        "answer_chunks",
        "bytes_received",
        "chunk_ns",
        "chunks_seen",
        "connect_ns",
        "decoder",
        "done",
        "end_ns",
        "error_class",
        "error_message",
        "finish_reason",
        "finished",
        "first_answer_ns",
        "first_byte_ns",
        "http_status",
        "max_bytes",
        "max_chunks",
        "notes",
        "reasoning_chunks",
        "response_id",
        "retry_after_s",
        "tool_chunks",
        "usage",
    )

    def __init__(
        self, *, max_chunks: int = MAX_RESPONSE_CHUNKS, max_bytes: int = MAX_RESPONSE_BYTES
    ) -> None:
        self.decoder = SSEDecoder()
        self.max_chunks = max_chunks
        self.max_bytes = max_bytes
        #: Every parsed chunk, content-bearing or not (an endless stream of empty
        #: deltas must hit the limit too).
        self.chunks_seen = 0
        self.chunk_ns: list[int] = []
        self.first_byte_ns: int | None = None
        self.first_answer_ns: int | None = None
        self.end_ns: int | None = None
        self.answer_chunks = 0
        self.reasoning_chunks = 0
        self.tool_chunks = 0
        self.usage: dict[str, int] | None = None
        self.finish_reason: str | None = None
        self.response_id: str | None = None
        self.done = False
        self.finished = False
        self.http_status: int | None = None
        self.error_class: str | None = None
        self.error_message: str | None = None
        self.bytes_received = 0
        self.notes: list[str] = []
        self.retry_after_s: float | None = None
        #: Set-up of the connection this request opened (ns), 0 when it reused one,
        #: None while unknown; the transport sets it.
        self.connect_ns: int | None = None

    def fail(self, error_class: str, message: str, now_ns: int) -> None:
        """Record the first failure (later ones are consequences) and finish."""
        if self.error_class is None and not self.finished:
            self.error_class = error_class
            self.error_message = message
        if self.end_ns is None:
            self.end_ns = now_ns
        self.finished = True

    def fail_http(
        self,
        status: int,
        reason: str,
        content_type: str,
        body: bytes,
        now: int,
        retry_after: str | None = None,
    ) -> None:
        """Record a response that is not an event stream (see :func:`needs_error_body`):
        ``http_4xx``/``http_429``/``http_5xx`` by status, or ``protocol`` for a 200 page.
        Notes :data:`REJECTED_NOTE` when a 400 names stream_options."""
        self.http_status = status
        self.bytes_received += len(body)
        if retry_after is not None:
            self.retry_after_s = parse_retry_after(retry_after)
        if status >= 300:
            self.fail(status_class(status), http_error_message(status, reason, body), now)
        else:
            text = http_error_message(status, reason, body).split(": ", 1)[1]
            self.fail(
                "protocol", f"expected text/event-stream, got {content_type or '?'}: {text}", now
            )
        if is_usage_rejection(status, body):
            self.notes.append(REJECTED_NOTE)

    def finish(self, now_ns: int) -> None:
        """The body ended (message complete or connection end) at ``now_ns``.

        A stream without [DONE] is still ok when a finish_reason came; without either
        it is ``truncated``.
        """
        if self.finished:
            return
        self.finished = True
        if self.end_ns is None:
            self.end_ns = now_ns
        if not self.done and self.finish_reason is None and self.error_class is None:
            self.error_class = "truncated"
            self.error_message = (
                f"stream ended before [DONE] or a finish_reason "
                f"after {len(self.chunk_ns)} content chunks"
            )

    def count_bytes(self, n: int, now_ns: int) -> bool:
        """Add ``n`` body bytes read at ``now_ns``; True (the stream failed as
        ``response_limit``) once the total passes ``max_bytes``."""
        self.bytes_received += n
        if self.first_byte_ns is None:
            self.first_byte_ns = now_ns
        if self.bytes_received > self.max_bytes:
            self.fail(
                "response_limit",
                f"response exceeded {self.max_bytes} bytes ([client] max_response_bytes)",
                now_ns,
            )
            return True
        return False

    def feed(self, data: bytes, now_ns: int) -> bool:
        """Consume one read stamped ``now_ns``; True once the stream is finished."""
        if self.finished:
            return True
        if self.count_bytes(len(data), now_ns):
            return True
        try:
            events = self.decoder.decode(data)
        except SSEProtocolError as exc:
            self.fail("protocol", str(exc), now_ns)
            return True
        for event in events:
            payload = event.data
            if payload == _DONE:
                self.done = True
                self.end_ns = now_ns
                self.finished = True
                return True
            try:
                obj = orjson.loads(payload)
            except orjson.JSONDecodeError:
                self.fail("protocol", f"data is not JSON: {snippet(payload, 80)}", now_ns)
                return True
            if self.feed_chunk(obj, now_ns):
                return True
        return False

    def feed_chunk(self, obj: object, now_ns: int) -> bool:
        """Consume one parsed chunk that arrived at ``now_ns``; True when it ended the
        stream (an in-band error, a malformed chunk or one past ``max_chunks``, all
        recorded)."""
        self.chunks_seen += 1
        if self.chunks_seen > self.max_chunks:
            self.fail(
                "response_limit",
                f"response exceeded {self.max_chunks} chunks ([client] max_response_chunks)",
                now_ns,
            )
            return True
        try:
            facts = classify_chunk(obj)
        except ChunkError as exc:
            self.fail("protocol", str(exc), now_ns)
            return True
        if facts.error is not None:
            code = facts.error_code
            cls = status_class(code) if code is not None and code >= 400 else "protocol"
            self.fail(cls, f"error in stream: {facts.error}", now_ns)
            return True
        if facts.answer or facts.reasoning or facts.tool_call:
            self.chunk_ns.append(now_ns)
            if facts.answer or facts.tool_call:
                if self.first_answer_ns is None:
                    self.first_answer_ns = now_ns
                if facts.answer:
                    self.answer_chunks += 1
                else:
                    self.tool_chunks += 1
            if facts.reasoning:
                self.reasoning_chunks += 1
        if facts.finish_reason is not None:
            self.finish_reason = facts.finish_reason
        if facts.usage is not None:
            self.usage = facts.usage
        if self.response_id is None and facts.response_id is not None:
            self.response_id = facts.response_id
        return False

    def result(
        self,
        *,
        client: str,
        api: str,
        endpoint: str,
        model: str,
        t0_ns: int,
        started_at: float,
        usage_rejected: bool = False,
        attempt: int = 1,
        stamp_source: str = "user",
    ) -> StreamResult:
        """Freeze into a StreamResult (call after finish() or fail())."""
        return StreamResult(
            client=client,
            api=api,
            endpoint=endpoint,
            model=model,
            t0_ns=t0_ns,
            started_at=started_at,
            first_byte_ns=self.first_byte_ns,
            chunk_ns=tuple(self.chunk_ns),
            first_answer_ns=self.first_answer_ns,
            end_ns=self.end_ns,
            answer_chunks=self.answer_chunks,
            reasoning_chunks=self.reasoning_chunks,
            tool_chunks=self.tool_chunks,
            usage=self.usage,
            finish_reason=self.finish_reason,
            response_id=self.response_id,
            done=self.done,
            http_status=self.http_status,
            error_class=self.error_class,
            error_message=self.error_message,
            bytes_received=self.bytes_received,
            usage_rejected=usage_rejected,
            attempt=attempt,
            notes=tuple(self.notes),
            retry_after_s=self.retry_after_s,
            connect_ns=self.connect_ns,
            stamp_source=stamp_source,
        )


def parse_retry_after(value: str) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delta-seconds or an HTTP-date
    (RFC 9110 10.2.3); None when it is neither (the header is advisory)."""
    import email.utils
    import math
    import time

    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - time.time()
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)
