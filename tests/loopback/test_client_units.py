"""Pure parts of the client: request bytes, chunk kinds, record formulas, failures;
plus TLS, proxy fallback, cancellation and pool sizing against the loopback server."""

from __future__ import annotations

import asyncio
import datetime
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import uvloop
from helpers.hostile_server import HostileServer
from helpers.requests import prompt, record, req_for, stream_one

from tokrate.client.chunks import ChunkError, classify_chunk
from tokrate.client.factory import open_client
from tokrate.client.failures import snippet, status_class
from tokrate.client.request import (
    RequestSettings,
    build_request,
    new_unique_prefix,
    without_stream_options,
)
from tokrate.client.result import StreamResult
from tokrate.errors import ConfigError, PromptError
from tokrate.inputs.targets import Target
from tokrate.redact import redact_text as redact
from tokrate.spec.types import EndpointSpec, ModelSpec, TimeoutsSpec

# --- request -------------------------------------------------------------------------


def _build(**kw: Any) -> Any:
    model = kw.pop("model", ModelSpec(endpoint="e", name="m"))
    settings = kw.pop("settings", RequestSettings())
    p = kw.pop("prompt", prompt())
    endpoint = EndpointSpec(name="e", base_url="http://127.0.0.1:1/v1/", headers=(("X-A", "1"),))
    args: dict[str, Any] = {"include_usage": True, "unique_prefix": None, "api_key": None, **kw}
    return build_request(Target(endpoint, model), p, settings, **args)


def test_request_body_and_headers() -> None:
    req = _build(
        prompt=prompt(max_tokens=32),
        settings=RequestSettings(ignore_eos=True),
        unique_prefix="[ref:abc]",
        api_key="sk-secret",
    )
    body = orjson.loads(req.body)
    assert req.url == "http://127.0.0.1:1/v1/chat/completions"
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 32 and body["min_tokens"] == 32 and body["ignore_eos"] is True
    assert body["messages"][0]["content"] == "[ref:abc] hi"
    headers = dict(req.headers)
    assert headers["Authorization"] == "Bearer sk-secret" and headers["X-A"] == "1"
    assert "sk-secret" not in repr(req) and "<redacted>" in repr(req)
    assert req.include_usage and req.prompt_id == "p1"
    plain = without_stream_options(req)
    assert "stream_options" not in orjson.loads(plain.body) and not plain.include_usage


def test_request_prompt_max_tokens_extra_body_and_completions() -> None:
    model = ModelSpec(endpoint="e", name="m", extra_body=(("temperature", 0.0), ("seed", 7)))
    body = orjson.loads(_build(model=model, include_usage=False).body)
    assert body["max_tokens"] == 8 and body["temperature"] == 0.0 and body["seed"] == 7
    assert "stream_options" not in body
    legacy = _build(settings=RequestSettings(api="completions"), unique_prefix="[u]")
    assert legacy.url.endswith("/v1/completions")
    assert orjson.loads(legacy.body)["prompt"] == "[u] hi"
    with pytest.raises(ConfigError, match="stream"):
        _build(model=ModelSpec(endpoint="e", name="m", extra_body=(("stream", False),)))
    with pytest.raises(PromptError, match="p1"):
        _build(prompt=prompt(messages=None))


def test_unique_prefix_is_short_and_unique() -> None:
    a, b = new_unique_prefix(), new_unique_prefix()
    assert a != b and len(a) < 24


# --- chunks --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("chunk", "kind", "bearing"),
    [
        ({"choices": [{"delta": {"role": "assistant"}}]}, "empty", False),
        ({"choices": [{"delta": {"content": ""}}]}, "empty", False),
        ({"choices": [{"delta": {"content": "x"}}]}, "content", True),
        ({"choices": [{"delta": {"reasoning_content": "r"}}]}, "reasoning", True),
        ({"choices": [{"delta": {"reasoning": "r"}}]}, "reasoning", True),
        ({"choices": [{"delta": {"tool_calls": [{"index": 0}]}}]}, "tool_call", True),
        ({"choices": [{"delta": {}, "finish_reason": "stop"}]}, "finish", False),
        ({"choices": [], "usage": {"completion_tokens": 3}}, "usage", False),
        ({"usage": {"completion_tokens": 3, "prompt_tokens": 2}}, "usage", False),
        ({"choices": [{"text": "legacy"}]}, "content", True),
        ({"error": {"message": "overloaded", "code": 503}}, "error", False),
    ],
)
def test_chunk_kinds(chunk: dict[str, Any], kind: str, bearing: bool) -> None:
    facts = classify_chunk(chunk)
    assert facts.kind == kind and facts.content_bearing is bearing


@pytest.mark.parametrize(
    "chunk",
    [[], "x", {"id": "no-choices"}, {"choices": {}}, {"choices": ["x"]}, {"usage": []}],
)
def test_bad_chunks(chunk: Any) -> None:
    with pytest.raises(ChunkError):
        classify_chunk(chunk)


# --- records -------------------------------------------------------------------------


def test_build_record_formulas_by_hand() -> None:
    ms = 1_000_000
    t0 = 10_000 * ms
    res = StreamResult(
        client="fast",
        api="chat",
        endpoint="e",
        model="m",
        t0_ns=t0,
        started_at=1.5,
        first_byte_ns=t0 + 50 * ms,
        chunk_ns=(t0 + 100 * ms, t0 + 120 * ms, t0 + 150 * ms),
        first_answer_ns=t0 + 120 * ms,
        end_ns=t0 + 160 * ms,
        reasoning_chunks=1,
        answer_chunks=2,
        usage={"completion_tokens": 7, "prompt_tokens": 30, "reasoning_tokens": 2},
        finish_reason="stop",
        done=True,
        http_status=200,
    )
    rec = record(res, prompt_id="p", task="t", request_index=3, scheduled_s=1.0)
    assert rec.status == "ok" and rec.t0_ns == t0 and rec.started_at == 1.5
    assert rec.first_byte_s == pytest.approx(0.05)
    assert rec.ttft_s == pytest.approx(0.1) and rec.first_answer_s == pytest.approx(0.12)
    assert rec.e2e_s == pytest.approx(0.16)
    assert rec.chunk_offsets_s == pytest.approx((0.1, 0.12, 0.15))
    assert rec.output_tokens == 7 and rec.tokens_source == "usage"
    assert rec.tpot_s == pytest.approx((0.16 - 0.1) / 6)
    assert rec.input_tokens == 30 and rec.reasoning_tokens == 2 and rec.content_chunks == 3
    no_usage = record(
        StreamResult(**{**_fields(res), "usage": None}), request_index=3, input_tokens=25
    )
    assert no_usage.output_tokens == 3 and no_usage.tokens_source == "chunks"
    assert no_usage.tpot_s == pytest.approx((0.16 - 0.1) / 2) and no_usage.input_tokens == 25
    failed = record(
        StreamResult(**{**_fields(res), "error_class": "truncated", "error_message": "cut"}),
        request_index=3,
    )
    assert failed.status == "error" and failed.tpot_s is None and failed.ttft_s is not None


def _fields(res: StreamResult) -> dict[str, Any]:
    return {f: getattr(res, f) for f in res.__slots__}  # type: ignore[attr-defined]


def test_one_token_has_no_tpot() -> None:
    res = StreamResult(
        client="fast",
        api="chat",
        endpoint="e",
        model="m",
        t0_ns=0,
        started_at=0.0,
        chunk_ns=(5,),
        end_ns=9,
        done=True,
    )
    assert record(res).tpot_s is None and record(res).output_tokens == 1


# --- failures ------------------------------------------------------------------------


def test_failure_helpers() -> None:
    assert [status_class(s) for s in (429, 404, 400, 500, 503, 302)] == [
        "http_429",
        "http_4xx",
        "http_4xx",
        "http_5xx",
        "http_5xx",
        "protocol",
    ]
    assert "sk-abcdef" not in redact("key sk-abcdef0123456789 and Bearer tok.en")
    assert redact("Bearer abc") == "Bearer <redacted>"
    assert snippet(b"  a\n\n b \xff ") == "a b \ufffd" and snippet(b"") == "<empty body>"
    assert len(snippet(b"x" * 1000)) == 203


# --- transport behaviour -------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[HostileServer]:
    with HostileServer() as s:
        yield s


def test_cancellation_propagates_with_partial_facts(server: HostileServer) -> None:
    for kind in ("fast", "httpx", "openai"):
        partial: list[StreamResult] = []

        async def main(kind: str = kind, partial: list[StreamResult] = partial) -> None:
            client = open_client(kind, pool_size=1, timeouts=TimeoutsSpec())
            try:
                task = asyncio.ensure_future(
                    client.stream(
                        req_for(server.base_url("ok", tokens=500, itl_ms=10)),
                        on_partial=partial.append,
                    )
                )
                await asyncio.sleep(0.25)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
            finally:
                await client.aclose()

        uvloop.run(main())
        assert len(partial) == 1, kind
        rec = record(partial[0])
        assert rec.status == "cancelled" and rec.error_class == "cancelled", kind
        assert rec.ttft_s is not None and rec.content_chunks > 0, kind


def test_more_streams_than_pool_size_are_not_capped(server: HostileServer) -> None:
    async def main() -> tuple[list[StreamResult], list[str]]:
        client = open_client("fast", pool_size=2, timeouts=TimeoutsSpec())
        try:
            base = server.base_url("ok", tokens=5, itl_ms=30)
            results = await asyncio.gather(*(client.stream(req_for(base)) for _ in range(6)))
            return list(results), list(client.notices)
        finally:
            await client.aclose()

    results, notices = uvloop.run(main())
    assert all(r.ok for r in results)
    starts = sorted(r.chunk_ns[0] for r in results)
    assert starts[-1] - starts[0] < 25_000_000  # all six ran at once, none queued
    assert any("pool_size=2" in n for n in notices)


def test_proxy_env_falls_back_to_httpx(
    server: HostileServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead_proxy = f"http://127.0.0.1:{s.getsockname()[1]}"
    monkeypatch.setenv("HTTP_PROXY", dead_proxy)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)

    async def main() -> tuple[Any, list[str]]:
        client = open_client("fast", pool_size=2, timeouts=TimeoutsSpec())
        try:
            res = await client.stream(req_for(server.base_url("ok", tokens=2)))
        finally:
            await client.aclose()
        return res, list(client.notices)

    res, notices = uvloop.run(main())
    assert res.client == "httpx"  # went through httpx, which honours the proxy
    assert res.error_class == "connect"  # ...and the (dead) proxy refused it
    # The notice becomes one of the run's warnings (the engine forwards client notices).
    assert any("proxy applies" in n for n in notices)


def _self_signed(tmp: Path) -> tuple[Path, Path] | None:
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError:  # pragma: no cover - fall back to the openssl CLI
        cert, key = tmp / "c.pem", tmp / "k.pem"
        cmd = [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ]
        try:
            subprocess.run(cmd, check=True, capture_output=True)
        except (OSError, subprocess.CalledProcessError):
            return None
        return cert, key
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp / "c.pem", tmp / "k.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def test_tls_with_self_signed_cert(tmp_path: Path) -> None:
    pair = _self_signed(tmp_path)
    if pair is None:
        pytest.skip("neither cryptography nor openssl available to make a certificate")
    cert, key = pair
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    trust = ssl.create_default_context(cafile=str(cert))
    with HostileServer(ssl_context=server_ctx) as tls:
        req = req_for(tls.base_url("ok", tokens=4))
        assert req.url.startswith("https://localhost:")
        for kind in ("fast", "httpx", "openai"):

            async def main(kind: str = kind) -> StreamResult:
                client = open_client(kind, pool_size=1, timeouts=TimeoutsSpec(), ssl_context=trust)
                try:
                    return await client.stream(req)
                finally:
                    await client.aclose()

            rec = record(uvloop.run(main()))
            assert rec.status == "ok" and rec.content_chunks == 4, (kind, rec.error_message)
        # Without trusting the certificate: a clear connect error, not a crash.
        untrusted = record(stream_one("fast", req))
        assert untrusted.error_class == "connect"
        assert "CERTIFICATE_VERIFY_FAILED" in (untrusted.error_message or "")


@pytest.mark.parametrize("variable", ["SSL_CERT_FILE", "SSL_CERT_DIR"])
def test_a_private_ca_named_by_ssl_cert_variables_works_in_every_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    """One rule for a private CA (issue 41): SSL_CERT_FILE (a PEM bundle) or
    SSL_CERT_DIR (a hashed folder) is trusted by all three clients (SSL_CERT_DIR
    reached one of them only, and httpx trusted certifi's roots alone otherwise)."""
    pair = _self_signed(tmp_path)
    if pair is None:
        pytest.skip("neither cryptography nor openssl available to make a certificate")
    cert, key = pair
    if variable == "SSL_CERT_DIR":
        done = subprocess.run(
            ["openssl", "x509", "-hash", "-noout", "-in", str(cert)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            pytest.skip("openssl is needed to name a certificate by its hash")
        folder = tmp_path / "certs"
        folder.mkdir()
        (folder / f"{done.stdout.strip()}.0").write_bytes(cert.read_bytes())
        monkeypatch.setenv("SSL_CERT_DIR", str(folder))
        monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    else:
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    with HostileServer(ssl_context=server_ctx) as tls:
        req = req_for(tls.base_url("ok", tokens=3))
        for kind in ("fast", "httpx", "openai"):
            rec = record(stream_one(kind, req))
            assert rec.status == "ok" and rec.content_chunks == 3, (kind, rec.error_message)


def test_an_unreadable_ssl_cert_file_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "missing.pem"))
    with pytest.raises(ConfigError, match=r"^SSL_CERT_FILE=.*missing\.pem: cannot load"):
        open_client("httpx", pool_size=1, timeouts=TimeoutsSpec())
