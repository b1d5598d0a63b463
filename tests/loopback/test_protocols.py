"""Protocol shapes the simulator does not produce, over real loopback HTTP on
tests/helpers/protocol_server.py (recorded event sequences): where the prompt goes in
each protocol's body (the simulator's truth log keeps no prompt text), a mid-stream
rate-limit *event* (the simulator sends rate limits as HTTP 429 only), cached-token
usage, Azure deployment URLs, the o-series max_tokens refusal and its resend, chat
tool-call deltas; plus the classifiers alone. TTFT/TPOT against the truth log, the
reasoning split, exact usage, the simulator's faults per protocol and the knobs on the
wire are tests/loopback/test_protocols_sim.py, on the simulator itself."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from helpers.protocol_server import ANSWER, CACHED_TOKENS, INPUT_TOKENS, REASONING, ProtocolServer
from helpers.requests import prompt, record, stream_one

from tokrate.client.events_anthropic import classify_anthropic_event
from tokrate.client.events_responses import classify_responses_event
from tokrate.client.fallbacks import MAX_COMPLETION_NOTE
from tokrate.client.request import PreparedRequest, RequestSettings, build_request
from tokrate.inputs.targets import Target
from tokrate.spec.types import EndpointSpec, ModelSpec

KEY = "sk-test-protocol-key-1234"


@pytest.fixture(scope="module")
def server() -> Iterator[ProtocolServer]:
    with ProtocolServer(itl_ms=5) as s:
        yield s


def _req(base: str, api: str, *, key: str | None = KEY, **endpoint: Any) -> PreparedRequest:
    ep = EndpointSpec(name="e", base_url=base, api=api, **endpoint)  # type: ignore[arg-type]
    messages = (
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
    )
    return build_request(
        Target(ep, ModelSpec(endpoint="e", name="m")),
        prompt(messages=messages, max_tokens=32),
        RequestSettings(),
        include_usage=True,
        unique_prefix=None,
        api_key=key,
    )


def _last(server: ProtocolServer) -> dict[str, Any]:
    return server.requests[-1]


def test_responses_request_on_the_wire(server: ProtocolServer) -> None:
    stream_one("fast", _req(server.url("ok"), "responses"))
    sent = _last(server)
    assert sent["path"] == "/ok/v1/responses"
    body = sent["body"]
    assert body["input"] == [{"role": "user", "content": "hi"}]
    assert body["instructions"] == "be brief"
    assert body["max_output_tokens"] == 32 and body["stream"] is True
    assert "stream_options" not in body and "max_tokens" not in body and "messages" not in body
    assert sent["headers"]["authorization"] == f"Bearer {KEY}"


def test_anthropic_request_on_the_wire(server: ProtocolServer) -> None:
    stream_one("httpx", _req(server.url("ok"), "anthropic"))
    sent = _last(server)
    assert sent["path"] == "/ok/v1/messages"
    body = sent["body"]
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert body["system"] == "be brief" and body["max_tokens"] == 32 and body["stream"] is True
    headers = sent["headers"]
    assert headers["x-api-key"] == KEY and headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in headers


def test_anthropic_version_header_is_overridable(server: ProtocolServer) -> None:
    req = _req(server.url("ok"), "anthropic", headers=(("Anthropic-Version", "2099-01-01"),))
    stream_one("fast", req)
    assert _last(server)["headers"]["anthropic-version"] == "2099-01-01"
    assert [k.lower() for k, _ in req.headers].count("anthropic-version") == 1


@pytest.mark.parametrize(
    ("api", "kind", "words"),
    [
        ("anthropic", "httpx", "rate limit error"),
        ("responses", "httpx", "Rate limit reached"),
        ("responses", "openai", "Rate limit reached"),
    ],
)
def test_mid_stream_rate_limit_events_are_http_429(
    server: ProtocolServer, api: str, kind: str, words: str
) -> None:
    rec = record(stream_one(kind, _req(server.url("rate_limited"), api)))
    assert rec.status == "error" and rec.error_class == "http_429", rec.error_message
    assert rec.error_message is not None and words in rec.error_message
    # What arrived before the error is kept: reasoning plus two answer tokens.
    assert rec.content_chunks == REASONING + 2 and rec.ttft_s is not None


def test_cached_tokens_come_from_the_typed_usage(server: ProtocolServer) -> None:
    for api, kind in (("responses", "fast"), ("anthropic", "httpx")):
        result = stream_one(kind, _req(server.url("ok"), api))
        assert record(result).input_tokens == INPUT_TOKENS, api
        assert result.usage is not None and result.usage["cached_tokens"] == CACHED_TOKENS, api


def test_azure_deployment_url_and_key_header(server: ProtocolServer) -> None:
    for kind in ("fast", "openai"):
        req = _req(server.azure_url("ok"), "chat", kind="azure", api_version="2024-10-21")
        rec = record(stream_one(kind, req))
        assert rec.status == "ok", (kind, rec.error_message)
        sent = _last(server)
        assert sent["path"] == "/ok/openai/deployments/m/chat/completions", kind
        assert sent["query"] == {"api-version": "2024-10-21"}, kind
        assert sent["headers"]["api-key"] == KEY and "authorization" not in sent["headers"], kind


def test_max_tokens_rejected_is_resent_once_with_max_completion_tokens(
    server: ProtocolServer,
) -> None:
    for kind in ("fast", "httpx", "openai"):
        before = len(server.requests)
        result = stream_one(kind, _req(server.url("reject_max_tokens"), "chat"))
        rec = record(result)
        assert rec.status == "ok", (kind, rec.error_message)
        assert MAX_COMPLETION_NOTE in result.notes and result.attempt == 2
        first, second = server.requests[before:]
        assert first["body"]["max_tokens"] == 32
        assert second["body"]["max_completion_tokens"] == 32
        assert "max_tokens" not in second["body"]


def test_model_max_tokens_field_sends_max_completion_tokens_first(server: ProtocolServer) -> None:
    ep = EndpointSpec(name="e", base_url=server.url("reject_max_tokens"))
    model = ModelSpec(endpoint="e", name="o3", max_tokens_field="max_completion_tokens")
    req = build_request(
        Target(ep, model),
        prompt(max_tokens=8),
        RequestSettings(),
        include_usage=True,
        unique_prefix=None,
        api_key=None,
    )
    before = len(server.requests)
    assert record(stream_one("fast", req)).status == "ok"
    (sent,) = server.requests[before:]
    assert sent["body"]["max_completion_tokens"] == 8 and "max_tokens" not in sent["body"]


def test_chat_reasoning_and_tool_call_deltas(server: ProtocolServer) -> None:
    result = stream_one("httpx", _req(server.url("ok"), "chat"))
    assert result.reasoning_chunks == REASONING
    assert result.tool_chunks == 1 and result.answer_chunks == ANSWER - 1
    assert result.usage is not None and result.usage["reasoning_tokens"] == REASONING


# --- the classifiers alone ------------------------------------------------------------


def test_responses_events_classified() -> None:
    def kind(obj: dict[str, Any]) -> str:
        return classify_responses_event(obj).kind

    assert kind({"type": "response.output_text.delta", "delta": "a"}) == "content"
    assert kind({"type": "response.output_text.delta", "delta": ""}) == "empty"
    assert kind({"type": "response.reasoning_text.delta", "delta": "a"}) == "reasoning"
    assert kind({"type": "response.function_call_arguments.delta", "delta": "{"}) == "tool_call"
    assert kind({"type": "response.some_future_event"}) == "empty"
    # The SSE event name stands in when a proxy dropped the data's type.
    assert classify_responses_event({"delta": "a"}, "response.output_text.delta").answer
    incomplete = classify_responses_event(
        {
            "type": "response.incomplete",
            "response": {
                "id": "r",
                "incomplete_details": {"reason": "max_output_tokens"},
                "usage": {"input_tokens": 2, "output_tokens": 7},
            },
        }
    )
    assert incomplete.end_of_stream and incomplete.finish_reason == "length"
    assert incomplete.usage == {"completion_tokens": 7, "prompt_tokens": 2}


def test_anthropic_events_classified() -> None:
    assert classify_anthropic_event({"type": "ping"}).kind == "empty"
    start = classify_anthropic_event(
        {
            "type": "message_start",
            "message": {
                "id": "m1",
                "usage": {
                    "input_tokens": 5,
                    "cache_read_input_tokens": 2,
                    "cache_creation_input_tokens": 1,
                    "output_tokens": 1,
                },
            },
        }
    )
    # Reads and writes of the cache apart (records: cached_tokens, cache_write_tokens).
    assert start.usage == {"prompt_tokens": 8, "cached_tokens": 2, "cache_write_tokens": 1}
    assert start.response_id == "m1"
    sig = {"type": "content_block_delta", "delta": {"type": "signature_delta", "signature": "x"}}
    assert classify_anthropic_event(sig).kind == "empty"
    err = classify_anthropic_event(
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    )
    assert err.error == "Overloaded" and err.error_class == "http_5xx"
    delta = classify_anthropic_event(
        {
            "type": "message_delta",
            "delta": {"stop_reason": "max_tokens"},
            "usage": {"output_tokens": 9},
        }
    )
    assert delta.finish_reason == "length" and delta.usage == {"completion_tokens": 9}


def test_a_cut_anthropic_stream_does_not_invent_an_output_count() -> None:
    from tokrate.client.accumulate import StreamState

    state = StreamState(api="anthropic")
    frames = [
        {
            "type": "message_start",
            "message": {"id": "m", "usage": {"input_tokens": 3, "output_tokens": 1}},
        },
        {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "a"}},
    ]
    data = b"".join(b"event: x\ndata: " + orjson.dumps(f) + b"\n\n" for f in frames)
    assert not state.feed(data, 1)
    state.finish(2)
    result = state.result(
        client="fast", api="anthropic", endpoint="e", model="m", t0_ns=0, started_at=0.0
    )
    assert result.error_class == "truncated" and result.usage is None
    assert record(result).tokens_source == "chunks" and record(result).output_tokens == 1


@pytest.mark.parametrize(
    ("error", "error_class"),
    [
        ({"message": "boom", "type": "server_error", "code": None}, "http_5xx"),
        ({"message": "slow down", "type": "requests", "code": "rate_limit_exceeded"}, "http_429"),
        ({"message": "odd", "type": "x"}, "protocol"),
        ({"message": "gone", "code": 503}, "http_5xx"),
    ],
)
def test_chat_in_band_errors_take_the_same_classes(error: dict[str, Any], error_class: str) -> None:
    from tokrate.client.accumulate import StreamState

    state = StreamState(api="chat")
    assert state.feed(b"data: " + orjson.dumps({"error": error}) + b"\n\n", 1)
    assert state.error_class == error_class


def test_responses_text_parts_become_input_text(server: ProtocolServer) -> None:
    ep = EndpointSpec(name="e", base_url=server.url("ok"), api="responses")
    parts = ({"role": "user", "content": [{"type": "text", "text": "hi"}]},)
    req = build_request(
        Target(ep, ModelSpec(endpoint="e", name="m")),
        prompt(messages=parts),
        RequestSettings(),
        include_usage=True,
        unique_prefix="[ref:1]",
        api_key=None,
    )
    assert orjson.loads(req.body)["input"] == [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "[ref:1]"},
                {"type": "input_text", "text": "hi"},
            ],
        }
    ]
