"""The per-token shortcuts of the client (issue 18's CPU) give exactly what the general
paths give: the SSE decoder's one-whole-event read, and StreamState's plain answer
chunk (:func:`tokrate.client.chunks.plain_answer`)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tokrate.client.sse import SSEDecoder, SSEEvent, SSEProtocolError

_EVENT_PARTS = st.sampled_from(
    [b"data: ", b"data:", b"event: e", b"event:", b":c", b"\n", b"\r", b"x", b" ", b"{}"]
)
#: Reads that often are one whole one-line event, and sometimes almost one.
_reads = st.lists(
    st.one_of(
        st.binary(max_size=30).map(lambda b: b"data: " + b + b"\n\n"),
        st.lists(_EVENT_PARTS, max_size=6).map(b"".join),
    ),
    max_size=12,
)


def _decode(reads: list[bytes], **limits: int) -> object:
    dec = SSEDecoder(**limits)
    out: list[SSEEvent] = []
    try:
        for read in reads:
            out += dec.decode(read)
    except SSEProtocolError:
        return "protocol-error"
    return out


@settings(max_examples=400, deadline=None)
@given(reads=_reads, max_line=st.integers(min_value=1, max_value=40))
def test_one_event_reads_decode_as_byte_by_byte(reads: list[bytes], max_line: int) -> None:
    """A read of one byte never takes the shortcut: the same events (or error) either
    way, at every line and event limit near the reads' sizes."""
    limits = {"max_line_bytes": max_line, "max_event_bytes": max_line + 3}
    whole = _decode(reads, **limits)
    by_byte = _decode([bytes([c]) for read in reads for c in read], **limits)
    assert whole == by_byte
    if isinstance(whole, list):
        assert all(type(e) is SSEEvent for e in whole)


def test_limit_edges_of_the_shortcut() -> None:
    read = b"data: abcd\n\n"  # line of 10 bytes, event data of 4 (+1)
    assert _decode([read], max_line_bytes=10, max_event_bytes=5) == [SSEEvent(b"abcd")]
    assert _decode([read], max_line_bytes=9) == "protocol-error"
    assert _decode([read], max_event_bytes=4) == "protocol-error"
    assert _decode([b"event:\n", read]) == [SSEEvent(b"abcd", "")]
