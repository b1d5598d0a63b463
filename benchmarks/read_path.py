"""CPU per read of the fast client's read path over real loopback sockets (issue 42):
where a token's read goes once the kernel has it, split into the syscalls and the
client's Python.

``--streams`` connections (kernel receive stamps on, as ``open_client("fast")`` opens
them) each get a chunked ``text/event-stream`` response head, then, round after round,
one plain Chat Completions answer chunk per connection (one token per read, as the
simulator sends them at 20 ms ITL) read in turn, so the objects of every stream are
touched as often as at that many streams. No event loop runs while it is timed: each
read is called directly, so the wake-ups (epoll, uvloop's dispatch) are not in it.
Rows, CPU (user + sys) of this process per read, the sends timed apart from the reads:

- ``send (the simulator's side)``: the server socket's ``send`` of the chunk (with the
  loopback delivery into the client's socket, which runs in the sender's syscall);
- ``recvmsg, bare``: the client socket's bare ``recvmsg_into`` (with its stamp): the
  syscall alone;
- ``client read``: ``KernelTransport``'s read callback: the syscall, the kernel
  stamp, httptools, ``Connection``'s callbacks, ``StreamState.feed``;
- ``client read, no HTTP layer``: the same with the transport handing the chunk's
  payload (the chunked framing cut off at a fixed place) straight to
  ``StreamState.feed``, skipping ``Connection``, httptools and the body callback: the
  floor a read could reach by recognising whole one-chunk frames above the parser (a
  bound, not a working path: nothing checks the framing);
- ``parse + feed, no socket``: ``Connection.stamped_read`` of the same bytes with no
  syscall between reads;
- ``recvmsg, bare, delayed ACKs``: the bare row with ``TCP_QUICKACK`` 0 set on the
  client's sockets first (the kernel's "pingpong" mode: a pushed small segment is then
  acknowledged on the second one's read, not on its own), beside the TCP segments the
  machine sent per read in both bare rows (``OutSegs`` of /proc/net/snmp, the whole
  machine's: a quiet machine is needed; 2.0 is the chunk and one ACK per read).

The client's Python per read is ``client read`` minus ``recvmsg, bare``, per repeat
(the last rows: medians of the paired differences). Run on a quiet machine:

    python benchmarks/read_path.py [--streams 256] [--rounds 200] [--repeats 5]
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import time
from collections.abc import Callable
from typing import Any

import orjson

from tokrate.client.accumulate import StreamState
from tokrate.client.connection import Connection
from tokrate.client.kernel_stamps import KernelTransport, clock_bridge, open_kernel_connection

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
#: Reads each stream takes before timing starts (its plain shape is learnt by then).
WARM_READS = 8


class _Pool:
    """What a Connection sees of FastClient (tokrate.client.connection.ConnectionPool)."""

    def __init__(self) -> None:
        self.pending_reads: list[tuple[Connection, bytes, int]] = []
        self.drain_scheduled = False

    def drain_reads(self) -> None:
        self.drain_scheduled = False
        pending, self.pending_reads = self.pending_reads, []
        for conn, data, now in pending:
            conn.process(data, now)

    def forget(self, conn: Connection) -> None:
        pass

    def release(self, conn: Connection) -> None:
        pass


def _frame(i: int) -> bytes:
    """One token's chunked frame, as the simulator writes it."""
    chunk = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "sim",
        "choices": [{"index": 0, "delta": {"content": f" tok{i % 10}"}, "finish_reason": None}],
    }
    payload = b"data: " + orjson.dumps(chunk) + b"\n\n"
    return b"%x\r\n" % len(payload) + payload + b"\r\n"


_cpu_ns = time.process_time_ns  # user + sys of this process


async def _streams(n: int) -> tuple[list[Any], socket.socket]:
    """``n`` (transport, connection, server socket) over loopback, each mid-response."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(n)
    port = listener.getsockname()[1]
    notices: list[str] = []
    bridge = clock_bridge("on", notices)
    if bridge is None:
        raise SystemExit(f"no kernel stamps here: {notices}")
    pool = _Pool()
    out = []
    for _ in range(n):
        transport, conn = await open_kernel_connection(
            lambda: Connection(pool, ("http", "127.0.0.1", port)), "127.0.0.1", port, bridge=bridge
        )
        server, _addr = listener.accept()
        server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        assert isinstance(conn, Connection) and isinstance(transport, KernelTransport)
        conn.state = StreamState(max_chunks=1 << 30)
        out.append((transport, conn, server))
    return out, listener


def _settle() -> None:
    time.sleep(0.002)  # loopback delivers at once; this only lets softirqs finish


def _round(streams: list[Any], frame: bytes, read: Callable[[Any, bytes], None]) -> None:
    for _transport, _conn, server in streams:
        server.send(frame)
    _settle()
    for stream in streams:
        read(stream, frame)


def _measure(
    streams: list[Any], rounds: int, read: Callable[[Any, bytes], None]
) -> tuple[float, float]:
    """CPU ns per read of ``rounds`` rounds: (the sends, the reads), timed apart."""
    frames = [_frame(i) for i in range(rounds)]
    sent = received = 0
    sends = [server.send for _t, _c, server in streams]
    for frame in frames:
        cpu = _cpu_ns()
        for send in sends:
            send(frame)
        sent += _cpu_ns() - cpu
        _settle()
        cpu = _cpu_ns()
        for stream in streams:
            read(stream, frame)
        received += _cpu_ns() - cpu
    n = rounds * len(streams)
    return sent / n, received / n


def _bare(buffers: list[memoryview]) -> Callable[[Any, bytes], None]:
    def read(stream: Any, _frame: bytes) -> None:
        stream[0].get_extra_info("socket").recvmsg_into(buffers, 64)

    return read


def _client(stream: Any, _frame: bytes) -> None:
    stream[0]._on_readable()


def _parse(stream: Any, frame: bytes) -> None:
    stream[1].stamped_read(frame, time.perf_counter_ns(), True)


def _out_segments() -> int:
    """TCP segments this machine has sent (``Tcp: OutSegs``)."""
    with open("/proc/net/snmp") as f:
        names, values = [line.split() for line in f if line.startswith("Tcp:")][:2]
    return int(values[names.index("OutSegs")])


def _quickack(streams: list[Any], on: bool) -> None:
    for transport, _conn, _server in streams:
        transport.get_extra_info("socket").setsockopt(
            socket.IPPROTO_TCP, socket.TCP_QUICKACK, int(on)
        )


def _skip_http(stream: Any, frame: bytes) -> None:
    transport, conn, _server = stream
    state = conn.state
    feed = state.feed

    def deliver(data: bytes, now: int, _kernel: bool) -> None:
        feed(data[data.find(b"\r\n") + 2 : -2], now)

    transport._deliver = deliver


def _parse_only(streams: list[Any], rounds: int) -> float:
    frames = [_frame(i) for i in range(rounds)]
    cpu = _cpu_ns()
    for frame in frames:
        for stream in streams:
            _parse(stream, frame)
    return (_cpu_ns() - cpu) / (rounds * len(streams))


async def _main(n: int, rounds: int, repeats: int) -> None:
    streams, listener = await _streams(n)
    for _transport, _conn, server in streams:
        server.sendall(HEAD)
    _settle()
    for stream in streams:
        _client(stream, b"")
    for i in range(WARM_READS):
        _round(streams, _frame(i), _client)
    # The raw socket objects are what recvmsg_into is called on (not the transport's
    # bound method), so the bare row pays no Python of the client.
    buffers = [memoryview(bytearray(1 << 18))]
    rows: dict[str, list[float]] = {
        "send (the simulator's side)": [],
        "recvmsg, bare": [],
        "client read": [],
        "client read, no HTTP layer": [],
        "parse + feed, no socket": [],
        "recvmsg, bare, delayed ACKs": [],
    }
    segments: dict[str, list[float]] = {"recvmsg, bare": [], "recvmsg, bare, delayed ACKs": []}
    delivers = [stream[0]._deliver for stream in streams]
    for _ in range(repeats):
        before = _out_segments()
        sent, bare = _measure(streams, rounds, _bare(buffers))
        segments["recvmsg, bare"].append((_out_segments() - before) / (rounds * n))
        rows["send (the simulator's side)"].append(sent)
        rows["recvmsg, bare"].append(bare)
        _quickack(streams, False)
        before = _out_segments()
        rows["recvmsg, bare, delayed ACKs"].append(_measure(streams, rounds, _bare(buffers))[1])
        segments["recvmsg, bare, delayed ACKs"].append((_out_segments() - before) / (rounds * n))
        _quickack(streams, True)
        rows["client read"].append(_measure(streams, rounds, _client)[1])
        rows["parse + feed, no socket"].append(_parse_only(streams, rounds))
        for stream in streams:
            _skip_http(stream, b"")
        rows["client read, no HTTP layer"].append(_measure(streams, rounds, _client)[1])
        for stream, deliver in zip(streams, delivers, strict=True):
            stream[0]._deliver = deliver
    for transport, _conn, server in streams:
        transport.close()
        server.close()
    listener.close()
    chunks = {s[1].state.answer_chunks for s in streams}
    print(f"streams {n}, rounds {rounds} x {repeats}, answer chunks per stream {sorted(chunks)}")
    print("| row | ns / read, median | ns / read, best |")
    print("|---|---|---|")
    for label, runs in rows.items():
        print(f"| {label} | {statistics.median(runs):,.0f} | {min(runs):,.0f} |")
    differences = {
        "client Python per read (client read - recvmsg, bare)": ("client read", "recvmsg, bare"),
        "HTTP layer per read (client read - no HTTP layer)": (
            "client read",
            "client read, no HTTP layer",
        ),
    }
    for label, (plus, minus) in differences.items():
        d = [x - y for x, y in zip(rows[plus], rows[minus], strict=True)]
        print(f"| {label}, paired | {statistics.median(d):,.0f} | - |")
    d = [
        x - y
        for x, y in zip(rows["recvmsg, bare"], rows["recvmsg, bare, delayed ACKs"], strict=True)
    ]
    print(
        f"| half the ACKs (recvmsg, bare - delayed ACKs), paired | {statistics.median(d):,.0f} | - |"
    )
    for label, per_read in segments.items():
        print(f"TCP segments sent per read, {label}: {statistics.median(per_read):.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    asyncio.run(_main(a.streams, a.rounds, a.repeats))


if __name__ == "__main__":
    main()
