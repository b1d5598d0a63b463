"""The simulator speaks Anthropic Messages: headers, strict event shapes, usage, faults.

The anthropic SDK is not a dependency, so the stream is read with plain httpx and
checked against the documented event grammar key by key (no extra, no missing keys).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers.sim_wire import STRADDLER, truth_rows, words
from helpers.sse_stamps import StampedStream, is_token_event, stream_stamped

from tokrate.physics import count_chat_tokens

VERSION = {"anthropic-version": "2023-06-01"}
THINK = {"type": "enabled", "budget_tokens": 1024}
USAGE_KEYS = {
    "input_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "output_tokens",
}
MESSAGE_KEYS = {"id", "type", "role", "model", "content", "stop_reason", "stop_sequence", "usage"}
BLOCK_KEYS = {"thinking": {"type", "thinking", "signature"}, "text": {"type", "text"}}
DELTA_KEYS = {
    "text_delta": {"type", "text"},
    "thinking_delta": {"type", "thinking"},
    "signature_delta": {"type", "signature"},
}


def _check_event(d: dict[str, Any]) -> None:
    """One event's exact keys and value types, per the documented shapes."""
    kind = d["type"]
    if kind == "message_start":
        assert set(d) == {"type", "message"}
        m = d["message"]
        assert set(m) == MESSAGE_KEYS and set(m["usage"]) == USAGE_KEYS
        assert m["type"] == "message" and m["role"] == "assistant" and m["content"] == []
        assert m["stop_reason"] is None and m["id"].startswith("msg_")
    elif kind == "content_block_start":
        assert set(d) == {"type", "index", "content_block"}
        block = d["content_block"]
        assert set(block) == BLOCK_KEYS[block["type"]]
        assert all(v == "" for k, v in block.items() if k != "type")
    elif kind == "content_block_delta":
        assert set(d) == {"type", "index", "delta"}
        assert set(d["delta"]) == DELTA_KEYS[d["delta"]["type"]]
        assert all(isinstance(v, str) and v for v in d["delta"].values())
    elif kind == "content_block_stop":
        assert set(d) == {"type", "index"}
    elif kind in ("ping", "message_stop"):
        assert set(d) == {"type"}
    elif kind == "message_delta":
        assert set(d) == {"type", "delta", "usage"}
        assert set(d["delta"]) == {"stop_reason", "stop_sequence"}
        assert d["delta"]["stop_reason"] in ("end_turn", "max_tokens")
        assert set(d["usage"]) == {"output_tokens"}
    elif kind == "error":
        assert set(d) == {"type", "error"} and set(d["error"]) == {"type", "message"}
    else:
        raise AssertionError(f"unknown event {kind!r}")


def _strict(stream: StampedStream) -> list[dict[str, Any]]:
    """Shapes plus grammar: message_start first; each block start, deltas of its own
    index, stop, indexes counting from 0; a signature only at a thinking block's end;
    message_delta then message_stop last (or an error event ending the stream)."""
    assert stream.status == 200
    assert all(e.name is not None for e in stream.events)  # every event is named
    datas = [e.data for e in stream.events]
    for d in datas:
        _check_event(d)
    assert datas[0]["type"] == "message_start"
    open_block: dict[str, Any] | None = None
    next_index = 0
    for i, d in enumerate(datas[1:], 1):
        kind = d["type"]
        if kind == "content_block_start":
            assert open_block is None and d["index"] == next_index
            open_block, next_index = d["content_block"], next_index + 1
        elif kind == "content_block_delta":
            assert open_block is not None and d["index"] == next_index - 1
            want = {"text": ("text_delta",), "thinking": ("thinking_delta", "signature_delta")}
            assert d["delta"]["type"] in want[open_block["type"]]
            if d["delta"]["type"] == "signature_delta":
                assert datas[i + 1]["type"] == "content_block_stop"
        elif kind == "content_block_stop":
            assert open_block is not None and d["index"] == next_index - 1
            if open_block["type"] == "thinking":
                assert datas[i - 1]["delta"]["type"] == "signature_delta"
            open_block = None
        elif kind == "message_delta":
            assert open_block is None and [x["type"] for x in datas[i + 1 :]] == ["message_stop"]
        elif kind == "error":
            assert i == len(datas) - 1
    return datas


def test_thinking_then_text_exact_usage_andtruth_rows(
    thinker: tuple[str, Path], http_client: httpx.Client
) -> None:
    url, log = thinker
    body = {
        "model": "sim-thinker",
        "max_tokens": 2048,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Say hi"}]}],
        "thinking": THINK,
        "stream": True,
    }
    stream = stream_stamped(http_client, f"{url}/messages", body, VERSION)
    assert stream.headers["content-type"].startswith("text/event-stream")
    datas = _strict(stream)
    kinds = [d["type"] for d in datas]
    assert kinds == [
        "message_start",
        "ping",
        "content_block_start",
        *["content_block_delta"] * 5,
        "content_block_stop",
        "content_block_start",
        *["content_block_delta"] * 6,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    thinking = "".join(
        d["delta"].get("thinking", "") for d in datas if d["type"] == "content_block_delta"
    )
    text = "".join(d["delta"].get("text", "") for d in datas if d["type"] == "content_block_delta")
    assert (thinking, text) == (words(0, 4), words(4, 10))
    prompt = [{"role": "system", "content": "Be brief."}, body["messages"][0]]
    assert datas[0]["message"]["usage"]["input_tokens"] == count_chat_tokens(prompt)
    assert datas[-2]["usage"]["output_tokens"] == 10
    assert datas[-2]["delta"]["stop_reason"] == "end_turn"
    (row,) = truth_rows(log)
    assert row["id"] == datas[0]["message"]["id"] and row["protocol"] == "messages"
    assert (row["output_tokens"], row["reasoning_tokens"]) == (10, 4)
    assert len(row["content_write_ns"]) == sum(is_token_event(e) for e in stream.events) == 10


def test_without_thinking_no_reasoning_phase(
    thinker: tuple[str, Path], http_client: httpx.Client
) -> None:
    url, log = thinker
    body = {
        "model": "sim-thinker",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "hi"}],
    }
    datas = _strict(
        stream_stamped(http_client, f"{url}/messages", {**body, "stream": True}, VERSION)
    )
    blocks = [d["content_block"]["type"] for d in datas if d["type"] == "content_block_start"]
    assert blocks == ["text"]
    assert truth_rows(log)[0]["reasoning_tokens"] == 0


def test_max_tokens_stop_reason(start_sim: Callable[..., str], http_client: httpx.Client) -> None:
    url = start_sim()
    body = {
        "model": "sim-1b",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
    }
    datas = _strict(stream_stamped(http_client, f"{url}/messages", body, VERSION))
    assert datas[-2]["delta"]["stop_reason"] == "max_tokens"
    assert datas[-2]["usage"]["output_tokens"] == 5


def test_non_streaming_message(thinker: tuple[str, Path], http_client: httpx.Client) -> None:
    url, log = thinker
    body = {
        "model": "sim-thinker",
        "max_tokens": 2048,
        "thinking": THINK,
        "messages": [{"role": "user", "content": "hi"}],
    }
    resp = http_client.post(f"{url}/messages", json=body, headers=VERSION)
    assert resp.status_code == 200
    m = resp.json()
    assert set(m) == MESSAGE_KEYS and set(m["usage"]) == USAGE_KEYS
    assert [b["type"] for b in m["content"]] == ["thinking", "text"]
    assert m["content"][0]["thinking"] == words(0, 4) and m["content"][0]["signature"]
    assert m["content"][1] == {"type": "text", "text": words(4, 10)}
    assert m["stop_reason"] == "end_turn" and m["usage"]["output_tokens"] == 10
    assert truth_rows(log)[0]["protocol"] == "messages"


def _error(resp: httpx.Response, status: int, type_: str) -> str:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"type", "error", "request_id"} and body["type"] == "error"
    assert body["error"]["type"] == type_ and resp.headers["request-id"] == body["request_id"]
    return str(body["error"]["message"])


def test_headers(start_sim: Callable[..., str], http_client: httpx.Client) -> None:
    url = start_sim(api_key="sk-ant-sim")
    body = {"model": "sim-1b", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    key = {"x-api-key": "sk-ant-sim"}
    post = f"{url}/messages"
    assert "x-api-key" in _error(
        http_client.post(post, json=body, headers=VERSION), 401, "authentication_error"
    )
    bearer = {**VERSION, "Authorization": "Bearer sk-ant-sim"}
    _error(http_client.post(post, json=body, headers=bearer), 401, "authentication_error")
    wrong = {**VERSION, "x-api-key": "sk-ant-other"}
    assert "sk-ant-other" not in _error(
        http_client.post(post, json=body, headers=wrong), 401, "authentication_error"
    )
    msg = _error(http_client.post(post, json=body, headers=key), 400, "invalid_request_error")
    assert "anthropic-version" in msg
    bad_version = {**key, "anthropic-version": "2099-01-01"}
    _error(http_client.post(post, json=body, headers=bad_version), 400, "invalid_request_error")
    assert http_client.post(post, json=body, headers={**key, **VERSION}).status_code == 200
    # GET /v1/models takes either kind of key, so an Anthropic-style client can check models
    assert http_client.get(f"{url}/models", headers=key).status_code == 200
    assert http_client.get(f"{url}/models", headers=wrong).status_code == 401


@pytest.mark.parametrize(
    ("body", "status", "type_", "needle"),
    [
        (
            {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8},
            400,
            "invalid_request_error",
            "model",
        ),
        (
            {"model": "sim-1b", "messages": [{"role": "user", "content": "hi"}]},
            400,
            "invalid_request_error",
            "max_tokens",
        ),
        ({"model": "sim-1b", "max_tokens": 8}, 400, "invalid_request_error", "messages"),
        (
            {"model": "sim-1b", "max_tokens": 8, "messages": [{"role": "system", "content": "x"}]},
            400,
            "invalid_request_error",
            "role",
        ),
        (
            {"model": "nope", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]},
            404,
            "not_found_error",
            "nope",
        ),
        (
            {
                "model": "sim-1b",
                "max_tokens": 2000,
                "thinking": {"type": "enabled", "budget_tokens": 1000},
                "messages": [{"role": "user", "content": "x"}],
            },
            400,
            "invalid_request_error",
            "budget_tokens",
        ),
        (
            {
                "model": "sim-1b",
                "max_tokens": 1024,
                "thinking": THINK,
                "messages": [{"role": "user", "content": "x"}],
            },
            400,
            "invalid_request_error",
            "max_tokens",
        ),
        (
            {"model": "sim-1b", "max_tokens": 9000, "messages": [{"role": "user", "content": "x"}]},
            400,
            "invalid_request_error",
            "context limit",
        ),
    ],
)
def test_bad_requests_get_anthropic_errors(
    sim_url: str,
    http_client: httpx.Client,
    body: dict[str, Any],
    status: int,
    type_: str,
    needle: str,
) -> None:
    assert needle in _error(
        http_client.post(f"{sim_url}/messages", json=body, headers=VERSION), status, type_
    )


@pytest.mark.parametrize(
    ("fault", "status", "type_"),
    [
        ("http_500", 500, "api_error"),
        ("http_429", 429, "rate_limit_error"),
        ("http_503", 529, "overloaded_error"),
    ],
)
def test_http_faults_use_anthropic_statuses(
    start_sim: Callable[..., str],
    http_client: httpx.Client,
    tmp_path: Path,
    fault: str,
    status: int,
    type_: str,
) -> None:
    log = tmp_path / "truth.jsonl"
    url = start_sim(
        faults=f"{fault}=1:retry_after=2" if fault == "http_429" else f"{fault}=1",
        truth_log=str(log),
    )
    body = {
        "model": "sim-1b",
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "x"}],
        "stream": True,
    }
    resp = http_client.post(f"{url}/messages", json=body, headers=VERSION)
    _error(resp, status, type_)
    if fault == "http_429":
        assert resp.headers["retry-after"] == "2"
    (row,) = truth_rows(log)
    assert (row["protocol"], row["fault"], row["output_tokens"]) == ("messages", fault, 0)


def test_stream_error_fault_is_an_overloaded_error_event(
    start_sim: Callable[..., str], http_client: httpx.Client, tmp_path: Path
) -> None:
    log = tmp_path / "truth.jsonl"
    url = start_sim(faults="stream_error=1:at=0.5", truth_log=str(log))
    body = {
        "model": "sim-1b",
        "max_tokens": 20,
        "ignore_eos": True,
        "stream": True,
        "messages": [{"role": "user", "content": "x"}],
    }
    datas = _strict(stream_stamped(http_client, f"{url}/messages", body, VERSION))
    assert sum(d["type"] == "content_block_delta" for d in datas) == 10
    assert datas[-1] == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
    }
    assert "message_stop" not in [d["type"] for d in datas]
    (row,) = truth_rows(log)
    assert (row["fault"], row["output_tokens"]) == ("stream_error", 10)


def test_chunk_straddling_thinking_and_text(
    start_sim: Callable[..., str], http_client: httpx.Client
) -> None:
    url = start_sim(tiers=(STRADDLER,), time_scale=1.0)
    body = {
        "model": "sim-straddler",
        "max_tokens": 2048,
        "thinking": THINK,
        "stream": True,
        "messages": [{"role": "user", "content": "x"}],
    }
    datas = _strict(stream_stamped(http_client, f"{url}/messages", body, VERSION))
    deltas = [d["delta"] for d in datas if d["type"] == "content_block_delta"]
    assert [
        (d["type"], d.get("thinking", d.get("text"))) for d in deltas if "signature" not in d
    ] == [
        ("thinking_delta", words(0, 4)),
        ("thinking_delta", words(4, 6)),
        ("text_delta", words(6, 8)),
        ("text_delta", words(8, 12)),
        ("text_delta", words(12, 16)),
    ]
    assert datas[-2]["usage"]["output_tokens"] == 16
