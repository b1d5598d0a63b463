"""Connect time is the handshake itself, not the client's scheduling around it.

Sixteen connections are opened at once while the client's event loop is blocked
for :data:`BLOCK_S` at every turn (what a busy client does to a burst of connects: the 18.4 ms every
connection read at c=8 on loopback, against 1.4 ms one at a time). A loopback TCP
handshake is one round trip through this machine's kernel, done when the SYN-ACK
comes back, whether or not the client's loop is running: it cannot contain the block.
So every recorded set-up must be far under it (the bound: a third of it, hundreds of
times a loopback round trip even on a loaded 2-core machine), while the client's own
span of the same connects, which the kernel's figure replaces, does contain it (shown
on the fast client with ``TCP_INFO`` switched off: the old measurement).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
import uvloop
from helpers.hostile_server import HostileServer
from helpers.requests import KINDS, record, req_for, stream_one

import tokrate.client.handshake as handshake
from tokrate.client.factory import open_client
from tokrate.client.handshake import tcp_handshake_rtt_ns
from tokrate.spec.types import TimeoutsSpec

#: How long the loop is blocked while the connects are in flight (s).
BLOCK_S = 0.2
CONNECTIONS = 16


@pytest.fixture(scope="module")
def server() -> Iterator[HostileServer]:
    with HostileServer() as s:
        yield s


def _burst(server: HostileServer, kind: str, kernel_stamps: str = "auto") -> list[int | None]:
    base = server.base_url("ok", tokens=1)

    async def hog() -> None:
        # Every turn of the loop blocks it: whatever the order of the callbacks, a
        # connect's completion is seen only after a block that came after its start.
        while True:
            time.sleep(BLOCK_S)  # noqa: ASYNC251 - the client's loop busy, on purpose
            await asyncio.sleep(0)

    async def main() -> list[int | None]:
        client = open_client(
            kind, pool_size=CONNECTIONS, timeouts=TimeoutsSpec(), kernel_stamps=kernel_stamps
        )
        busy = asyncio.ensure_future(hog())
        try:
            return await client.preconnect(f"{base}/models", CONNECTIONS)
        finally:
            busy.cancel()
            await client.aclose()

    return uvloop.run(main())


@pytest.mark.skipif(not handshake.TCP_INFO_AVAILABLE, reason="TCP_INFO is Linux's")
@pytest.mark.parametrize("kind", [*KINDS, "fast-user-stamps"])
def test_a_burst_of_connects_records_the_handshake_not_the_blocked_loop(
    server: HostileServer, kind: str
) -> None:
    client, stamps = ("fast", "off") if kind == "fast-user-stamps" else (kind, "auto")
    took = _burst(server, client, stamps)
    assert len(took) == CONNECTIONS and all(ns is not None for ns in took), took
    assert all(0 < ns < BLOCK_S / 3 * 1e9 for ns in took if ns is not None), took


@pytest.mark.skipif(not handshake.TCP_INFO_AVAILABLE, reason="TCP_INFO is Linux's")
def test_without_the_kernels_figure_the_block_was_inside_the_span(
    server: HostileServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The test above has teeth: the same burst timed by the client alone (what
    tokrate recorded before) contains the block."""
    monkeypatch.setattr(handshake, "TCP_INFO_AVAILABLE", False)
    took = _burst(server, "fast")
    assert sorted(ns or 0 for ns in took)[CONNECTIONS // 2] >= BLOCK_S * 1e9, took


@pytest.mark.skipif(not handshake.TCP_INFO_AVAILABLE, reason="TCP_INFO is Linux's")
def test_the_kernels_round_trip_is_read_from_a_fresh_socket() -> None:
    import socket

    with socket.socket() as listener, socket.socket() as client:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        started = time.perf_counter_ns()
        client.connect(listener.getsockname())
        spent = time.perf_counter_ns() - started
        rtt = tcp_handshake_rtt_ns(client)
        # Inside the connect() call that waited for it: never longer than that call.
        assert rtt is not None and 0 < rtt <= spent + 1000
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        assert tcp_handshake_rtt_ns(udp) is None


@pytest.mark.parametrize("kind", ["httpx", "openai"])
def test_a_connection_closed_by_a_timeout_still_gives_its_record(
    server: HostileServer, kind: str
) -> None:
    """The kernel's round trip is read when the connection comes up: a request whose
    new connection was closed by its timeout before the result was built (uvloop's
    socket of a closed transport raises ValueError) is a ``timeout`` record with its
    set-up time, not an exception that ended a 1,000-stream run."""
    req = req_for(server.base_url("no_headers"))
    result = stream_one(kind, req, TimeoutsSpec(first_byte_s=0.3))
    rec = record(result)
    assert rec.error_class == "timeout", rec.error_message
    assert rec.connect_s is not None and rec.connect_s > 0
