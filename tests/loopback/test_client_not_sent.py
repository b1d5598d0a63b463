"""A request the client never sent is the client's failure (``not_sent``), never the
server's ``timeout``; and every client's records agree with what the server received.

The client's event loop is stalled (a blocking sleep in it, what 1,000 streams on a
busy core do to it) right after the requests started, for longer than their first-byte
timeout. The server runs in a thread of its own, so it keeps accepting: whatever it
received it logs. Judged against that log, not a clock: a record may say ``not_sent``
exactly when the server never got its request, so the count of ``not_sent`` records
equals the requests sent minus those the server received, whatever the order in which
the stalled loop then ran its callbacks.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
import uvloop
from helpers.hostile_server import HostileServer
from helpers.requests import KINDS, record, req_for

from tokrate.analysis.metrics import summarize
from tokrate.client.base import STALE_NOTE
from tokrate.client.factory import open_client
from tokrate.client.result import StreamResult
from tokrate.load.record_warnings import RecordWarnings
from tokrate.runfolder.records_frame import records_to_frame
from tokrate.runfolder.run_info import RunInfo
from tokrate.spec.types import TimeoutsSpec

REQUESTS = 8
FIRST_BYTE_S = 0.3


@pytest.fixture(scope="module")
def server() -> Iterator[HostileServer]:
    with HostileServer() as s:
        yield s


def _stalled(server: HostileServer, kind: str) -> tuple[list[StreamResult], int]:
    """REQUESTS requests on fresh connections with the loop stalled after they start;
    the results and how many requests the server received."""
    before = len(server.requests)
    base = server.base_url("ok", tokens=2)

    async def main() -> list[StreamResult]:
        client = open_client(
            kind, pool_size=REQUESTS, timeouts=TimeoutsSpec(first_byte_s=FIRST_BYTE_S)
        )
        try:
            tasks = [
                asyncio.ensure_future(client.stream(req_for(base, messages=_ask(i))))
                for i in range(REQUESTS)
            ]
            await asyncio.sleep(0)  # each request starts: its clocks run from here
            time.sleep(FIRST_BYTE_S * 2)  # noqa: ASYNC251 - the client's loop stalled, on purpose
            return list(await asyncio.gather(*tasks))
        finally:
            await client.aclose()

    results = uvloop.run(main())
    time.sleep(0.2)  # the server's thread logs what arrived before the connections closed
    return results, len(server.requests) - before


def _ask(i: int) -> tuple[dict[str, str], ...]:
    return ({"role": "user", "content": f"hi {i}"},)


@pytest.mark.parametrize("kind", KINDS)
def test_a_request_never_sent_is_the_clients_failure(server: HostileServer, kind: str) -> None:
    results, received = _stalled(server, kind)
    records = [record(r, request_index=i) for i, r in enumerate(results)]
    unsent = [r for r in records if r.error_class == "not_sent"]
    assert len(unsent) == REQUESTS - received, [(r.error_class, r.error_message) for r in records]
    for r in unsent:
        assert r.status == "error"
        assert r.error_message is not None
        assert r.error_message.startswith("request never sent: first-byte timeout 0.3 s")
    if kind != "fast":
        # httpx and openai: the stall came before httpcore wrote anything, so none of
        # them reached the server and not one is blamed on it. (The fast client writes
        # in the step its connect completes, so the server gets its requests.)
        assert received == 0 and len(unsent) == REQUESTS


def test_unsent_requests_are_counted_apart_and_warned_about(server: HostileServer) -> None:
    """The summary counts them as the client's (``not_sent``), out of ``error`` and so
    out of the error rate; the run's end-of-run warnings name them."""
    results, received = _stalled(server, "httpx")
    assert received == 0
    records = [record(r, request_index=i) for i, r in enumerate(results)]
    group = summarize(records_to_frame(records), RunInfo(run_id="r")).groups[0]
    assert group.counts.not_sent == REQUESTS
    assert group.counts.error == 0
    assert group.counts.failed == REQUESTS
    assert group.errors_by_class == {"not_sent": REQUESTS}
    warnings = RecordWarnings({}, unique_prompts=True)
    for r in records:
        warnings.add(r)
    lines = [line for kind, line in warnings.final() if kind == "not_sent"]
    assert len(lines) == 1 and f"{REQUESTS} requests never left the client" in lines[0]


@pytest.mark.parametrize("kind", ["fast", "httpx"])
def test_a_request_on_a_connection_the_server_just_closed_is_sent_again(
    server: HostileServer, kind: str
) -> None:
    """The server closes the kept-alive connection as the second request arrives on it
    (unread: its keep-alive timeout won the race). That request never reached the server,
    so the client sends it once more and it is answered, noted on the result; judged by
    the server's own log: it read the first request and the resent one, nothing else."""
    base = server.base_url("ok", tokens=2, close_next=1)
    before = len(server.requests)

    async def main() -> list[StreamResult]:
        client = open_client(kind, pool_size=1, timeouts=TimeoutsSpec())
        try:
            return [await client.stream(req_for(base, messages=_ask(i))) for i in range(2)]
        finally:
            await client.aclose()

    first, second = uvloop.run(main())
    assert first.error_class is None and STALE_NOTE not in first.notes
    assert second.error_class is None, second.error_message
    assert STALE_NOTE in second.notes
    assert len(server.requests) - before == 2
