"""Bounded memory per stream (issue 14): an endless response ends as ``response_limit``
at the configured chunk or byte bound, or as ``timeout`` at ``total_s``, on every
client, and its connection is dropped; real answers never see the defaults."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvloop
from helpers.hostile_server import HostileServer
from helpers.requests import KINDS, prompt, record, req_for, stream_one, target

from tokrate.client.accumulate import MAX_RESPONSE_BYTES, MAX_RESPONSE_CHUNKS
from tokrate.client.factory import open_client
from tokrate.client.request import PreparedRequest, build_request
from tokrate.errors import ConfigError
from tokrate.load.worker.settings import WorkerSettings
from tokrate.runfolder.records import RequestRecord
from tokrate.spec.config_file import load_spec
from tokrate.spec.types import ERROR_CLASSES, ClientSpec, TimeoutsSpec

#: Generous for every bound a test sets: a cut that never happens shows as a timeout.
SLOW = TimeoutsSpec(connect_s=5.0, first_byte_s=10.0, idle_s=10.0, total_s=20.0)


@pytest.fixture(scope="module")
def server() -> Iterator[HostileServer]:
    with HostileServer() as s:
        yield s


def endless(server: HostileServer, **limits: int) -> PreparedRequest:
    # No output limit in the body: the configured caps alone bound the response (a
    # limit of N tokens would cap it at 4 x N + 256 chunks first).
    req: PreparedRequest = req_for(server.base_url("endless"), max_tokens=None)
    return dataclasses.replace(req, **limits)


def cut(kind: str, req: PreparedRequest, timeouts: TimeoutsSpec = SLOW) -> RequestRecord:
    start = time.monotonic()
    rec = record(stream_one(kind, req, timeouts))
    elapsed = time.monotonic() - start
    assert elapsed < 10, f"an endless stream ran {elapsed:.1f} s"  # includes a cold SDK import
    return rec


def test_error_class_and_defaults_agree() -> None:
    assert "response_limit" in ERROR_CLASSES
    spec = ClientSpec()
    assert (spec.max_response_chunks, spec.max_response_bytes) == (
        MAX_RESPONSE_CHUNKS,
        MAX_RESPONSE_BYTES,
    )


@pytest.mark.parametrize("kind", KINDS)
def test_chunk_limit_ends_an_endless_stream(server: HostileServer, kind: str) -> None:
    rec = cut(kind, endless(server, max_response_chunks=50))
    assert rec.status == "error"
    assert rec.error_class == "response_limit"
    assert rec.error_message == "response exceeded 50 chunks ([client] max_response_chunks)"
    assert 0 < len(rec.chunk_offsets_s) <= 50
    assert rec.ttft_s is not None  # partial timings kept


@pytest.mark.parametrize("kind", KINDS)
def test_byte_limit_ends_an_endless_stream(server: HostileServer, kind: str) -> None:
    rec = cut(kind, endless(server, max_response_bytes=20_000))
    assert rec.status == "error"
    assert rec.error_class == "response_limit"
    assert rec.error_message == "response exceeded 20000 bytes ([client] max_response_bytes)"
    # The bound is checked per read: one read past it at most.
    assert 20_000 < rec.bytes_received < 20_000 + 2**20


@pytest.mark.parametrize("kind", KINDS)
def test_duration_limit_is_the_total_timeout(server: HostileServer, kind: str) -> None:
    timeouts = dataclasses.replace(SLOW, total_s=0.5)
    req = req_for(server.base_url("endless", itl_ms=2))
    rec = cut(kind, req, timeouts)
    assert rec.error_class == "timeout"
    assert rec.error_message == "total timeout 0.5 s expired"
    assert rec.e2e_s is not None and rec.e2e_s < 1.0


def _two_requests(kind: str, first: PreparedRequest, second: PreparedRequest) -> list[Any]:
    async def main() -> list[Any]:
        client = open_client(kind, pool_size=2, timeouts=SLOW)
        try:
            return [await client.stream(first), await client.stream(second)]
        finally:
            await client.aclose()

    return uvloop.run(main())


@pytest.mark.parametrize("kind", KINDS)
def test_a_cut_stream_drops_its_connection(server: HostileServer, kind: str) -> None:
    ok = req_for(server.base_url("ok", tokens=4))
    before = server.connections
    assert all(r.ok for r in _two_requests(kind, ok, ok))
    assert server.connections - before == 1  # premise: a finished answer's is reused
    before = server.connections
    first, second = _two_requests(kind, endless(server, max_response_chunks=20), ok)
    assert first.error_class == "response_limit"
    assert second.ok
    assert server.connections - before == 2


@pytest.mark.parametrize("kind", KINDS)
def test_a_normal_answer_is_unaffected_by_the_defaults(server: HostileServer, kind: str) -> None:
    req = req_for(server.base_url("ok", tokens=200, per_chunk=1), max_tokens=200)
    # A request for 200 tokens may have 4 x 200 + 256 chunks (under the configured cap).
    assert (req.max_response_chunks, req.max_response_bytes) == (1056, MAX_RESPONSE_BYTES)
    unlimited = req_for(server.base_url("ok"), max_tokens=None)
    assert unlimited.max_response_chunks == MAX_RESPONSE_CHUNKS
    rec = record(stream_one(kind, req, SLOW))
    assert rec.status == "ok", rec.error_message
    assert rec.content_chunks == 200


def test_config_reaches_the_request(server: HostileServer) -> None:
    spec = load_spec(None, {"client.max_response_chunks": 30, "client.max_response_bytes": 4096})
    settings = WorkerSettings.from_spec(spec).request
    req = build_request(
        target(server.base_url("endless")),
        prompt(),
        settings,
        include_usage=True,
        unique_prefix=None,
        api_key=None,
    )
    assert (req.max_response_chunks, req.max_response_bytes) == (30, 4096)


@pytest.mark.parametrize("key", ["max_response_chunks", "max_response_bytes"])
@pytest.mark.parametrize("value", ["0", "-1", '"x"', "1.5", "true"])
def test_bad_limit_is_a_one_line_config_error(tmp_path: Path, key: str, value: str) -> None:
    path = tmp_path / "bench.toml"
    path.write_text(f"[client]\n{key} = {value}\n")
    with pytest.raises(ConfigError) as info:
        load_spec(path)
    message = str(info.value)
    assert message.startswith(f"{path}: key 'client.{key}': expected positive integer, got ")
    assert "\n" not in message


def test_bad_limit_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tokrate.cli import main

    path = tmp_path / "bench.toml"
    path.write_text("[client]\nmax_response_chunks = 0\n")
    assert main(["run", "-c", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"tokrate: error: {path}: key 'client.max_response_chunks': "
        "expected positive integer, got 0\n"
    )


def _rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_rss_stays_bounded_while_an_endless_stream_is_cut(server: HostileServer) -> None:
    # 200k chunks: the stream grew ~190 bytes of RSS per chunk and kept going;
    # here it must stop at the bound, a few seconds in, far under 100 MB.
    before = _rss_bytes()
    rec = cut("fast", endless(server, max_response_chunks=200_000))
    grown = _rss_bytes() - before
    assert rec.error_class == "response_limit"
    assert len(rec.chunk_offsets_s) <= 200_000
    assert grown < 100 * 2**20, f"RSS grew {grown / 2**20:.0f} MiB"
