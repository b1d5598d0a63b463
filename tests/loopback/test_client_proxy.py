"""The proxy path of all three clients (issue 41, item 8): with HTTP_PROXY set, every
client's measured stream goes through the proxy (a real forward proxy on loopback,
tests/helpers/forward_proxy.py, that logs what it relayed). The openai client ignored
the variable for its streams (an explicit httpx transport reads no proxy from the
environment); the fast client hands a proxied origin to the httpx path, with a notice."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from helpers.forward_proxy import ForwardProxy, forward_proxy
from helpers.hostile_server import HostileServer
from helpers.requests import KINDS, record, req_for, stream_one

from tokrate.spec.types import TimeoutsSpec


@pytest.fixture(scope="module")
def server() -> Iterator[HostileServer]:
    with HostileServer() as s:
        yield s


@pytest.fixture
def proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[ForwardProxy]:
    with forward_proxy() as p:
        for name in ("NO_PROXY", "no_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HTTP_PROXY", p.url)
        yield p


@pytest.mark.parametrize("kind", KINDS)
def test_every_client_streams_through_the_proxy(
    server: HostileServer, proxy: ForwardProxy, kind: str
) -> None:
    base = server.base_url("ok", tokens=4)
    res = stream_one(kind, req_for(base), TimeoutsSpec(total_s=30.0))
    rec = record(res)
    assert rec.status == "ok", rec.error_message
    assert rec.output_tokens == 4
    # The fast client speaks no proxy protocol: its proxied requests go through httpx.
    assert rec.client == ("httpx" if kind == "fast" else kind)
    assert ("POST", f"{base}/chat/completions") in proxy.seen, proxy.seen


def test_no_proxy_keeps_the_openai_client_direct(
    server: HostileServer, proxy: ForwardProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    rec = record(stream_one("openai", req_for(server.base_url("ok", tokens=2))))
    assert rec.status == "ok", rec.error_message
    assert proxy.seen == []
