"""When each request reached the simulator: the kernel's receive stamp of its last byte.

The app sees a request only after uvicorn's event loop got round to its socket, parsed
it and started its task. With hundreds of requests arriving together (the opening
wave of a closed loop) that loop reads them one batch after another, so the last ones
reach the app long after their bytes reached the socket (a few hundred microseconds of
intake per request, times the requests ahead of it). That wait is the server's
own queue, not its clients' send path: a truth log that starts the server's TTFT at the
app's reading charges it to whoever is measured against it.

:class:`ArrivalStampedProtocol` is uvicorn's httptools protocol reading its socket
itself: the transport uvicorn got stays paused, a duplicate of the socket is read with
``recvmsg`` and ``SO_TIMESTAMPNS``, and every read is handed to the protocol with the
kernel's receive time of its bytes. When a request's last byte has been parsed, that
read's stamp goes into the request's ASGI scope (``extensions["tokrate.arrival_ns"]``,
CLOCK_MONOTONIC ns, the clock of every other simulator stamp); the truth log writes it
as ``arrived_ns``. Where the kernel gives no stamp (not Linux, the option refused, a
read without one) the stamp is the moment of the read, taken first thing (``None``
only where the socket could not be read here at all: the protocol then reads as
uvicorn's own does, and the truth log says null).

Independent of the client's kernel stamps on purpose (tokrate.client.kernel_stamps):
the simulator must not measure itself with the code it is measured by.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import platform
import socket
import struct
import sys
import threading
from time import perf_counter_ns, time_ns
from typing import Any, Final

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["ARRIVAL_KEY", "ArrivalStampedProtocol", "keep_kernel_stamping"]

#: The scope extension the arrival stamp rides in.
ARRIVAL_KEY: Final = "tokrate.arrival_ns"
#: asm-generic's SO_TIMESTAMPNS (Python's socket module does not export the name).
_SO_TIMESTAMPNS: Final[int | None] = getattr(
    socket,
    "SO_TIMESTAMPNS",
    35
    if sys.platform.startswith("linux")
    and platform.machine() in ("x86_64", "aarch64", "arm64", "riscv64", "s390x", "ppc64le")
    else None,
)
_TIMESPEC: Final = struct.Struct("@qq")
_ANCILLARY: Final = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0
_READ_BYTES: Final = 64 * 1024
#: Re-sample the realtime -> monotonic offset this often (ns).
_RESAMPLE_NS: Final = 200_000_000


class _Offset:
    """``perf_counter_ns() - time_ns()``: the narrowest of three bracketed readings,
    re-sampled every :data:`_RESAMPLE_NS`."""

    __slots__ = ("at_ns", "offset_ns")

    def __init__(self) -> None:
        self.offset_ns = 0
        self.at_ns = -_RESAMPLE_NS - 1

    def monotonic(self, realtime_ns: int, read_ns: int) -> int:
        """A kernel realtime stamp on the monotonic clock, never after its read."""
        if read_ns - self.at_ns > _RESAMPLE_NS:
            best = None
            for _ in range(3):
                a = perf_counter_ns()
                r = time_ns()
                b = perf_counter_ns()
                if best is None or b - a < best[0]:
                    best = (b - a, (a + b) // 2 - r)
            assert best is not None
            self.offset_ns, self.at_ns = best[1], read_ns
        return min(realtime_ns + self.offset_ns, read_ns)


_OFFSET: Final = _Offset()
#: One receive buffer per thread, shared by its connections (a read is copied out at
#: once): one per connection was 64 KiB allocated and faulted in per connect.
_BUFFERS: Final = threading.local()


def _read_buffer() -> bytearray:
    buffer: bytearray | None = getattr(_BUFFERS, "buffer", None)
    if buffer is None:
        buffer = _BUFFERS.buffer = bytearray(_READ_BYTES)
    return buffer


#: A datagram socket with SO_TIMESTAMPNS held for the process's life (see below).
_KEEPER: list[socket.socket] = []


def keep_kernel_stamping() -> None:
    """Keep the kernel stamping received packets for this process's life.

    Linux stamps packets only while some socket asks for stamps, and turns that on from
    deferred work, so the first request on a fresh socket could come unstamped; one
    socket that asks keeps it on. Does nothing where there are no kernel stamps."""
    if _KEEPER or _SO_TIMESTAMPNS is None:
        return
    keeper = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        keeper.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    except OSError:
        keeper.close()
        return
    _KEEPER.append(keeper)
    # Closed at exit rather than left to the collector, which warns of an unclosed socket.
    atexit.register(keeper.close)


class _ReadProxy(asyncio.Transport):
    """The transport uvicorn's protocol is given: writes and closing go to the real
    transport; reading is the protocol's own reader, so pausing pauses that."""

    def __init__(self, real: asyncio.Transport, owner: ArrivalStampedProtocol) -> None:
        super().__init__()
        self._real = real
        self._owner = owner

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._real.write(data)

    def writelines(self, list_of_data: Any) -> None:
        self._real.writelines(list_of_data)

    def close(self) -> None:
        self._real.close()

    def abort(self) -> None:
        self._real.abort()

    def is_closing(self) -> bool:
        return self._real.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._real.get_extra_info(name, default)

    def pause_reading(self) -> None:
        self._owner.stop_reading()

    def resume_reading(self) -> None:
        self._owner.start_reading()

    def is_reading(self) -> bool:
        return self._owner.reading

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._real.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._real.get_protocol()

    def get_write_buffer_size(self) -> int:
        return self._real.get_write_buffer_size()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._real.set_write_buffer_limits(high, low)

    def can_write_eof(self) -> bool:
        return False


class ArrivalStampedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, reading its socket with kernel receive stamps
    (module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._sock: socket.socket | None = None
        self._buffer = _read_buffer()
        self._real: asyncio.Transport | None = None
        self.reading = False
        #: The receive stamp of the read being parsed (monotonic ns).
        self.arrival_ns: int | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        real: asyncio.Transport = transport  # type: ignore[assignment]
        sock = self._duplicate(real)
        if sock is None:
            super().connection_made(real)  # read as uvicorn does: no arrival stamps
            return
        self._real = real
        self._sock = sock
        super().connection_made(_ReadProxy(real, self))
        self.start_reading()
        # uvloop starts its own reading right after connection_made returns, whatever
        # was paused in it: paused again on the next turn of the loop (and by the first
        # read it makes, in data_received).
        self.loop.call_soon(self._pause_real)

    def _pause_real(self) -> None:
        if self._real is not None and not self._real.is_closing() and self._real.is_reading():
            self._real.pause_reading()

    @staticmethod
    def _duplicate(real: asyncio.Transport) -> socket.socket | None:
        """A second handle on the connection's socket, non-blocking, asking the kernel
        for receive stamps (None where that cannot be had)."""
        if _SO_TIMESTAMPNS is None or not hasattr(socket.socket, "recvmsg_into"):
            return None
        original = real.get_extra_info("socket")
        if original is None:
            return None
        try:
            sock = socket.socket(fileno=os.dup(original.fileno()))
        except OSError:
            return None
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        except OSError:
            sock.close()
            return None
        return sock

    def start_reading(self) -> None:
        if not self.reading and self._sock is not None:
            self.reading = True
            self.loop.add_reader(self._sock.fileno(), self._on_readable)

    def stop_reading(self) -> None:
        if self.reading and self._sock is not None:
            self.reading = False
            self.loop.remove_reader(self._sock.fileno())

    def _on_readable(self) -> None:
        sock = self._sock
        assert sock is not None and self._real is not None
        try:
            n, ancillary, _flags, _addr = sock.recvmsg_into([self._buffer], _ANCILLARY)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.stop_reading()
            self._real.abort()
            return
        now = perf_counter_ns()
        for _level, kind, raw in ancillary:
            if kind == _SO_TIMESTAMPNS and len(raw) >= _TIMESPEC.size:
                sec, nsec = _TIMESPEC.unpack_from(raw)
                now = _OFFSET.monotonic(sec * 1_000_000_000 + nsec, now)
        if not n:
            self.stop_reading()
            self.eof_received()
            self._real.close()
            return
        self.arrival_ns = now
        HttpToolsProtocol.data_received(self, bytes(self._buffer[:n]))

    def data_received(self, data: bytes) -> None:
        # Bytes the real transport read itself, before it was paused (a request sent
        # right behind its connect): stamped as they come, first thing.
        self.arrival_ns = perf_counter_ns()
        self._pause_real()
        super().data_received(data)

    def on_message_complete(self) -> None:
        # The read that carried the request's last byte is being parsed: its stamp is
        # the request's arrival. Set before the app is woken for the body's end.
        if self.scope is not None and self.arrival_ns is not None:
            extensions: dict[str, Any] = self.scope.setdefault("extensions", {})
            extensions[ARRIVAL_KEY] = self.arrival_ns
        super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self.stop_reading()
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        super().connection_lost(exc)
