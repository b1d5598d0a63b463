"""The simulator's truth log says when each request reached it (``arrived_ns``: the
kernel's receive stamp of its last byte), apart from when its app began handling it
(``received_ns``, after the server's own intake queue).

No timing band: on loopback the kernel stamps a segment while the sender's ``send``
is still running (the receive path runs in the sending call), so each request's
arrival lies between the client's stamps taken just before and just after its write,
however busy the machine; the app can only begin later.
"""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

import orjson
import pytest

from tokrate.sim.model import Tier
from tokrate.sim.server import SimConfig, spawn_simulator

FIXED = Tier(
    "fixed",
    7.0,
    7.0,
    fixed_ttft_ms=5.0,
    fixed_itl_ms=1.0,
    output_tokens_min=2,
    output_tokens_max=2,
)
BODY = orjson.dumps(
    {"model": "fixed", "messages": [{"role": "user", "content": "hi"}], "stream": True}
)


def _round_trip(sock: socket.socket) -> None:
    """One GET answered on ``sock``: the server has accepted the connection and reads
    it with its own stamped reader from here on (what the burst below needs)."""
    sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: sim\r\n\r\n")
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = sock.recv(65536)
        assert chunk, "connection closed before the answer's head"
        answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "connection closed inside the answer's body"
        body += chunk


def _request(index: int) -> bytes:
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: sim\r\nX-Request-ID: r{index}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(BODY)}\r\n\r\n"
    )
    return head.encode() + BODY


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="kernel stamps: Linux")
def test_a_burst_arrives_when_written_and_waits_in_the_servers_intake(tmp_path: Path) -> None:
    """64 requests written back to back on open keep-alive connections (the opening
    wave of a closed loop): each one's ``arrived_ns`` lies inside its own write, and its
    ``received_ns`` comes no earlier; the intake queue shows between the two."""
    truth = tmp_path / "truth.jsonl"
    config = SimConfig(tiers=(FIXED,), truth_log=str(truth))
    with spawn_simulator(config) as (url, _pid):
        host, port = url.split("//")[1].split("/")[0].rsplit(":", 1)
        socks = [socket.create_connection((host, int(port))) for _ in range(64)]
        try:
            for sock in socks:
                _round_trip(sock)  # every connection accepted before the burst
            brackets = []
            for i, sock in enumerate(socks):
                before = time.perf_counter_ns()
                sock.sendall(_request(i))
                brackets.append((before, time.perf_counter_ns()))
            for sock in socks:
                answer = b""
                while b"[DONE]" not in answer:
                    chunk = sock.recv(65536)
                    assert chunk, "connection closed before [DONE]"
                    answer += chunk
        finally:
            for sock in socks:
                sock.close()
    # The simulator writes a request's line before its final chunk: all are there.
    rows = {
        row["request"]["headers"]["x-request-id"]: row
        for row in map(orjson.loads, truth.read_bytes().splitlines())
    }
    assert len(rows) == 64
    for i, (before, after) in enumerate(brackets):
        row = rows[f"r{i}"]
        assert before <= row["arrived_ns"] <= after, (i, row["arrived_ns"] - before, after - before)
        assert row["arrived_ns"] <= row["received_ns"] <= row["first_write_ns"]
