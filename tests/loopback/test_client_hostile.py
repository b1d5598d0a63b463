"""Hostile and broken servers (issue 6): every case ends, bounded, as a clear error."""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Iterator

import pytest
from helpers.hostile_server import HostileServer
from helpers.requests import KINDS, record, req_for, stream_one

from tokrate.spec.types import TimeoutsSpec

FAST = TimeoutsSpec(connect_s=2.0, first_byte_s=0.4, idle_s=0.3, total_s=0.8)


@pytest.fixture(scope="module")
def server() -> Iterator[HostileServer]:
    with HostileServer() as s:
        yield s


def run_case(kind: str, server: HostileServer, mode: str, **opts: object):  # type: ignore[no-untyped-def]
    t = time.monotonic()
    res = stream_one(kind, req_for(server.base_url(mode, **opts)), FAST)
    elapsed = time.monotonic() - t
    assert elapsed < FAST.total_s + 5, f"{mode} hung for {elapsed:.2f} s"  # cold SDK import
    rec = record(res)
    # Measured from t0 on the client's clock: no request outlives its total timeout.
    assert rec.e2e_s is not None and rec.e2e_s < FAST.total_s + 0.5, rec.e2e_s
    return rec


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("mode", "opts", "error_class", "words"),
    [
        ("endless", {"itl_ms": 5}, "timeout", "total timeout"),
        ("slow_bytes", {"gap_s": 1}, "timeout", "idle-gap timeout"),
        ("no_headers", {}, "timeout", "first-byte timeout"),
        ("not_json", {}, "protocol", "not JSON"),
        ("no_choices", {}, "protocol", "no choices"),
        ("bad_usage", {"value": -5}, "protocol", "not a plausible token count"),
        ("bad_usage", {"value": 10**12}, "protocol", "not a plausible token count"),
        ("bad_usage", {"value": "many"}, "protocol", "not an integer"),
        # One rule for absurd usage in all three clients (issue 41): the SDK's lenient
        # parser turned true into 1 and took NaN and Infinity, orjson refused them.
        *(
            ("bad_usage", {"value": v, "literal": 1}, "protocol", f"is not an integer: {v}")
            for v in ("true", "NaN", "Infinity")
        ),
        # A redirect names where it points; a compressed stream is refused by name.
        ("redirect", {}, "protocol", "HTTP 301 Moved Permanently to https://elsewhere.example"),
        ("gzip_stream", {}, "protocol", "Content-Encoding: gzip"),
        ("html200", {}, "protocol", "text/html"),
        ("json200", {}, "protocol", "application/json"),
        ("disconnect", {"after": 2, "itl_ms": 5}, "truncated", ""),
    ],
)
def test_hostile_case(
    server: HostileServer, kind: str, mode: str, opts: dict, error_class: str, words: str
) -> None:
    rec = run_case(kind, server, mode, **opts)
    assert rec.status == "error"
    assert rec.error_class == error_class, rec.error_message
    assert words in (rec.error_message or "")
    assert "\n" not in (rec.error_message or "")
    if mode == "endless" or mode == "disconnect":
        assert rec.ttft_s is not None and rec.content_chunks >= 2  # partial timings kept
    if mode == "no_headers":
        assert rec.first_byte_s is None and rec.http_status is None


@pytest.mark.parametrize("kind", ("fast", "httpx"))
def test_invalid_utf8_is_protocol_error(server: HostileServer, kind: str) -> None:
    rec = run_case(kind, server, "bad_utf8")
    assert rec.error_class == "protocol"
    assert "not JSON" in (rec.error_message or "")


@pytest.mark.parametrize("kind", KINDS)
def test_50_mb_line_bounded_memory(server: HostileServer, kind: str) -> None:
    tracemalloc.start()
    try:
        rec = run_case(kind, server, "big_line", mb=50)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert rec.error_class == "protocol"
    assert "longer than" in (rec.error_message or "")
    assert peak < 24 * 2**20, f"peak {peak / 2**20:.1f} MiB"


@pytest.mark.parametrize("kind", KINDS)
def test_a_drip_that_never_ends_a_line_is_idle(server: HostileServer, kind: str) -> None:
    """A byte every 0.1 s, never a line end (h-drip): the idle gap (0.5 s here, 30 s by
    default) is measured from the last finished line (the SDK: its last event), so bytes
    that keep coming do not hold the request until its total timeout (fast and httpx:
    idle was per read)."""
    timeouts = TimeoutsSpec(connect_s=2.0, first_byte_s=2.0, idle_s=0.5, total_s=20.0)
    t = time.monotonic()
    res = stream_one(kind, req_for(server.base_url("slow_bytes", gap_s=0.1)), timeouts)
    assert time.monotonic() - t < 10
    rec = record(res)
    assert rec.error_class == "timeout", rec.error_message
    assert "idle-gap timeout 0.5 s" in (rec.error_message or "")


@pytest.mark.parametrize("kind", KINDS)
def test_an_endless_fast_stream_ends_at_the_chunks_max_tokens_allows(
    server: HostileServer, kind: str
) -> None:
    """h-forever: chunks every millisecond for ever, under both response caps. A request
    for 8 tokens cannot be answered in more than 4 x 8 + 256 chunks: past that it ends
    as response_limit in well under a second (it ran to the 600 s total timeout)."""
    timeouts = TimeoutsSpec(connect_s=2.0, first_byte_s=5.0, idle_s=5.0, total_s=60.0)
    t = time.monotonic()
    res = stream_one(kind, req_for(server.base_url("endless", itl_ms=1), max_tokens=8), timeouts)
    assert time.monotonic() - t < 30
    rec = record(res)
    assert rec.error_class == "response_limit", rec.error_message
    assert "288 chunks (4 x the request's 8 max tokens + 256)" in (rec.error_message or "")


@pytest.mark.parametrize("kind", KINDS)
def test_a_50_mb_header_is_a_protocol_error_with_bounded_memory(
    server: HostileServer, kind: str
) -> None:
    """One 50 MB header line: every client stops reading it early and calls it
    ``protocol`` (the fast client's parser buffered all of it, 277 MB for 2 requests,
    and called it ``truncated``)."""
    timeouts = TimeoutsSpec(connect_s=2.0, first_byte_s=20.0, idle_s=20.0, total_s=30.0)
    stream_one(kind, req_for(server.base_url("ok", tokens=2)), timeouts)  # imports: not counted
    tracemalloc.start()
    try:
        rec = record(stream_one(kind, req_for(server.base_url("big_header", mb=50)), timeouts))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert rec.error_class == "protocol", rec.error_message
    assert peak < 24 * 2**20, f"peak {peak / 2**20:.1f} MiB"
