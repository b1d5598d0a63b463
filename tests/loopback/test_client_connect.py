"""Connection set-up kept apart from the stream: ``connect_ns`` / ``connect_s``, the
pool's preconnect, and a pool notice only when the pool really overflowed.

Ground truth is the loopback server's own count of accepted connections.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import uvloop
from helpers.hostile_server import HostileServer
from helpers.requests import KINDS, record, req_for

from tokrate.client.connect_trace import ConnectTrace
from tokrate.client.factory import open_client
from tokrate.client.result import StreamResult
from tokrate.spec.types import TimeoutsSpec


@pytest.fixture(scope="module")
def server() -> Iterator[HostileServer]:
    with HostileServer() as s:
        yield s


@pytest.mark.parametrize("kind", KINDS)
def test_first_request_on_a_connection_carries_its_set_up_the_rest_reuse(
    server: HostileServer, kind: str
) -> None:
    base = server.base_url("ok", tokens=3)

    async def main() -> list[StreamResult]:
        client = open_client(kind, pool_size=2, timeouts=TimeoutsSpec())
        try:
            return [await client.stream(req_for(base)) for _ in range(4)]
        finally:
            await client.aclose()

    before = server.connections
    results = uvloop.run(main())
    assert server.connections - before == 1
    assert all(r.ok for r in results)
    first, *rest = (record(r) for r in results)
    assert first.connect_s is not None and 0 < first.connect_s < first.ttft_s  # type: ignore[operator]
    assert [r.connect_s for r in rest] == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("kind", KINDS)
def test_preconnect_opens_the_pool_before_the_requests(server: HostileServer, kind: str) -> None:
    base = server.base_url("ok", tokens=3, itl_ms=5)

    async def main() -> tuple[list[int | None], list[StreamResult], list[str]]:
        client = open_client(kind, pool_size=3, timeouts=TimeoutsSpec())
        try:
            opened = await client.preconnect(f"{base}/models", 3)
            results = await asyncio.gather(*(client.stream(req_for(base)) for _ in range(3)))
            return opened, list(results), list(client.notices)
        finally:
            await client.aclose()

    before = server.connections
    opened, results, notices = uvloop.run(main())
    assert server.connections - before == 3
    assert len(opened) == 3 and all(ns is not None and ns > 0 for ns in opened)
    assert all(r.ok and r.connect_ns == 0 for r in results), [r.connect_ns for r in results]
    assert not notices


def test_preconnect_to_a_dead_port_reports_failures_and_never_raises() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def main() -> list[int | None]:
        client = open_client("fast", pool_size=2, timeouts=TimeoutsSpec())
        try:
            return await client.preconnect(f"http://127.0.0.1:{port}/v1/models", 2)
        finally:
            await client.aclose()

    assert uvloop.run(main()) == [None, None]


def test_a_refused_connection_has_no_set_up_time() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for kind in KINDS:
        from helpers.requests import stream_one

        rec = record(stream_one(kind, req_for(f"http://127.0.0.1:{port}/v1")))
        assert rec.error_class == "connect" and rec.connect_s is None, kind


def test_done_before_the_body_terminator_reuses_the_connection(server: HostileServer) -> None:
    """[DONE] in one read and the chunked terminator 5 ms later (llama-server does
    this): the next request of a closed loop waits for that connection instead of
    opening a second one, and no pool notice appears."""
    base = server.base_url("ok", tokens=3, tail_ms=5)

    async def main() -> tuple[list[StreamResult], list[str]]:
        client = open_client("fast", pool_size=1, timeouts=TimeoutsSpec())
        try:
            return [await client.stream(req_for(base)) for _ in range(10)], client.notices
        finally:
            await client.aclose()

    before = server.connections
    results, notices = uvloop.run(main())
    assert all(r.ok for r in results)
    assert server.connections - before == 1
    assert [r.connect_ns == 0 for r in results] == [False] + [True] * 9
    assert notices == []


def test_pool_notice_only_when_more_requests_than_pool_size(server: HostileServer) -> None:
    base = server.base_url("ok", tokens=4, itl_ms=20)

    async def main(n: int) -> list[str]:
        client = open_client("fast", pool_size=2, timeouts=TimeoutsSpec())
        try:
            await asyncio.gather(*(client.stream(req_for(base)) for _ in range(n)))
            await asyncio.gather(*(client.stream(req_for(base)) for _ in range(n)))
            return list(client.notices)
        finally:
            await client.aclose()

    assert uvloop.run(main(2)) == []
    (notice,) = uvloop.run(main(3))
    assert "pool_size=2" in notice and "(3)" in notice


def test_connect_trace_reads_httpcore_events() -> None:
    async def main() -> tuple[int | None, int | None, int | None]:
        reused, fresh, broken = ConnectTrace(), ConnectTrace(), ConnectTrace()
        await fresh("connection.connect_tcp.started", {})
        await fresh("connection.connect_tcp.complete", {})
        await fresh("connection.start_tls.started", {})
        await fresh("connection.start_tls.complete", {})
        await fresh("http11.send_request_headers.started", {})
        await broken("connection.connect_tcp.started", {})
        await broken("connection.connect_tcp.failed", {})
        return reused.connect_ns, fresh.connect_ns, broken.connect_ns

    reused, fresh, broken = asyncio.run(main())
    assert reused == 0 and fresh is not None and fresh > 0 and broken is None
