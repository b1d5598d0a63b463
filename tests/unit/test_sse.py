"""SSE decoder: split at every offset, line endings, limits, and hypothesis properties."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokrate.client.sse import SSEDecoder, SSEEvent, SSEProtocolError

STREAM = (
    b": keep-alive\r\n"
    b'data: {"a": 1}\r\n\r\n'
    b'data:{"b":2}\n\n'
    b"event: error\ndata: x\ndata: y\n\n"
    b"id: 7\nretry: 10\ndata: [DONE]\r\r"
    b"data: unterminated"
)
EXPECTED = [
    SSEEvent(b'{"a": 1}'),
    SSEEvent(b'{"b":2}'),
    SSEEvent(b"x\ny", "error"),
    SSEEvent(b"[DONE]"),
]


def decode_all(pieces: list[bytes], **kw: int) -> list[SSEEvent]:
    dec = SSEDecoder(**kw)
    out: list[SSEEvent] = []
    for piece in pieces:
        out += dec.decode(piece)
    out += dec.flush()
    return out


def test_whole_stream() -> None:
    assert decode_all([STREAM]) == EXPECTED


def test_every_single_split_offset() -> None:
    for i in range(len(STREAM) + 1):
        assert decode_all([STREAM[:i], STREAM[i:]]) == EXPECTED, i


def test_every_double_split_offset() -> None:
    n = len(STREAM)
    for i in range(0, n + 1, 3):
        for j in range(i, n + 1, 2):
            assert decode_all([STREAM[:i], STREAM[i:j], STREAM[j:]]) == EXPECTED, (i, j)


def test_byte_at_a_time() -> None:
    assert decode_all([bytes([b]) for b in STREAM]) == EXPECTED


def test_crlf_split_between_cr_and_lf_is_one_terminator() -> None:
    assert decode_all([b"data: a\r", b"\n\r", b"\n"]) == [SSEEvent(b"a")]


def test_event_without_data_is_not_dispatched() -> None:
    assert decode_all([b"event: ping\n\n: c\n\ndata\n\n"]) == [SSEEvent(b"")]


def test_long_line_is_a_protocol_error_not_memory() -> None:
    dec = SSEDecoder(max_line_bytes=1000)
    dec.decode(b"data: " + b"a" * 900)
    with pytest.raises(SSEProtocolError, match="longer than 1000"):
        dec.decode(b"a" * 200)
    assert dec.buffered_bytes == 0  # dropped, not kept
    with pytest.raises(SSEProtocolError):  # spent
        dec.decode(b"\n\n")


def test_terminated_long_line_in_one_read() -> None:
    with pytest.raises(SSEProtocolError):
        SSEDecoder(max_line_bytes=10).decode(b"data: 0123456789\n\n")


def test_event_data_limit() -> None:
    dec = SSEDecoder(max_line_bytes=100, max_event_bytes=250)
    with pytest.raises(SSEProtocolError, match="event data"):
        dec.decode(b"data: " + b"x" * 90 + b"\n" + b"data: " + b"y" * 90 + b"\n" + b"data: zz" * 12)
        dec.decode(b"\ndata: " + b"q" * 90 + b"\n\n")


def _outcome(pieces: list[bytes]) -> object:
    try:
        return decode_all(pieces, max_line_bytes=64, max_event_bytes=256)
    except SSEProtocolError:
        return "protocol-error"


_sse_bytes = st.lists(
    st.sampled_from(
        [b"data:", b"data: ", b"event: e", b":c", b"\r", b"\n", b"\r\n", b"x", b"{}", b" ", b"id"]
    )
    | st.binary(max_size=40),
    max_size=40,
).map(b"".join)


@settings(max_examples=300, deadline=None)
@given(data=_sse_bytes, cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=8))
def test_split_invariance_and_no_escaping_exception(data: bytes, cuts: list[int]) -> None:
    """Any bytes, any split: the same events, or a protocol error in every split."""
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    whole = _outcome([data])
    assert _outcome(pieces) == whole
    if whole != "protocol-error":
        assert all(isinstance(e.data, bytes) for e in whole)  # type: ignore[union-attr]


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=3000))
def test_arbitrary_binary_never_raises_anything_else(data: bytes) -> None:
    assert _outcome([data[i : i + 7] for i in range(0, len(data), 7)]) == _outcome([data])
