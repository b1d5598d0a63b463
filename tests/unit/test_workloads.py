"""Workload pieces without a server: the prefix cache's blocks, generated sessions,
grids and shared prefixes, trace and conversation parsing, request building for them,
and the client keeping answer text only when asked."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest

from tokrate.client.accumulate import StreamState
from tokrate.client.request import (
    RequestSettings,
    build_request,
    new_unique_prefix,
    without_stream_options,
)
from tokrate.errors import ConfigError, PromptError
from tokrate.inputs.prompt_base import Prompt
from tokrate.inputs.prompts import load_prompts
from tokrate.inputs.targets import Target
from tokrate.inputs.traces import parse_sharegpt
from tokrate.inputs.workloads import UNIQUE_TAG_TOKENS, grid_prompts, session_prompts
from tokrate.physics import count_chat_tokens, count_text_tokens
from tokrate.sim.prefix_cache import BLOCK_TOKENS, PrefixCache, chat_block_keys, text_block_keys
from tokrate.spec.config_file import load_spec
from tokrate.spec.types import (
    EndpointSpec,
    GridSpec,
    ModelSpec,
    PromptsSpec,
    SessionsSpec,
    SharedPrefixSpec,
)

TARGET = Target(EndpointSpec("e", "http://127.0.0.1:1/v1"), ModelSpec("e", "m"))


def _body(p: Prompt, *, tag: str | None = None, **settings: Any) -> dict[str, Any]:
    req = build_request(
        TARGET, p, RequestSettings(**settings), include_usage=False, unique_prefix=tag, api_key=None
    )
    out: dict[str, Any] = orjson.loads(req.body)
    return out


# --- simulator prefix cache -----------------------------------------------------------


def _messages(rng: random.Random, n: int) -> list[dict[str, str]]:
    words = ("alpha", "beta", "gamma", "délta", "ε", "zeta")
    return [
        {
            "role": rng.choice(("system", "user", "assistant")),
            "content": " ".join(rng.choice(words) for _ in range(rng.randint(0, 300))),
        }
        for _ in range(n)
    ]


def test_blocks_follow_the_simulators_token_count() -> None:
    rng = random.Random(1)
    for _ in range(50):
        msgs = _messages(rng, rng.randint(1, 5))
        assert len(chat_block_keys(msgs)) == count_chat_tokens(msgs) // BLOCK_TOKENS
        text = msgs[0]["content"]
        assert len(text_block_keys(text)) == count_text_tokens(text) // BLOCK_TOKENS


def test_cache_serves_only_a_matching_prefix_and_stays_bounded() -> None:
    cache = PrefixCache(capacity_blocks=100)
    base = [{"role": "user", "content": "x" * 4000}]  # 1006 tokens: 62 full blocks
    keys = chat_block_keys(base)
    assert cache.admit(keys, 1006) == 0
    assert cache.admit(keys, 1006) == 62 * BLOCK_TOKENS
    longer = [*base, {"role": "assistant", "content": "y" * 400}]
    # The reply's priming tokens sat where the new message starts: the last block differs.
    assert cache.admit(chat_block_keys(longer), count_chat_tokens(longer)) == 62 * BLOCK_TOKENS
    changed = [{"role": "user", "content": "z" + "x" * 3999}]
    assert cache.admit(chat_block_keys(changed), 1006) == 0
    assert len(cache) <= 100
    # Everything cached: one token is still prefilled.
    tiny = PrefixCache(10)
    exact = [{"role": "user", "content": "q" * 40}]  # 16 tokens = one block
    tiny.admit(chat_block_keys(exact), 16)
    assert tiny.admit(chat_block_keys(exact), 16) == 15
    assert tiny.hit_tokens == 15 and tiny.lookup_tokens == 32


def test_lru_evicts_the_oldest_blocks() -> None:
    cache = PrefixCache(capacity_blocks=62)
    a = chat_block_keys([{"role": "user", "content": "a" * 4000}])
    b = chat_block_keys([{"role": "user", "content": "b" * 4000}])
    cache.admit(a, 1006)
    cache.admit(b, 1006)
    assert cache.admit(a, 1006) == 0  # b pushed every block of a out


# --- generated workloads ----------------------------------------------------------------


@pytest.mark.parametrize("reserve", [0, UNIQUE_TAG_TOKENS])
def test_grid_prompts_are_exact_with_and_without_the_tag(reserve: int) -> None:
    prompts = grid_prompts(GridSpec((12, 128, 8192), (1, 64), count=2), reserve_tokens=reserve)
    assert len(prompts) == 3 * 2 * 2
    assert len({p.task for p in prompts}) == 6
    for p in prompts:
        n_in, n_out = (
            int(x[2:]) if x.startswith("in") else int(x[3:]) for x in p.task.split("-")[1:]
        )
        body = _body(p, tag=new_unique_prefix() if reserve else None)
        assert count_chat_tokens(body["messages"]) == n_in
        assert body["max_tokens"] == n_out == body["min_tokens"] and body["ignore_eos"] is True


def test_grid_refuses_lengths_below_the_template() -> None:
    with pytest.raises(PromptError, match=r"grid\.input_tokens: 8 is below the 12"):
        grid_prompts(GridSpec((8,), (4,)), reserve_tokens=UNIQUE_TAG_TOKENS)


def test_unique_tag_costs_exactly_its_tokens() -> None:
    assert len(new_unique_prefix()) + 1 == 19  # "[ref:" + 12 hex + "] "
    assert count_text_tokens(new_unique_prefix() + " " + "abcd" * 10) == 10 + UNIQUE_TAG_TOKENS


def test_generated_sessions() -> None:
    spec = SessionsSpec(
        count=3, turns=5, input_tokens=100, output_tokens=9, system_tokens=20, think_time_s=1.5
    )
    sessions = session_prompts(spec)
    assert len(sessions) == 3 and len({json.dumps(s.messages) for s in sessions}) == 3
    for s in sessions:
        assert s.is_session and len(s.turns) == 4 and s.think_time_s == 1.5
        assert s.messages is not None and s.messages[0]["role"] == "system"
        assert count_chat_tokens(s.messages) == 100 + 20
        for t in s.turns:
            assert count_text_tokens(t.user) + 4 == 100 and t.max_tokens == 9
    with pytest.raises(PromptError, match="system_tokens"):
        session_prompts(replace(spec, system_tokens=3))


def test_shared_prefix_workload_tags_after_the_prefix() -> None:
    prompts = load_prompts(
        PromptsSpec(
            shared_prefix=SharedPrefixSpec(
                prefix_tokens=256, input_tokens=32, output_tokens=8, count=4
            )
        )
    )
    shared = [p for p in prompts if p.task == "shared-prefix"]
    control = [p for p in prompts if p.task == "unique-prefix"]
    assert len(shared) == len(control) == 4
    bodies = [_body(p, tag=new_unique_prefix()) for p in prompts]
    for body in bodies:
        assert count_chat_tokens(body["messages"]) == 256 + 32 + UNIQUE_TAG_TOKENS
        assert body["messages"][1]["content"].startswith("[ref:")  # after the prefix
    systems = [b["messages"][0]["content"] for b in bodies]
    assert len(set(systems[:4])) == 1 and len(set(systems[4:])) == 4
    firsts = {chat_block_keys(b["messages"][:1])[0] for b in bodies[4:]}
    assert len(firsts) == 4  # no two control prefixes share even their first block


# --- files --------------------------------------------------------------------------------


def _write(tmp_path: Path, name: str, text: str) -> str:
    (tmp_path / name).write_text(text, encoding="utf-8")
    return name


def test_conversation_file_and_max_tokens_override(tmp_path: Path) -> None:
    lines = [
        {
            "id": "s1",
            "system": "Be terse.",
            "turns": [{"user": "Hi"}, "Then?"],
            "max_tokens": 7,
            "think_time_s": 2,
        },
        {"turns": ["only one"]},
        {"prompt": "an ordinary prompt"},
    ]
    name = _write(tmp_path, "conv.jsonl", "\n".join(json.dumps(x) for x in lines))
    s1, s2, plain = load_prompts(PromptsSpec(paths=(name,), think_time_s=0.5), base_dir=tmp_path)
    assert s1.messages == (
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "Hi"},
    )
    assert [t.user for t in s1.turns] == ["Then?"] and s1.turns[0].max_tokens == 7
    assert s1.think_time_s == 2.0 and s2.think_time_s == 0.5 and s2.id == "conv:2"
    assert not s2.is_session and not plain.is_session  # one turn is an ordinary prompt
    capped = load_prompts(PromptsSpec(paths=(name,), max_tokens=3), base_dir=tmp_path)
    assert capped[0].max_tokens == 3 and capped[0].turns[0].max_tokens == 3


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ({"turns": []}, "conv.jsonl line 1: 'turns' must be a non-empty list"),
        ({"turns": [5]}, "turns[0]: a turn must be a string or an object with 'user'"),
        ({"turns": [{"user": ""}]}, "turns[0]: 'user' must be a non-empty string"),
        ({"turns": ["a"], "think_time_s": -1}, "'think_time_s' must be a number >= 0"),
        ({"custom_id": "x", "body": []}, "conv.jsonl line 1: 'body' must be an object"),
        ({"custom_id": "x", "body": {"messages": [], "max_tokens": 3}}, "non-empty list"),
        ({"custom_id": "x", "body": {"prompt": "p", "max_tokens": 0}}, "positive integer"),
        ({"prompt": "p", "shared_messages": -1}, "'shared_messages' must be an integer >= 0"),
    ],
)
def test_bad_lines_name_file_and_line(tmp_path: Path, line: object, message: str) -> None:
    name = _write(tmp_path, "conv.jsonl", json.dumps(line))
    with pytest.raises(PromptError) as err:
        load_prompts(PromptsSpec(paths=(name,)), base_dir=tmp_path)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_openai_batch_file(tmp_path: Path) -> None:
    lines = [
        {
            "custom_id": "r1",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {
                "model": "gpt-4o",
                "messages": [{"role": "user", "content": "hey"}],
                "max_tokens": 40,
            },
        },
        {
            "custom_id": "r2",
            "method": "POST",
            "url": "/v1/completions",
            "body": {"model": "x", "prompt": "complete me", "max_completion_tokens": 5},
        },
    ]
    name = _write(tmp_path, "batch.jsonl", "\n".join(json.dumps(x) for x in lines))
    for fmt in ("auto", "openai-batch"):
        r1, r2 = load_prompts(PromptsSpec(paths=(name,), format=fmt), base_dir=tmp_path)  # type: ignore[arg-type]
        assert (r1.id, r1.max_tokens, r1.task) == ("r1", 40, "batch")
        assert (r2.id, r2.prompt, r2.max_tokens) == ("r2", "complete me", 5)
    other = _write(tmp_path, "p.jsonl", json.dumps({"prompt": "x"}))
    with pytest.raises(PromptError, match=r"p\.jsonl line 1: 'body' must be an object"):
        load_prompts(PromptsSpec(paths=(other,), format="openai-batch"), base_dir=tmp_path)


def test_sharegpt_file(tmp_path: Path) -> None:
    data = [
        {
            "id": "a",
            "conversations": [
                {"from": "system", "value": "sys"},
                {"from": "human", "value": "q1"},
                {"from": "gpt", "value": "r" * 41},
                {"from": "human", "value": "q2"},
            ],
        },
        {"conversations": [{"from": "human", "value": "unanswered"}]},
        {"conversations": [{"from": "gpt", "value": "starts with gpt"}]},
        {
            "id": 9,
            "conversations": [{"from": "human", "value": "x"}, {"from": "gpt", "value": "y"}],
        },
    ]
    name = _write(tmp_path, "sg.json", json.dumps(data))
    a, b = load_prompts(PromptsSpec(paths=(name,)), base_dir=tmp_path)
    assert a.messages == ({"role": "system", "content": "sys"}, {"role": "user", "content": "q1"})
    assert (a.id, a.max_tokens, a.task) == ("a", 11, "sg") and (b.id, b.max_tokens) == ("9", 1)
    with pytest.raises(PromptError, match="no conversation with a human message"):
        parse_sharegpt(b'[{"conversations": []}]', "e.json")
    with pytest.raises(PromptError, match=r"entry 0: conversations\[0\]\.from 'robot' unknown"):
        parse_sharegpt(b'[{"conversations": [{"from": "robot", "value": "x"}]}]', "e.json")
    with pytest.raises(PromptError, match="a ShareGPT file is a JSON list"):
        parse_sharegpt(b'{"a": 1}', "e.json")


def test_spec_keys_and_their_bounds(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text(
        "[prompts]\ngrid = {input_tokens = [128, 8192], output_tokens = [64]}\n"
        "sessions = {turns = 3, think_time_s = 0.5}\n"
        "[simulator]\nprefix_cache = true\n",
        encoding="utf-8",
    )
    spec = load_spec(good)
    assert spec.prompts.grid is not None and spec.prompts.grid.input_tokens == (128, 8192)
    assert spec.prompts.sessions is not None and spec.prompts.sessions.turns == 3
    assert spec.simulator.prefix_cache is True
    bad = tmp_path / "bad.toml"
    bad.write_text("[prompts]\nsessions = {turns = 0}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"sessions\.turns"):
        load_spec(bad)


# --- request and client ---------------------------------------------------------------


def test_tag_after_shared_messages_and_exact_output() -> None:
    msgs = ({"role": "system", "content": "S"}, {"role": "user", "content": "Q"})
    p = Prompt("p", "t", msgs, None, 4, 9, "test", shared_messages=1, exact_output=True)
    body = _body(p, tag="[t]")
    assert body["messages"] == [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "[t] Q"},
    ]
    assert body["ignore_eos"] is True and body["min_tokens"] == 4
    legacy = _body(p, tag="[t]", api="completions")
    assert legacy["prompt"] == "S\n\n[t] Q"
    assert _body(replace(p, shared_messages=0), tag="[t]")["messages"][0]["content"] == "[t] S"


def test_answer_text_is_kept_only_when_asked() -> None:
    chunks = [
        {"choices": [{"delta": {"role": "assistant"}}]},
        {"choices": [{"delta": {"content": "Hel"}}]},
        {"choices": [{"delta": {"reasoning_content": "hmm"}}]},
        {"choices": [{"delta": {"content": "lo"}, "finish_reason": "stop"}]},
    ]
    for keep in (True, False):
        state = StreamState(keep_text=keep)
        for i, c in enumerate(chunks):
            state.feed_chunk(c, i)
        state.finish(9)
        result = state.result(
            client="fast", api="chat", endpoint="e", model="m", t0_ns=0, started_at=0.0
        )
        assert result.answer_text == ("Hello" if keep else None)
    legacy = StreamState(keep_text=True)
    legacy.feed_chunk({"choices": [{"text": "abc"}]}, 1)
    assert legacy.answer_parts == ["abc"]
    req = build_request(
        TARGET,
        Prompt("p", "t", None, "x", 3, 1, "s"),
        RequestSettings(),
        include_usage=True,
        unique_prefix=None,
        api_key=None,
        keep_text=True,
    )
    assert req.keep_text and without_stream_options(req).keep_text
