"""A new connection's set-up time: the handshake itself, not the client's scheduling.

Timing ``connect()`` with the client's clock measures from the call to the moment the
event loop got round to the completed connection. In a burst of connects (c=8 opening
its 8 connections at once) that includes everything else the loop did meanwhile: the
address lookups in the loop's thread pool, the other connects, whatever task ran
first. On loopback that read 18.4 ms per connection at c=8 against 1.4 ms one at a
time, and a user would think the network adds 18 ms.

So the TCP part is the kernel's own measurement: right after the handshake, Linux's
``TCP_INFO`` holds the round trip it timed from sending the SYN to receiving the
SYN-ACK (``tcpi_rtt``, microseconds; the first sample is the handshake's, RFC 6298).
A handshake whose SYN was retransmitted has no such sample (Karn's rule), and the
retransmission timeout it waited is real: then, and where ``TCP_INFO`` does not exist,
the span the client timed stands. TLS, when there is one, adds the wall time of its
handshake (from the ClientHello to the finished handshake: the round trips and the
client's own crypto). Name resolution is not part of it.
"""

from __future__ import annotations

import socket
import struct
import sys
from typing import Final

__all__ = ["TCP_INFO_AVAILABLE", "connect_ns", "set_up_ns", "tcp_handshake_rtt_ns"]

#: Linux's ``TCP_INFO`` (not every platform's socket module names it).
_TCP_INFO: Final[int | None] = getattr(socket, "TCP_INFO", None)
TCP_INFO_AVAILABLE: Final = sys.platform.startswith("linux") and _TCP_INFO is not None
# struct tcp_info (linux/tcp.h): 8 one-byte fields, then u32s: rto, ato, snd_mss,
# rcv_mss, unacked, sacked, lost, retrans, fackets, 4 last_* stamps, pmtu,
# rcv_ssthresh, rtt, rttvar, snd_ssthresh, snd_cwnd, advmss, reordering, rcv_rtt,
# rcv_space, total_retrans: 104 bytes in every kernel since 2.6.
_LAYOUT: Final = struct.Struct("8B24I")
_RTT_INDEX: Final = 8 + 15
_TOTAL_RETRANS_INDEX: Final = 8 + 23


def tcp_handshake_rtt_ns(sock: socket.socket | None) -> int | None:
    """The SYN -> SYN-ACK round trip the kernel measured on ``sock`` (ns), read right
    after the connection came up; None where it cannot be read or does not describe
    the handshake (a retransmitted segment: the wait was longer than one round trip)."""
    if not TCP_INFO_AVAILABLE or _TCP_INFO is None or sock is None:
        return None
    if sock.family not in (socket.AF_INET, socket.AF_INET6):
        return None
    try:
        raw = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, _LAYOUT.size)
    except (OSError, ValueError):  # ValueError: uvloop's stand-in for a closed socket
        return None
    if len(raw) < _LAYOUT.size:
        return None
    fields = _LAYOUT.unpack(raw)
    if fields[_TOTAL_RETRANS_INDEX] or fields[_RTT_INDEX] <= 0:
        return None
    return int(fields[_RTT_INDEX]) * 1000


def connect_ns(sock: socket.socket | None, timed_ns: int, tls_ns: int | None) -> int:
    """A new connection's set-up time (ns): the kernel's handshake round trip plus
    ``tls_ns``, the TLS handshake's span (0 without TLS; None when there was one the
    client could not time apart from the rest); else ``timed_ns``, the client's span of
    the whole set-up. Never more than ``timed_ns``. Call it as the connection comes up:
    the kernel's figure is gone once the socket is closed, and later round trips of the
    data change it."""
    return set_up_ns(tcp_handshake_rtt_ns(sock), timed_ns, tls_ns)


def set_up_ns(rtt_ns: int | None, timed_ns: int, tls_ns: int | None) -> int:
    """:func:`connect_ns` from a handshake round trip read earlier (``rtt_ns``, None
    where the kernel had none)."""
    if rtt_ns is None or tls_ns is None:
        return timed_ns
    return min(timed_ns, rtt_ns + tls_ns)
