"""Incremental Server-Sent Events decoder (pure: bytes in, events out, no I/O).

Follows the WHATWG event-stream rules that matter for OpenAI-style streams: lines end
in CRLF, LF or CR (a CR at the end of one read pairs with an LF at the start of the
next); ``field:value`` with one optional space after the colon; lines starting with
``:`` are comments (keep-alives); a blank line dispatches the event; several ``data``
lines are joined with ``\\n``; an event with no ``data`` is not dispatched; an
unterminated event at end of stream is dropped. ``event`` names are kept; ``id`` and
``retry`` are ignored (tokrate never reconnects).

Memory is bounded: a line longer than ``max_line_bytes`` or an event whose data exceeds
``max_event_bytes`` raises :class:`SSEProtocolError` instead of buffering without limit.
Data stays ``bytes``; UTF-8 validation is the JSON parser's job (off the timing path).

Invariant (property-tested): for any byte string and any way of splitting it into
reads, the concatenated events are the same, and a protocol error is raised either in
every split or in none.
"""

from __future__ import annotations

from typing import Final, NamedTuple

__all__ = [
    "DEFAULT_MAX_EVENT_BYTES",
    "DEFAULT_MAX_LINE_BYTES",
    "SSEDecoder",
    "SSEEvent",
    "SSEProtocolError",
]

#: 1 MiB: an OpenAI chunk is a few hundred bytes; even a large tool-call delta fits.
DEFAULT_MAX_LINE_BYTES: Final = 1 << 20
#: 4 MiB of joined ``data`` lines per event.
DEFAULT_MAX_EVENT_BYTES: Final = 4 << 20


class SSEProtocolError(ValueError):
    """The byte stream cannot be a sane event stream (a line or event over its limit)."""


class SSEEvent(NamedTuple):
    """One dispatched event: ``data`` (lines joined by ``\\n``) and the ``event`` name
    (``None`` when the stream gave none, i.e. the default ``message``)."""

    data: bytes
    event: str | None = None


#: Builds an SSEEvent without NamedTuple's Python-level ``__new__`` (per-token path).
_new_event: Final = tuple.__new__


class SSEDecoder:
    """Feed raw body bytes with :meth:`decode`; call :meth:`flush` at end of stream.

    Not thread-safe; one decoder per response. After it raised SSEProtocolError the
    decoder is spent: further calls raise again.
    """

    __slots__ = (
        "_data",
        "_data_len",
        "_event",
        "_failed",
        "_max_event",
        "_max_line",
        "_parts",
        "_parts_len",
        "_pending_cr",
    )

    def __init__(
        self,
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    ) -> None:
        self._max_line = max_line_bytes
        self._max_event = max_event_bytes
        # Unterminated tail of the current line, kept as a list of reads so that a long
        # line arriving in many reads costs O(n), not O(n^2), until its terminator.
        self._parts: list[bytes] = []
        self._parts_len = 0
        self._pending_cr = False
        self._data: list[bytes] = []
        self._data_len = 0
        self._event: str | None = None
        self._failed: str | None = None

    def decode(self, chunk: bytes) -> list[SSEEvent]:
        """Consume one read; return the events it completed (often none or one).

        Raises:
            SSEProtocolError: a line or an event exceeds its limit.
        """
        if self._failed is not None:
            raise SSEProtocolError(self._failed)
        if not chunk:
            # An empty read carries nothing, and must not clear a CR held from the read
            # before (a CRLF split as b"...\r", b"", b"\n" is still one line end).
            return []
        payloads = self.data_payloads(chunk)
        if payloads is not None:
            return [_new_event(SSEEvent, (payload, None)) for payload in payloads]
        if self._pending_cr:
            self._pending_cr = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if 13 in chunk:
            # Normalise CRLF and lone CR to LF. A CR that ends the read may be the first
            # half of a CRLF split across reads: remember it and drop the LF next time.
            self._pending_cr = chunk[-1:] == b"\r"
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if 10 not in chunk:
            if chunk:
                self._parts.append(chunk)
                self._parts_len += len(chunk)
                if self._parts_len > self._max_line:
                    self._fail(f"SSE line longer than {self._max_line} bytes")
            return []
        if self._parts:
            self._parts.append(chunk)
            chunk = b"".join(self._parts)
            self._parts.clear()
            self._parts_len = 0
        lines = chunk.split(b"\n")
        tail = lines.pop()
        if tail:
            if len(tail) > self._max_line:
                self._fail(f"SSE line longer than {self._max_line} bytes")
            self._parts.append(tail)
            self._parts_len = len(tail)
        return self._lines(lines)

    def holds_nothing(self) -> bool:
        """True when no line, event or failure is held from earlier reads: the next
        read starts at an event's first byte."""
        return not (
            self._parts
            or self._pending_cr
            or self._data
            or self._event is not None
            or self._failed is not None
        )

    @property
    def longest_read(self) -> int:
        """The longest read that is within both the line and the event limit when it is
        one line (bytes)."""
        return min(self._max_line, self._max_event)

    def data_payloads(self, chunk: bytes) -> list[bytes] | None:
        """The data of each event in ``chunk`` when it is exactly whole one-line
        ``data:`` events with nothing held from earlier reads: what :meth:`decode`
        gives for it (every event name None), without building an event per token.
        None for any other read (and on a spent decoder): give it to :meth:`decode`.

        The common read of a stream: one token's event, or many read late together.
        """
        # Byte membership as ints (13: CR, 10: LF) is one memchr; ``b"\r" in chunk`` is
        # a general substring search, several times slower on the per-token path.
        if (
            chunk[:6] != b"data: "
            or chunk[-2:] != b"\n\n"
            or self._event is not None
            or self._parts
            or self._pending_cr
            or self._data
            or self._failed is not None
            or len(chunk) > self._max_line
            or len(chunk) > self._max_event
            or 13 in chunk
        ):
            return None
        # Exactly that shape when every line end is one of theirs (two per event: no
        # other line, comment or field); each line and event is shorter than the read,
        # so within the limits the general path checks.
        payloads = chunk[6:-2].split(b"\n\ndata: ")
        if chunk.count(10) != 2 * len(payloads):
            return None
        return payloads

    def flush(self) -> list[SSEEvent]:
        """End of stream: an unterminated line or event is dropped (per the SSE rules);
        returns ``[]`` and resets the decoder. Raises SSEProtocolError if spent."""
        if self._failed is not None:
            raise SSEProtocolError(self._failed)
        self._parts.clear()
        self._parts_len = 0
        self._pending_cr = False
        self._data.clear()
        self._data_len = 0
        self._event = None
        return []

    @property
    def buffered_bytes(self) -> int:
        """Bytes held for an incomplete line plus undelivered event data."""
        return self._parts_len + self._data_len

    def _fail(self, message: str) -> None:
        self._failed = message
        self._parts.clear()
        self._parts_len = 0
        self._data.clear()
        self._data_len = 0
        raise SSEProtocolError(message)

    def _lines(self, lines: list[bytes]) -> list[SSEEvent]:
        events: list[SSEEvent] = []
        max_line = self._max_line
        for line in lines:
            if not line:
                if self._data:
                    data = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
                    events.append(SSEEvent(data, self._event))
                    self._data.clear()
                    self._data_len = 0
                self._event = None
                continue
            if len(line) > max_line:
                self._fail(f"SSE line longer than {max_line} bytes")
            if line[0] == 0x3A:  # b":" -> comment / keep-alive
                continue
            name, colon, value = line.partition(b":")
            if colon and value[:1] == b" ":
                value = value[1:]
            if name == b"data":
                self._data.append(value)
                self._data_len += len(value) + 1
                if self._data_len > self._max_event:
                    self._fail(f"SSE event data longer than {self._max_event} bytes")
            elif name == b"event":
                self._event = value.decode("utf-8", "replace")
        return events
