"""Kernel receive timestamps for the fast client (Linux ``SO_TIMESTAMPNS``).

A user-space stamp taken in ``data_received`` is late by however long the event loop
was busy elsewhere (hundreds of streams whose tokens arrive in the same instant, a
slow callback). The kernel stamps every received segment as it queues it; with
``SO_TIMESTAMPNS`` on the socket, ``recvmsg`` hands that stamp back as ancillary data
(``SCM_TIMESTAMPNS``: a ``struct timespec`` on CLOCK_REALTIME). :class:`KernelTransport`
reads its socket itself (``loop.add_reader`` + ``recvmsg``) and gives the protocol each
read with the kernel time of its bytes, converted to the ``perf_counter_ns`` clock
(CLOCK_MONOTONIC) every other stamp of the client uses.

Clock: :class:`ClockBridge` holds ``perf_counter_ns() - time_ns()``, sampled at start
as the narrowest of a few bracketed readings and re-sampled every
:data:`RESAMPLE_NS`; a change beyond :data:`STEP_BOUND_NS` plus the slew
:data:`SLEW_BOUND_NS_PER_S` allows over the time since the last sample is a step of the
system clock (NTP, an admin), noted once in ``notices``. A converted stamp is never later than
the moment it was read (a step forward between samples cannot put a stamp in the future),
never earlier than the moment the connection last wrote (a step backward cannot put an
answer before its request: chunk offsets from the request's t0 stay non-negative) and
never earlier than the previous stamp of the same connection (stamps stay monotonic).
A stamp more than :data:`STEP_BOUND_NS` outside those bounds re-samples the offset first.

Invariants: TCP merges segments that wait together in the socket buffer, and the kernel
then reports the arrival of the LAST of them: bytes read together share one stamp,
exact for the newest bytes of the read (the ones whose arrival the read reports).
When the kernel gives no stamp for a read (the option refused, no ancillary data) that
read gets the user stamp and the connection's requests say ``stamp_source = "user"``.

https: the raw socket is read here and TLS runs through ``ssl.SSLObject`` over two
``ssl.MemoryBIO``, so decrypted bytes keep the stamp of the ciphertext that carried them.

Transmit stamps (a request's t0): the socket also gets ``SO_TIMESTAMPING`` with software
transmit stamps, ``OPT_ID`` and ``OPT_TSONLY``, so the kernel queues on the socket's error
queue, for every ``send``, the moment the last byte of that send was handed to the
device (on loopback: while the ``send`` runs; on a network interface: when the driver
takes the packet, after any wait in the socket's or the device's queue). The id is the
byte number of that last byte, so the stamp of a request's last byte is told apart from
those of earlier partial sends. The error queue is read right after each write (where
the stamp usually already is) and whenever the socket wakes the loop with nothing to
read (the kernel signals a queued stamp as an error condition); the stamp goes to the
protocol's ``stamped_send`` on the same clock as the receive stamps. Where the kernel
refuses the option or gives no stamp, ``stamped_send`` gets the user-space moment the
last byte was handed to the kernel, marked so.
"""

from __future__ import annotations

import asyncio
import atexit
import platform
import socket
import ssl
import struct
import sys
import threading
from collections.abc import Callable
from time import perf_counter_ns, time_ns
from typing import Any, Final, Literal, Protocol

__all__ = [
    "KERNEL_STAMP_MODES",
    "RESAMPLE_NS",
    "SLEW_BOUND_NS_PER_S",
    "STEP_BOUND_NS",
    "ClockBridge",
    "KernelStampMode",
    "KernelTransport",
    "StampedProtocol",
    "clock_bridge",
    "enable_tx_stamps",
    "keep_stamping_on",
    "kernel_stamps_supported",
    "open_kernel_connection",
]

KernelStampMode = Literal["auto", "on", "off"]
KERNEL_STAMP_MODES: Final = ("auto", "on", "off")

#: Re-sample the realtime -> monotonic offset this often (ns).
RESAMPLE_NS: Final = 200_000_000
#: An offset change beyond this is a clock step, not sampling jitter (ns).
STEP_BOUND_NS: Final = 1_000_000
#: How fast the realtime clock may drift from the monotonic one and still be a slew, not
#: a step (ns per second elapsed): NTP slews at most 0.5 ms/s, and a virtual machine's
#: clock was seen gaining ~5 ms/s for minutes; a step (NTP's is >= 128 ms, an admin's
#: anything) between two samples a second apart is far beyond 10 ms.
SLEW_BOUND_NS_PER_S: Final = 10_000_000
#: Bytes per read: a whole TLS record or a burst of SSE events in one call.
READ_BYTES: Final = 256 * 1024
#: Linux machines whose <asm/socket.h> is asm-generic's: SO_TIMESTAMPNS(_OLD) = 35 with
#: a 64-bit time_t (Python's socket module does not export the name).
_GENERIC_SOCKET_ABI: Final = ("x86_64", "aarch64", "arm64", "riscv64", "s390x", "ppc64le")
_SO_TIMESTAMPNS: Final[int | None] = getattr(
    socket,
    "SO_TIMESTAMPNS",
    35 if sys.platform.startswith("linux") and platform.machine() in _GENERIC_SOCKET_ABI else None,
)
_SCM_TIMESTAMPNS: Final[int | None] = getattr(socket, "SCM_TIMESTAMPNS", _SO_TIMESTAMPNS)
#: SO_TIMESTAMPING(_OLD) on the same machines (asm-generic), and its control message.
_SO_TIMESTAMPING: Final[int | None] = getattr(
    socket, "SO_TIMESTAMPING", None if _SO_TIMESTAMPNS is None else 37
)
#: SOF_TIMESTAMPING_* flags (linux/net_tstamp.h): software transmit stamps, reported
#: (SOFTWARE), with the byte id of the send (OPT_ID), without the packet (OPT_TSONLY),
#: the id counted from the bytes written rather than acknowledged (OPT_ID_TCP, Linux
#: 6.2), and no second receive stamp beside SO_TIMESTAMPNS's (OPT_RX_FILTER, 6.12).
_TX_SOFTWARE: Final = 1 << 1
_REPORT_SOFTWARE: Final = 1 << 4
_OPT_ID: Final = 1 << 7
_OPT_TSONLY: Final = 1 << 11
_OPT_ID_TCP: Final = 1 << 16
_OPT_RX_FILTER: Final = 1 << 17
_TX_FLAGS: Final = _TX_SOFTWARE | _REPORT_SOFTWARE | _OPT_ID | _OPT_TSONLY
#: Error-queue messages: IP(V6)_RECVERR carries a struct sock_extended_err.
_RECVERR: Final = frozenset({(socket.IPPROTO_IP, 11), (socket.IPPROTO_IPV6, 25)})
_EXTENDED_ERR: Final = struct.Struct("@IBBBBII")  # errno, origin, type, code, pad, info, data
_ENOMSG: Final = 42
_ORIGIN_TIMESTAMPING: Final = 4
_TSTAMP_SND: Final = 0
_MSG_ERRQUEUE: Final = getattr(socket, "MSG_ERRQUEUE", 0x2000)
_ERRQUEUE_ANCILLARY: Final = 512
#: SIOCOUTQ (= TIOCOUTQ): bytes written but not yet acknowledged.
_SIOCOUTQ: Final = 0x5411
_TIMESPEC: Final = struct.Struct("@qq")  # struct timespec on 64-bit Linux (time_t, long)
_unpack_timespec: Final = _TIMESPEC.unpack_from
_ANCILLARY_BYTES: Final = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0
#: One receive buffer per thread, shared by its transports (a read is copied out at once):
#: ``recvmsg(READ_BYTES)`` allocates 256 KiB per read, then shrinks it (~2 page faults).
_READ_BUFFERS: Final = threading.local()


def _read_buffer() -> memoryview:
    """This thread's receive buffer (READ_BYTES), made on first use."""
    view: memoryview | None = getattr(_READ_BUFFERS, "view", None)
    if view is None:
        view = _READ_BUFFERS.view = memoryview(bytearray(READ_BYTES))
    return view


def kernel_stamps_supported() -> str | None:
    """None when this platform can give kernel receive stamps; else why not."""
    if not sys.platform.startswith("linux"):
        return f"kernel receive stamps need Linux (this is {sys.platform})"
    if _SO_TIMESTAMPNS is None or not hasattr(socket.socket, "recvmsg"):
        return f"no SO_TIMESTAMPNS / recvmsg known for this machine ({platform.machine()})"
    return None


class ClockBridge:
    """CLOCK_REALTIME (kernel stamps) -> ``perf_counter_ns`` (see the module docstring).

    ``notices`` is the owning client's list: a clock step is said there once.
    """

    __slots__ = ("notices", "offset_ns", "sampled_ns", "stepped")

    def __init__(self, notices: list[str]) -> None:
        self.notices = notices
        self.stepped = False
        self.offset_ns, self.sampled_ns = _sample_offset()

    def resample(self) -> None:
        offset, at = _sample_offset()
        change = offset - self.offset_ns
        # A long quiet gap between samples (no reads between scenarios) lets a slewing
        # clock drift past STEP_BOUND_NS without any step: allow the slew over the gap.
        bound = STEP_BOUND_NS + (at - self.sampled_ns) * SLEW_BOUND_NS_PER_S // 1_000_000_000
        self.offset_ns, self.sampled_ns = offset, at
        if abs(change) > bound and not self.stepped:
            self.stepped = True
            self.notices.append(
                f"the system clock stepped by {change / 1e6:+.1f} ms during the run;"
                " kernel receive stamps were re-based on the monotonic clock"
            )

    def to_perf_ns(self, realtime_ns: int, read_ns: int, floor_ns: int = 0) -> int:
        """The kernel stamp ``realtime_ns`` on the perf_counter clock, for a read whose
        user stamp is ``read_ns``: within ``[floor_ns, read_ns]`` (``floor_ns``: the
        connection's last write or previous stamp, whichever is later)."""
        if read_ns - self.sampled_ns > RESAMPLE_NS:
            self.resample()
        stamp = realtime_ns + self.offset_ns
        if stamp - read_ns > STEP_BOUND_NS or floor_ns - stamp > STEP_BOUND_NS:
            # From the future (the clock stepped forward) or from before the request was
            # written (it stepped back) since the last sample: re-sample, then bound.
            self.resample()
            stamp = realtime_ns + self.offset_ns
        return min(max(stamp, floor_ns), read_ns)


def _sample_offset() -> tuple[int, int]:
    """(perf_counter - realtime offset, when): the narrowest of five brackets."""
    best: tuple[int, int, int] | None = None
    for _ in range(5):
        a = perf_counter_ns()
        r = time_ns()
        b = perf_counter_ns()
        if best is None or b - a < best[0]:
            best = (b - a, (a + b) // 2 - r, b)
    assert best is not None
    return best[1], best[2]


class StampedProtocol(Protocol):
    """What :class:`KernelTransport` feeds: the asyncio.Protocol callbacks, with the
    bytes of each read delivered with their stamp instead of ``data_received``."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None: ...

    def stamped_read(self, data: bytes, now_ns: int, kernel: bool) -> None: ...

    def stamped_send(self, sent_ns: int, kernel: bool) -> None:
        """The last byte of the latest write left at ``sent_ns``: the kernel's transmit
        stamp (``kernel``), or the user-space moment it was handed to the kernel
        (called first; the kernel's stamp, when it comes, replaces it)."""

    def eof_received(self) -> bool | None: ...

    def connection_lost(self, exc: Exception | None) -> None: ...


class KernelTransport(asyncio.Transport):
    """A connected non-blocking socket read with ``recvmsg`` (module docstring); TLS
    through ``ssl.SSLObject`` when ``tls`` is given. Writes go straight to the socket;
    what it does not take at once waits for writability. With ``tx_stamps`` (the
    socket's ``SO_TIMESTAMPING`` set by :func:`enable_tx_stamps`, which gives
    ``tx_bytes``) each write's last byte is stamped when it leaves (module docstring)."""

    __slots__ = (
        "_bridge",
        "_buffer",
        "_buffers",
        "_closing",
        "_deliver",
        "_fd",
        "_last_ns",
        "_loop",
        "_out",
        "_protocol",
        "_recvmsg_into",
        "_sock",
        "_tls",
        "_tx_bytes",
        "_tx_floor_ns",
        "_tx_stamps",
        "_tx_want",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        protocol: StampedProtocol,
        bridge: ClockBridge,
        tls: _Tls | None = None,
        tx_bytes: int | None = None,
    ) -> None:
        super().__init__()
        #: Whether the kernel stamps sends (tx_bytes given); the error queue's ids count
        #: bytes from tx_bytes on; _tx_want: the id of the last written byte whose
        #: stamp is still to come (-1: none).
        self._tx_stamps = tx_bytes is not None
        self._tx_bytes = tx_bytes or 0
        self._tx_want = -1
        #: perf_counter_ns when the latest write began: its transmit stamp's floor.
        self._tx_floor_ns = 0
        self._loop = loop
        self._sock = sock
        self._fd = sock.fileno()
        self._protocol = protocol
        self._bridge = bridge
        self._tls = tls
        self._closing = False
        self._out = bytearray()
        self._last_ns = 0
        self._recvmsg_into = sock.recvmsg_into
        self._buffer = _read_buffer()
        self._buffers = [self._buffer]
        self._deliver = protocol.stamped_read
        self._extra = {"socket": sock, "peername": _peer(sock)}
        if tls is not None:
            self._extra["ssl_object"] = tls.obj
        protocol.connection_made(self)
        loop.add_reader(self._fd, self._on_readable)

    # --- reading ----------------------------------------------------------------------

    def _on_readable(self) -> None:
        # The hot path (once per read): a bound recvmsg_into the thread's buffer, one
        # cmsg (the only option set), the offset added inline; the bridge is called
        # only to re-sample.
        try:
            n, ancillary, _flags, _addr = self._recvmsg_into(self._buffers, _ANCILLARY_BYTES)
        except (BlockingIOError, InterruptedError):
            # Woken with nothing to read: a transmit stamp waits on the error queue
            # (the kernel signals it as an error condition, level-triggered).
            if self._tx_stamps:
                self._read_tx_stamps()
            return
        except OSError as exc:
            self._fatal(exc)
            return
        now = perf_counter_ns()
        kernel = False
        if ancillary:
            _level, kind, raw = ancillary[0]
            if kind == _SCM_TIMESTAMPNS:
                sec, nsec = _unpack_timespec(raw)
                bridge = self._bridge
                stamp = sec * 1_000_000_000 + nsec + bridge.offset_ns
                if stamp > now or stamp < self._last_ns or now - bridge.sampled_ns > RESAMPLE_NS:
                    stamp = bridge.to_perf_ns(sec * 1_000_000_000 + nsec, now, self._last_ns)
                now = stamp
                kernel = True
        if now < self._last_ns:
            now = self._last_ns
        self._last_ns = now
        if not n:
            self._eof()
            return
        data = bytes(self._buffer[:n])
        if self._tls is not None:
            try:
                data, eof = self._tls.decrypt(data)
            except ssl.SSLError as exc:
                self._fatal(exc)
                return
            self._flush_tls()
            if data:
                self._deliver(data, now, kernel)
            if eof:
                self._eof()
            return
        self._deliver(data, now, kernel)

    def _eof(self) -> None:
        if self._closing:
            return
        keep_open = self._protocol.eof_received()
        if not keep_open:
            self._close(None)

    # --- writing ----------------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing:
            return
        # No answer arrives before its request is written: the floor of the next stamps,
        # and of this write's transmit stamp (it cannot leave before it was written).
        self._tx_floor_ns = perf_counter_ns()
        self._last_ns = max(self._last_ns, self._tx_floor_ns)
        if self._tls is not None:
            self._tls.obj.write(bytes(data))
            data = self._tls.outgoing.read()
        self._send(bytes(data))
        if self._closing:
            return
        self._tx_want = self._tx_bytes - 1
        if not self._out:
            self._protocol.stamped_send(perf_counter_ns(), False)
            if self._tx_stamps:
                self._read_tx_stamps()  # on loopback the stamp is already queued

    def poll_sent(self) -> None:
        """Read a transmit stamp still waiting on the error queue (before a request's
        record is made, where the loop has not woken for it yet)."""
        if self._tx_stamps and self._tx_want >= 0 and not self._closing:
            self._read_tx_stamps()

    def _read_tx_stamps(self) -> None:
        """Drain the error queue; the stamp whose id is the latest write's last byte
        goes to the protocol (those of earlier sends, and anything else, are dropped)."""
        while True:
            try:
                _data, ancillary, _flags, _addr = self._sock.recvmsg(
                    0, _ERRQUEUE_ANCILLARY, _MSG_ERRQUEUE
                )
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return  # an error condition that is not a stamp: the next read reports it
            stamp_ns: int | None = None
            key: int | None = None
            for level, kind, raw in ancillary:
                if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPING:
                    sec, nsec = _unpack_timespec(raw)  # ts[0]: the software stamp
                    stamp_ns = sec * 1_000_000_000 + nsec
                elif (level, kind) in _RECVERR and len(raw) >= _EXTENDED_ERR.size:
                    errno, origin, _t, _c, _p, info, data = _EXTENDED_ERR.unpack_from(raw)
                    if (errno, origin, info) == (_ENOMSG, _ORIGIN_TIMESTAMPING, _TSTAMP_SND):
                        key = data
            want = self._tx_want
            if stamp_ns and key is not None and want >= 0 and key == want & 0xFFFFFFFF:
                self._tx_want = -1
                now = perf_counter_ns()
                # Bounded below by the write: a clock that stepped back since the bridge's
                # last sample would otherwise put the stamp (and t0) before the request
                # was written, by the step, and nothing after it would notice.
                stamp = self._bridge.to_perf_ns(stamp_ns, now, self._tx_floor_ns)
                self._protocol.stamped_send(stamp, True)

    def _flush_tls(self) -> None:
        assert self._tls is not None
        pending = self._tls.outgoing.read()
        if pending:
            self._send(pending)

    def _send(self, data: bytes) -> None:
        if not data:
            return
        self._tx_bytes += len(data)
        if self._out:
            self._out += data
            return
        try:
            sent = self._sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            self._fatal(exc)
            return
        if sent < len(data):
            self._out += data[sent:]
            self._loop.add_writer(self._fd, self._on_writable)

    def _on_writable(self) -> None:
        try:
            sent = self._sock.send(self._out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._fatal(exc)
            return
        del self._out[:sent]
        if not self._out:
            self._loop.remove_writer(self._fd)
            if self._tx_want >= 0:
                # The last byte of the latest write just went to the kernel.
                self._protocol.stamped_send(perf_counter_ns(), False)
                if self._tx_stamps:
                    self._read_tx_stamps()

    # --- closing ----------------------------------------------------------------------

    def _fatal(self, exc: Exception) -> None:
        self._close(exc)

    def _close(self, exc: Exception | None) -> None:
        if self._closing:
            return
        self._closing = True
        self._loop.remove_reader(self._fd)
        if self._out:
            self._loop.remove_writer(self._fd)
        self._sock.close()
        self._loop.call_soon(self._protocol.connection_lost, exc)

    def abort(self) -> None:
        self._close(None)

    def close(self) -> None:
        self._close(None)

    def is_closing(self) -> bool:
        return self._closing

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._extra.get(name, default)

    def set_extra_info(self, name: str, value: Any) -> None:
        self._extra[name] = value

    def can_write_eof(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return len(self._out)


class _Tls:
    """One TLS session over two memory BIOs (the socket is read and written outside)."""

    __slots__ = ("incoming", "obj", "outgoing")

    def __init__(self, context: ssl.SSLContext, server_hostname: str | None) -> None:
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        self.obj = context.wrap_bio(self.incoming, self.outgoing, server_hostname=server_hostname)

    def decrypt(self, ciphertext: bytes) -> tuple[bytes, bool]:
        """The plaintext ``ciphertext`` completes, and whether the peer closed TLS."""
        self.incoming.write(ciphertext)
        parts: list[bytes] = []
        while True:
            try:
                part = self.obj.read(READ_BYTES)
            except ssl.SSLWantReadError:
                return b"".join(parts), False
            except ssl.SSLZeroReturnError:
                return b"".join(parts), True
            if not part:
                return b"".join(parts), True
            parts.append(part)

    async def handshake(self, loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
        done = False
        while not done:
            try:
                self.obj.do_handshake()
                done = True
            except ssl.SSLWantReadError:
                pass
            pending = self.outgoing.read()
            if pending:
                await loop.sock_sendall(sock, pending)
            if done:
                return
            data = await loop.sock_recv(sock, READ_BYTES)
            if not data:
                raise ConnectionResetError("connection closed during the TLS handshake")
            self.incoming.write(data)


def enable_tx_stamps(sock: socket.socket) -> int | None:
    """Ask the kernel to stamp each send's last byte as it leaves (module docstring);
    the error queue's id of the next byte written, or None where it refuses.

    Called on a connected socket (the kernel refuses OPT_ID before): with OPT_ID_TCP
    (Linux 6.2) ids count the bytes written from here on; without it they count from
    the first byte not yet acknowledged, so the bytes still unacknowledged (a TLS
    handshake's last flight) come first."""
    if _SO_TIMESTAMPING is None or not sys.platform.startswith("linux"):
        return None
    for extra in (_OPT_ID_TCP | _OPT_RX_FILTER, _OPT_ID_TCP, _OPT_RX_FILTER, 0):
        try:
            sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPING, _TX_FLAGS | extra)
        except OSError:
            continue
        if extra & _OPT_ID_TCP:
            return 0
        import fcntl  # Linux only: here and nowhere else

        try:
            unacked = struct.unpack("i", fcntl.ioctl(sock, _SIOCOUTQ, b"\0" * 4))[0]
        except OSError:
            unacked = 0
        return int(unacked)
    return None


def _peer(sock: socket.socket) -> Any:
    try:
        return sock.getpeername()
    except OSError:
        return None


async def open_kernel_connection(
    protocol_factory: Callable[[], StampedProtocol],
    host: str,
    port: int,
    *,
    bridge: ClockBridge,
    ssl_context: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
) -> tuple[KernelTransport, StampedProtocol]:
    """Connect to ``host:port`` (every address DNS gives, in order, as asyncio does)
    with kernel receive stamps on, then TLS when ``ssl_context`` is given, then kernel
    transmit stamps (:func:`enable_tx_stamps`; without them where refused). The
    transport's extra info ``tls_handshake_ns`` is the TLS handshake's span (0 without
    TLS), for :func:`tokrate.client.handshake.connect_ns`.

    Raises: OSError (connect, or ``SO_TIMESTAMPNS`` refused: the caller falls back),
    ssl.SSLError; the socket is closed on every failure.
    """
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    if not infos:
        raise OSError(f"getaddrinfo({host!r}) returned no address")
    last: OSError | None = None
    for family, kind, proto, _name, address in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            assert _SO_TIMESTAMPNS is not None
            sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
            if family in (socket.AF_INET, socket.AF_INET6):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await loop.sock_connect(sock, address)
            tls = None
            tls_ns = 0
            if ssl_context is not None:
                tls = _Tls(ssl_context, server_hostname)
                tls_started = perf_counter_ns()
                await tls.handshake(loop, sock)
                tls_ns = perf_counter_ns() - tls_started
        except OSError as exc:  # ssl.SSLError is one: try the next address only on connect
            sock.close()
            if isinstance(exc, ssl.SSLError):
                raise
            last = exc
            continue
        except BaseException:
            sock.close()
            raise
        protocol = protocol_factory()
        tx_bytes = enable_tx_stamps(sock)
        transport = KernelTransport(loop, sock, protocol, bridge, tls, tx_bytes)
        transport.set_extra_info("tls_handshake_ns", tls_ns)
        return transport, protocol
    assert last is not None
    raise last


#: A socket of this process with SO_TIMESTAMPNS on, kept open for its lifetime (below).
_KEEPER: socket.socket | None = None
#: How long :func:`keep_stamping_on` waits for the kernel to start stamping (s).
STAMPING_WAIT_S: Final = 0.5


def keep_stamping_on() -> bool:
    """Make sure the kernel is stamping received packets; True once it is.

    Linux stamps packets only while some socket asks for stamps, and switches that on
    (and off, when the last such socket closes) from a deferred work item: the first
    packets after a client opens its first socket could come unstamped. One UDP socket
    with the option set stays open for the process's lifetime, and a datagram sent to
    itself shows when stamping has begun (waited for up to :data:`STAMPING_WAIT_S`).
    """
    global _KEEPER
    if _KEEPER is not None:
        return True
    assert _SO_TIMESTAMPNS is not None
    keeper = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        keeper.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        keeper.bind(("127.0.0.1", 0))
        keeper.settimeout(0.05)
        deadline = perf_counter_ns() + int(STAMPING_WAIT_S * 1e9)
        while perf_counter_ns() < deadline:
            keeper.sendto(b"t", keeper.getsockname())
            try:
                _data, ancillary, _flags, _addr = keeper.recvmsg(16, _ANCILLARY_BYTES)
            except TimeoutError:
                continue
            if any(kind == _SCM_TIMESTAMPNS for _level, kind, _raw in ancillary):
                _KEEPER = keeper
                atexit.register(keeper.close)  # kept on purpose: closed at exit, not leaked
                return True
    except OSError:
        pass
    keeper.close()
    return False


def clock_bridge(mode: str, notices: list[str]) -> ClockBridge | None:
    """The bridge a fast client stamps through for ``[client] kernel_stamps = mode``;
    None (user stamps) for "off", or where the platform has none (said once in
    ``notices`` for "auto" and "on")."""
    if mode == "off":
        return None
    why = kernel_stamps_supported()
    if why is not None:
        notices.append(f"{why}: stamps are taken in user space (stamp_source 'user')")
        return None
    if not keep_stamping_on():
        notices.append(
            "the kernel gave no receive stamp to a test datagram: stamps of reads without"
            " one are taken in user space (stamp_source 'user')"
        )
    return ClockBridge(notices)
