"""The simulator speaks OpenAI's wire protocol: parsed by plain httpx and the openai SDK."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tokrate.physics import count_chat_tokens, count_text_tokens
from tokrate.sim.model import Tier, token_text

MESSAGES: Any = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Say hi ünïcode"},
]


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10) as c:
        yield c


def _sse_events(resp: httpx.Response) -> list[Any]:
    """Every ``data:`` payload of an SSE body: dicts, or the string "[DONE]"."""
    out: list[Any] = []
    for line in resp.iter_lines():
        if line.startswith("data: "):
            payload = line[len("data: ") :]
            out.append(payload if payload == "[DONE]" else json.loads(payload))
        else:
            assert line == "", line
    return out


def test_chat_stream_event_sequence_and_exact_usage(sim_url: str, client: httpx.Client) -> None:
    body = {
        "model": "sim-7b",
        "messages": MESSAGES,
        "stream": True,
        "max_tokens": 6,
        "stream_options": {"include_usage": True},
    }
    with client.stream("POST", f"{sim_url}/chat/completions", json=body) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        events = _sse_events(resp)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    ids = {c["id"] for c in chunks}
    assert len(ids) == 1 and next(iter(ids)).startswith("chatcmpl-")
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == "sim-7b" for c in chunks)
    role, *contents, finish, usage = chunks
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert [c["choices"][0]["delta"]["content"] for c in contents] == [
        token_text(i) for i in range(6)
    ]
    assert all(c["choices"][0]["finish_reason"] is None for c in contents)
    assert finish["choices"][0] == {
        "index": 0,
        "delta": {},
        "logprobs": None,
        "finish_reason": "length",
    }
    assert usage["choices"] == []
    assert usage["usage"] == {
        "prompt_tokens": count_chat_tokens(MESSAGES),
        "completion_tokens": 6,
        "total_tokens": count_chat_tokens(MESSAGES) + 6,
        "completion_tokens_details": {"reasoning_tokens": 0},
    }


def test_no_usage_chunk_unless_asked(sim_url: str, client: httpx.Client) -> None:
    body = {"model": "sim-1b", "messages": MESSAGES, "stream": True, "max_tokens": 3}
    with client.stream("POST", f"{sim_url}/chat/completions", json=body) as resp:
        events = _sse_events(resp)
    assert events[-1] == "[DONE]"
    assert all("usage" not in e for e in events[:-1])
    assert len(events) == 1 + 3 + 1 + 1  # role, 3 tokens, finish, [DONE]


def test_input_token_count_is_the_documented_approximation() -> None:
    assert count_text_tokens("") == 0
    assert count_text_tokens("abcd") == 1
    assert count_text_tokens("abcde") == 2
    assert count_text_tokens("ü") == 1  # 2 UTF-8 bytes
    msgs: Any = [
        {"role": "user", "content": "abcdefgh"},
        {"role": "user", "content": [{"type": "text", "text": "abcd"}]},
    ]
    assert count_chat_tokens(msgs) == 2 + (4 + 2) + (4 + 1)


def test_min_tokens_and_ignore_eos_make_length_exact(sim_url: str, client: httpx.Client) -> None:
    for extra, expected in (
        ({"ignore_eos": True, "max_tokens": 300}, 300),
        ({"min_tokens": 280, "max_tokens": 290}, None),
    ):
        body = {"model": "sim-1b", "messages": MESSAGES, **extra}
        r = client.post(f"{sim_url}/chat/completions", json=body)
        assert r.status_code == 200, r.text
        n = r.json()["usage"]["completion_tokens"]
        if expected is not None:
            assert n == expected
            assert r.json()["choices"][0]["finish_reason"] == "length"
        else:
            assert 280 <= n <= 290


def test_max_completion_tokens_is_honoured(sim_url: str, client: httpx.Client) -> None:
    body = {"model": "sim-1b", "messages": MESSAGES, "max_completion_tokens": 4, "ignore_eos": True}
    r = client.post(f"{sim_url}/chat/completions", json=body)
    data = r.json()
    assert data["object"] == "chat.completion"
    assert data["usage"]["completion_tokens"] == 4
    assert data["choices"][0]["message"] == {
        "role": "assistant",
        "content": "".join(token_text(i) for i in range(4)),
    }


def test_output_length_without_max_tokens_follows_tier_range(
    sim_url: str, client: httpx.Client
) -> None:
    lengths = set()
    for _ in range(8):
        r = client.post(
            f"{sim_url}/chat/completions", json={"model": "sim-1b", "messages": MESSAGES}
        )
        assert r.json()["choices"][0]["finish_reason"] == "stop"
        lengths.add(r.json()["usage"]["completion_tokens"])
    assert all(32 <= n <= 256 for n in lengths) and len(lengths) > 1


def test_text_completions_stream_and_whole(sim_url: str, client: httpx.Client) -> None:
    body = {
        "model": "sim-1b",
        "prompt": "abcdefgh",
        "max_tokens": 3,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with client.stream("POST", f"{sim_url}/completions", json=body) as resp:
        events = _sse_events(resp)
    *contents, finish, usage, done = events
    assert done == "[DONE]"
    assert [c["choices"][0]["text"] for c in contents] == [token_text(i) for i in range(3)]
    assert all(c["object"] == "text_completion" for c in contents)
    assert finish["choices"][0]["finish_reason"] == "length" and finish["choices"][0]["text"] == ""
    assert usage["usage"]["prompt_tokens"] == 2 and usage["usage"]["completion_tokens"] == 3
    r = client.post(
        f"{sim_url}/completions", json={"model": "sim-1b", "prompt": ["abcd"], "max_tokens": 2}
    )
    assert r.json()["choices"][0]["text"] == token_text(0) + token_text(1)


def test_models_list_carries_tier_parameters(sim_url: str, client: httpx.Client) -> None:
    data = client.get(f"{sim_url}/models").json()
    by_id = {m["id"]: m for m in data["data"]}
    assert list(by_id) == ["sim-1b", "sim-7b", "sim-13b", "sim-34b", "sim-70b", "sim-8x7b"]
    moe = by_id["sim-8x7b"]["tokrate"]
    assert (moe["params_b"], moe["active_params_b"], moe["gpus"]) == (46.7, 12.9, 2)
    assert by_id["sim-70b"]["tokrate"]["gpus"] == 2 and by_id["sim-34b"]["tokrate"]["gpus"] == 1
    assert client.get(f"{sim_url}/models/sim-7b").json()["id"] == "sim-7b"
    health = client.get(sim_url.removesuffix("/v1") + "/health")
    assert health.status_code == 200 and health.json()["status"] == "ok"


def test_openai_sdk_parses_streams_and_bodies(sim_url: str) -> None:
    with openai.OpenAI(base_url=sim_url, api_key="sk-unused", max_retries=0) as sdk:
        stream = sdk.chat.completions.create(
            model="sim-13b",
            messages=MESSAGES,
            stream=True,
            max_tokens=5,
            stream_options={"include_usage": True},
        )
        text, usage = [], None
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                text.append(chunk.choices[0].delta.content)
            if chunk.usage is not None:
                usage = chunk.usage
        assert "".join(text) == "".join(token_text(i) for i in range(5))
        assert usage is not None and usage.completion_tokens == 5
        whole = sdk.chat.completions.create(model="sim-7b", messages=MESSAGES, max_tokens=3)
        assert whole.usage is not None and whole.usage.completion_tokens == 3
        comp = sdk.completions.create(model="sim-1b", prompt="hello", max_tokens=2, stream=True)
        assert "".join(c.choices[0].text for c in comp) == token_text(0) + token_text(1)
        assert next(m.id for m in sdk.models.list()) == "sim-1b"


def test_reasoning_tier_emits_reasoning_first(start_sim: Any, tmp_path: Path) -> None:
    tier = Tier("sim-think", 7.0, 7.0, reasoning_tokens=4, kv_heads=8)
    url = start_sim(tiers=(tier,))
    body = {
        "model": "sim-think",
        "messages": MESSAGES,
        "max_tokens": 7,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with httpx.Client() as c, c.stream("POST", f"{url}/chat/completions", json=body) as resp:
        events = _sse_events(resp)
    deltas = [e["choices"][0]["delta"] for e in events[1:-3]]
    assert [d.get("reasoning_content") for d in deltas[:4]] == [token_text(i) for i in range(4)]
    assert all("content" not in d for d in deltas[:4])
    assert [d.get("content") for d in deltas[4:]] == [token_text(i) for i in range(4, 7)]
    assert events[-2]["usage"]["completion_tokens"] == 7
    assert events[-2]["usage"]["completion_tokens_details"]["reasoning_tokens"] == 4
    with openai.OpenAI(base_url=url, api_key="x", max_retries=0) as sdk:
        whole = sdk.chat.completions.create(
            model="sim-think", messages=MESSAGES, max_tokens=6, extra_body={"ignore_eos": True}
        )
        msg = whole.choices[0].message
        assert getattr(msg, "reasoning_content", None) == "".join(token_text(i) for i in range(4))
        assert msg.content == token_text(4) + token_text(5)


def test_tokens_per_chunk_groups_tokens(start_sim: Any) -> None:
    url = start_sim(tiers=(Tier("sim-spec", 7.0, 7.0, tokens_per_chunk=3, kv_heads=8),))
    body = {
        "model": "sim-spec",
        "messages": MESSAGES,
        "max_tokens": 7,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with httpx.Client() as c, c.stream("POST", f"{url}/chat/completions", json=body) as resp:
        events = _sse_events(resp)
    contents = [e["choices"][0]["delta"]["content"] for e in events[1:-3]]
    assert contents == [
        "".join(token_text(i) for i in range(0, 3)),
        "".join(token_text(i) for i in range(3, 6)),
        token_text(6),
    ]
    assert events[-2]["usage"]["completion_tokens"] == 7
