"""Issue 27: the knobs that exercise a prompt cache on purpose, as they reach the body
(Anthropic cache_control breakpoints, OpenAI prompt_cache_key), the mode run.json
records, and where the simulator puts an Anthropic breakpoint."""

from __future__ import annotations

from typing import Any

import orjson

from tokrate.client.request import RequestSettings, build_request
from tokrate.inputs.prompt_base import Prompt
from tokrate.inputs.targets import Target
from tokrate.physics import count_chat_tokens
from tokrate.sim.prefix_cache import BLOCK_TOKENS, PrefixCache, breakpoint_tokens, chat_block_keys
from tokrate.spec.types import EndpointSpec, ModelSpec

MARK = {"type": "ephemeral"}
SHARED = [
    {"role": "system", "content": "You answer from the manual. " * 40},
    {"role": "user", "content": "How do I reset it?"},
]


def _target(api: str, **model: Any) -> Target:
    return Target(EndpointSpec("e", "http://127.0.0.1:1/v1", api=api), ModelSpec("e", "m", **model))  # type: ignore[arg-type]


def _body(target: Target, prompt: Prompt, tag: str | None = "[ref:1]") -> dict[str, Any]:
    req = build_request(
        target, prompt, RequestSettings(), include_usage=True, unique_prefix=tag, api_key=None
    )
    out: dict[str, Any] = orjson.loads(req.body)
    return out


def _prompt(messages: list[dict[str, Any]], shared: int = 0) -> Prompt:
    return Prompt("p", "chat", tuple(messages), None, 8, 1, "s", shared_messages=shared)


def test_cache_control_marks_the_end_of_the_shared_prefix() -> None:
    on = _target("anthropic", cache_control=True)
    body = _body(on, _prompt(SHARED, shared=1))
    # The shared system text carries the breakpoint; the user's own turn (with the
    # cache-busting tag) does not.
    assert body["system"] == [{"type": "text", "text": SHARED[0]["content"], "cache_control": MARK}]
    assert body["messages"] == [{"role": "user", "content": "[ref:1] How do I reset it?"}]
    # No shared prefix declared: the whole prompt (a session's next turn reads it).
    whole = _body(on, _prompt(SHARED), tag=None)
    assert whole["messages"][-1]["content"] == [
        {"type": "text", "text": "How do I reset it?", "cache_control": MARK}
    ]
    # Off (the default), or another protocol: nothing.
    assert _body(_target("anthropic"), _prompt(SHARED, shared=1))["system"] == SHARED[0]["content"]
    assert "cache_control" not in str(
        _body(_target("chat", cache_control=True), _prompt(SHARED, 1))
    )


def test_prompt_cache_key_rides_in_chat_and_responses_only() -> None:
    for api in ("chat", "responses"):
        body = _body(_target(api, prompt_cache_key="tokrate-manual"), _prompt(SHARED, 1))
        assert body["prompt_cache_key"] == "tokrate-manual"
    assert "prompt_cache_key" not in _body(_target("chat"), _prompt(SHARED, 1))
    anthropic = _body(_target("anthropic", prompt_cache_key="k"), _prompt(SHARED, 1))
    assert "prompt_cache_key" not in anthropic


def test_run_json_names_the_mode() -> None:
    plain = _target("chat")
    assert plain.info("chat").prompt_cache == "unique-prefix"
    assert plain.info("chat", unique_prompts=False).prompt_cache == "as-written"
    both = _target("anthropic", cache_control=True, prompt_cache_key="k")
    assert both.info("chat").prompt_cache == "unique-prefix+cache_control"
    keyed = _target("responses", prompt_cache_key="k")
    assert keyed.info().prompt_cache == "unique-prefix+prompt_cache_key"


def test_the_simulator_caches_only_up_to_the_breakpoint() -> None:
    system = [{"type": "text", "text": "x" * 400, "cache_control": MARK}]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": "y" * 200},
    ]
    # 4 template tokens + 100 content tokens of the system message.
    assert breakpoint_tokens(messages) == 104
    assert breakpoint_tokens([{"role": "user", "content": "y" * 200}]) is None
    total = count_chat_tokens(messages)
    keys = chat_block_keys(messages)
    cache = PrefixCache(1000)
    assert cache.admit(keys, total, 104) == 0
    # The second time, the 6 full blocks before the breakpoint are read, nothing after.
    assert cache.admit(keys, total, 104) == 104 // BLOCK_TOKENS * BLOCK_TOKENS
    assert cache.admit(keys, total, 0) == 0
