"""Reading a whole HTTP answer that nothing in tokrate times, within a byte and a time
bound: the pre-flight's GET /models and its one-token probe.

httpx bounds each read by its timeout, not the answer: a server that drips a byte a
second holds a reader for ever, an endless body fills the memory, and its decoder
inflates whatever one network read carries before anyone can count it (one 64 KiB read
of a gzip bomb is 64 MB). :func:`read_bounded` therefore reads the raw bytes and
decodes them itself, asking zlib for no more than the bytes still allowed, so at most
``limit_bytes + 1`` decoded bytes ever exist; it stops at the deadline whatever the
server does. An encoding it cannot decode within a bound (``br``, ``zstd``) is not
decoded: the status stands, the body is a placeholder naming the encoding.

Raises nothing of its own; httpx's errors (a read timeout when the server sends nothing
until the deadline) pass through to the caller.
"""

from __future__ import annotations

import time
import zlib
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["ACCEPT_IDENTITY", "BoundedBody", "read_bounded"]

#: Ask for an unencoded answer (a server may encode it anyway: then it is decoded here).
ACCEPT_IDENTITY: Final = {"Accept-Encoding": "identity"}


@dataclass(frozen=True, slots=True)
class BoundedBody:
    """What was read of one answer. ``content``: the decoded body (empty when it was
    over the bound); ``over``: the body passed ``limit_bytes`` decoded; ``late``: the
    deadline came before its end; ``encoding``: a Content-Encoding that was not
    decoded (``content`` then names it)."""

    content: bytes
    over: bool = False
    late: bool = False
    encoding: str | None = None

    @property
    def complete(self) -> bool:
        return not (self.over or self.late)


class _Decoder:
    """Incremental decoding of one Content-Encoding, never past ``room`` bytes."""

    def __init__(self, encoding: str) -> None:
        self._zlib: Any = None
        if encoding in ("gzip", "x-gzip"):
            self._zlib = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif encoding == "deflate":
            self._zlib = zlib.decompressobj()

    def decode(self, data: bytes, room: int) -> bytes:
        """Up to ``room`` decoded bytes of ``data`` (what does not fit is dropped: the
        caller stops reading once the bound is passed)."""
        if self._zlib is None:
            return data[:room]
        try:
            return bytes(self._zlib.decompress(data, room))
        except zlib.error:
            return b""  # a body that is not what it claims: nothing decodes


def read_bounded(resp: Any, limit_bytes: int, deadline: float) -> BoundedBody:
    """The body of ``resp`` (an open streamed httpx response), at most ``limit_bytes``
    decoded, read until ``deadline`` (``time.monotonic()``) at the latest. The caller
    sets the request's timeout to the time left, so one silent read cannot outlast the
    deadline either."""
    encoding = resp.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("identity", "", "gzip", "x-gzip", "deflate"):
        return BoundedBody(f"<{encoding}-encoded body>".encode(), encoding=encoding)
    decoder = _Decoder(encoding)
    body = bytearray()
    for raw in resp.iter_raw():
        body += decoder.decode(raw, limit_bytes + 1 - len(body))
        if len(body) > limit_bytes:
            return BoundedBody(b"", over=True)
        if time.monotonic() > deadline:
            return BoundedBody(bytes(body), late=True)
    return BoundedBody(bytes(body))
