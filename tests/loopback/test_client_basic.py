"""The streaming clients against a real loopback server (tests/helpers/hostile_server.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import orjson
import pytest
import uvloop
from helpers.hostile_server import HostileServer
from helpers.requests import KINDS, record, req_for, stream_one

from tokrate.client.factory import open_client
from tokrate.client.result import StreamResult
from tokrate.runfolder.jsondoc import to_json
from tokrate.spec.types import TimeoutsSpec


@pytest.fixture(scope="module")
def server() -> Iterator[HostileServer]:
    with HostileServer() as s:
        yield s


@pytest.mark.parametrize("kind", KINDS)
def test_ok_stream_counts_content_only(server: HostileServer, kind: str) -> None:
    res = stream_one(kind, req_for(server.base_url("ok", tokens=5, itl_ms=2)))
    rec = record(res)
    assert rec.status == "ok", rec.error_message
    assert rec.content_chunks == 5  # the role-only chunk and the usage chunk do not count
    assert rec.output_tokens == 5 and rec.tokens_source == "usage"
    assert rec.input_tokens == 11
    assert rec.finish_reason == "length"
    assert rec.response_id is not None and rec.response_id.startswith("resp-")
    assert rec.client == kind
    assert rec.first_byte_s is not None and rec.ttft_s is not None and rec.e2e_s is not None
    assert 0 < rec.first_byte_s <= rec.ttft_s <= rec.e2e_s
    assert rec.chunk_offsets_s[0] == rec.ttft_s
    assert rec.tpot_s == pytest.approx((rec.e2e_s - rec.ttft_s) / 4)


@pytest.mark.parametrize("kind", KINDS)
def test_legacy_completions(server: HostileServer, kind: str) -> None:
    req = req_for(server.base_url("ok", tokens=3), api="completions", messages=None, prompt="x")
    assert b'"prompt":"x"' in req.body and req.url.endswith("/v1/completions")
    rec = record(stream_one(kind, req))
    assert rec.status == "ok", rec.error_message
    assert rec.content_chunks == 3 and rec.api == "completions"


@pytest.mark.parametrize("kind", KINDS)
def test_usage_rejected_retried_once_without_it(server: HostileServer, kind: str) -> None:
    n0 = len(server.requests)
    res = stream_one(kind, req_for(server.base_url("ok", tokens=4, reject_usage=1)))
    assert res.usage_rejected and res.attempt == 2
    rec = record(res)
    assert rec.status == "ok"
    assert rec.tokens_source == "chunks" and rec.output_tokens == 4
    sent = server.requests[n0:]
    assert len(sent) == 2  # exactly one retry, no more
    assert "stream_options" in sent[0]["body"] and "stream_options" not in sent[1]["body"]


@pytest.mark.parametrize("kind", KINDS)
def test_speculative_chunks_tokens_from_usage(server: HostileServer, kind: str) -> None:
    rec = record(stream_one(kind, req_for(server.base_url("ok", tokens=12, per_chunk=4))))
    assert rec.content_chunks == 3
    assert rec.output_tokens == 12 and rec.tokens_source == "usage"
    assert rec.tpot_s == pytest.approx((rec.e2e_s - rec.ttft_s) / 11)


@pytest.mark.parametrize("kind", KINDS)
def test_reasoning_then_answer(server: HostileServer, kind: str) -> None:
    rec = record(stream_one(kind, req_for(server.base_url("ok", tokens=5, reasoning=2, itl_ms=3))))
    assert rec.status == "ok"
    assert rec.reasoning_tokens == 2
    assert rec.first_answer_s is not None and rec.ttft_s is not None
    assert rec.first_answer_s > rec.ttft_s
    assert rec.first_answer_s == rec.chunk_offsets_s[2]
    assert rec.extra["reasoning_chunks"] == 2


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("code", "error_class"), [(500, "http_5xx"), (429, "http_429"), (404, "http_4xx")]
)
def test_http_errors_are_data(
    server: HostileServer, kind: str, code: int, error_class: str
) -> None:
    rec = record(stream_one(kind, req_for(server.base_url("status", code=code, body="nope_here"))))
    assert rec.status == "error" and rec.error_class == error_class
    assert rec.http_status == code
    assert rec.error_message is not None and "nope here" in rec.error_message
    assert rec.ttft_s is None and rec.tpot_s is None


@pytest.mark.parametrize("kind", KINDS)
def test_framings_and_line_endings(server: HostileServer, kind: str) -> None:
    for opts in (
        {"framing": "close"},
        {"crlf": 1},
        {"nospace": 1, "comments": 1},
        {"no_done": 1},
    ):
        rec = record(stream_one(kind, req_for(server.base_url("ok", tokens=3, **opts))))
        assert rec.status == "ok", (opts, rec.error_message)
        assert rec.content_chunks == 3, opts


@pytest.mark.parametrize("kind", KINDS)
def test_connection_refused_is_connect_error(kind: str) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rec = record(stream_one(kind, req_for(f"http://127.0.0.1:{port}/v1")))
    assert rec.status == "error" and rec.error_class == "connect"


def test_keep_alive_reuses_connections(server: HostileServer) -> None:
    base = server.base_url("ok", tokens=2)

    async def main() -> list[StreamResult]:
        client = open_client("fast", pool_size=4, timeouts=TimeoutsSpec())
        try:
            out = []
            for _ in range(3):  # sequential: one connection serves them all
                out.append(await client.stream(req_for(base)))
            out += await asyncio.gather(*(client.stream(req_for(base)) for _ in range(4)))
            return out
        finally:
            await client.aclose()

    before = server.connections
    results = uvloop.run(main())
    assert all(r.ok for r in results)
    assert server.connections - before == 4  # never more than the concurrency


def test_api_key_sent_but_never_shown(server: HostileServer) -> None:
    key = "sk-canary-0123456789abcdef"
    req = req_for(server.base_url("status", code=401, body="bad_key"), key=key)
    assert key not in repr(req) and key not in str(req)
    for kind in KINDS:
        res = stream_one(kind, req)
        assert server.requests[-1]["headers"]["authorization"] == f"Bearer {key}"
        assert key not in repr(res) and key not in orjson.dumps(to_json(record(res))).decode()
