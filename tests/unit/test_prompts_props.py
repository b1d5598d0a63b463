"""Fuzzing prompt files: any bytes, any JSON line gives prompts or one PromptError line
naming the file, never another exception."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tokrate.errors import PromptError
from tokrate.inputs.prompt_base import estimate_input_tokens
from tokrate.inputs.prompts import parse_jsonl, parse_text

json_values = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=10)
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(
            st.sampled_from(["role", "content", "type", "text", "x"]), inner, max_size=3
        ),
    ),
    max_leaves=10,
)
lines = st.dictionaries(
    st.sampled_from(["id", "task", "messages", "prompt", "max_tokens", "extra"]),
    json_values,
    max_size=5,
)


def check(fn: Any, data: bytes, name: str) -> None:
    try:
        prompts = fn(data, name)
    except PromptError as err:
        message = str(err)
        assert message.startswith(name) and "\n" not in message, message
    else:
        assert prompts
        for p in prompts:
            assert (p.messages is None) != (p.prompt is None)
            assert p.input_tokens_est == estimate_input_tokens(p.messages, p.prompt)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_as_jsonl_or_text(data: bytes) -> None:
    check(parse_jsonl, data, "f.jsonl")
    check(parse_text, data, "f.txt")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(lines, json_values), min_size=1, max_size=5))
def test_any_json_lines(objs: list[Any]) -> None:
    data = "\n".join(json.dumps(o) for o in objs).encode()
    check(parse_jsonl, data, "g.jsonl")
    raw = "\n".join(json.dumps(o, ensure_ascii=False) for o in objs).encode()
    check(parse_jsonl, raw, "g.jsonl")


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(max_size=40), min_size=1, max_size=5), st.integers(0, 3))
def test_bad_line_number_is_exact(good: list[str], extra_blank: int) -> None:
    rows = (
        [json.dumps({"prompt": t if t.strip() else "x"}) for t in good]
        + [""] * extra_blank
        + ["{oops"]
    )
    n = len(rows)
    try:
        parse_jsonl("\n".join(rows).encode(), "h.jsonl")
    except PromptError as err:
        assert str(err).startswith(f"h.jsonl line {n}: invalid JSON"), str(err)
    else:  # pragma: no cover - the last line is never valid
        raise AssertionError("no error")
