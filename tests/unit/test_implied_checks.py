"""The check a request body implies (docs/quality.md "Checks a body implies"): a line
without an ``expect`` whose body forces a tool call is checked for that call against the
tool's parameters schema, and one whose ``response_format`` asks for JSON is checked for
JSON that follows the schema; a written ``expect`` wins, ``"expect": false`` opts out,
and a schema the check cannot use is one line naming the body field."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tokrate.errors import PromptError
from tokrate.inputs.prompts import parse_jsonl
from tokrate.load.prompt_use import implied_checks_text
from tokrate.spec.expect import judge

PARAMS = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
    "required": ["city"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": PARAMS}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
]
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
FORMAT = {"type": "json_schema", "json_schema": {"name": "contact", "schema": SCHEMA}}
MESSAGES = [{"role": "user", "content": "Weather in Paris?"}]
FORCED = {"type": "function", "function": {"name": "get_weather"}}


def _batch(body: dict[str, Any], **line: Any) -> bytes:
    obj = {"custom_id": "r1", "url": "/v1/chat/completions", "body": {"messages": MESSAGES, **body}}
    return (json.dumps({**obj, **line}) + "\n").encode()


def _expect_of(data: bytes) -> dict[str, Any] | None:
    (prompt,) = parse_jsonl(data, "mine.jsonl")
    return None if prompt.expect is None else prompt.expect.to_dict()


def _call(name: str, arguments: object) -> list[dict[str, Any]]:
    return [{"index": 0, "name": name, "arguments": json.dumps(arguments)}]


def test_a_forced_tool_is_checked_against_its_parameters() -> None:
    data = _batch({"tools": TOOLS, "tool_choice": FORCED, "response_format": FORMAT})
    (prompt,) = parse_jsonl(data, "mine.jsonl")
    expect = prompt.expect
    assert expect is not None
    # The forced call wins over the output format: the answer is the call.
    assert expect.to_dict() == {"tool_call": {"name": "get_weather", "arguments_schema": PARAMS}}
    passed = [
        judge(expect, "", {}, tool_calls=call).passed
        for call in (
            _call("get_weather", {"city": "Paris"}),
            _call("get_weather", {"unit": "c"}),
            _call("get_weather", {"city": "Paris", "when": "now"}),
            _call("get_time", {"city": "Paris"}),
            [],
        )
    ]
    assert passed == [True, False, False, False, False]


def test_required_with_one_tool_forces_it_and_with_two_does_not() -> None:
    one = _batch({"tools": TOOLS[:1], "tool_choice": "required"})
    assert _expect_of(one) == {"tool_call": {"name": "get_weather", "arguments_schema": PARAMS}}
    # With two tools "required" leaves the choice to the model: no call is implied.
    assert _expect_of(_batch({"tools": TOOLS, "tool_choice": "required"})) is None
    assert _expect_of(_batch({"tools": TOOLS, "tool_choice": "auto"})) is None
    assert _expect_of(_batch({"tools": TOOLS})) is None
    no_params = [{"type": "function", "function": {"name": "ping"}}]
    assert _expect_of(_batch({"tools": no_params, "tool_choice": "required"})) == {
        "tool_call": {"name": "ping"}
    }


def test_a_json_response_format_is_checked_against_its_schema() -> None:
    (prompt,) = parse_jsonl(_batch({"response_format": FORMAT}), "mine.jsonl")
    expect = prompt.expect
    assert expect is not None and expect.to_dict() == {"json_schema": SCHEMA}
    assert judge(expect, '{"name": "Priya"}', {}).passed
    assert not judge(expect, '{"email": "p@x.org"}', {}).passed
    assert not judge(expect, '{"name": "Pri', {}).passed
    # JSON mode promises an object; a json_schema format without a schema, any JSON.
    json_mode = _expect_of(_batch({"response_format": {"type": "json_object"}}))
    assert json_mode == {"json_schema": {"type": "object"}}
    bare = {"type": "json_schema", "json_schema": {"name": "any"}}
    assert _expect_of(_batch({"response_format": bare})) == {"json_schema": {}}
    assert _expect_of(_batch({"response_format": {"type": "text"}})) is None


def test_a_written_expect_wins_and_false_opts_out() -> None:
    body = {"response_format": FORMAT}
    written = {"json_schema": SCHEMA, "example": '{"name": "Priya"}'}
    assert _expect_of(_batch(body, expect=written)) == written
    assert _expect_of(_batch(body, expect=False)) is None
    line = {"id": "p", "messages": MESSAGES, "body": body, "expect": False}
    assert _expect_of((json.dumps(line) + "\n").encode()) is None
    line = {"id": "p", "messages": MESSAGES, "body": body}
    assert _expect_of((json.dumps(line) + "\n").encode()) == {"json_schema": SCHEMA}


def test_every_turn_of_a_conversation_gets_the_check_its_body_implies() -> None:
    line = {
        "id": "s",
        "turns": ["Who?", {"user": "And her email?", "expect": {"contains": "@"}}, "More"],
        "body": {"response_format": FORMAT},
    }
    (prompt,) = parse_jsonl((json.dumps(line) + "\n").encode(), "s.jsonl")
    assert prompt.expect is not None and prompt.expect.to_dict() == {"json_schema": SCHEMA}
    later = [t.expect.to_dict() if t.expect else None for t in prompt.turns]
    assert later == [{"contains": "@"}, {"json_schema": SCHEMA}]


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": {"type": 3}},
                }
            },
            "mine.jsonl line 1: body.response_format: the check it implies does not load: "
            "'json_schema' is not a valid schema",
        ),
        (
            {
                "tools": [
                    {"type": "function", "function": {"name": "f", "parameters": {"type": 3}}}
                ],
                "tool_choice": "required",
            },
            "mine.jsonl line 1: body.tool_choice: the check it implies does not load: ",
        ),
    ],
)
def test_a_schema_the_check_cannot_use_is_one_line(body: dict[str, Any], words: str) -> None:
    with pytest.raises(PromptError) as err:
        parse_jsonl(_batch(body), "mine.jsonl")
    assert str(err.value).startswith(words), err.value
    assert "\n" not in str(err.value)


def test_the_run_says_which_answers_are_checked_on_what_their_body_asks() -> None:
    forced = {"tools": TOOLS, "tool_choice": FORCED}
    data = b"".join(
        [
            _batch({"response_format": FORMAT}),
            _batch(forced, custom_id="r2"),
            _batch({"response_format": FORMAT}, custom_id="r3", expect={"json_schema": SCHEMA}),
            _batch({"temperature": 0}, custom_id="r4"),
        ]
    )
    prompts = parse_jsonl(data, "mine.jsonl")
    assert [p.expect.implied_by if p.expect else None for p in prompts] == [
        "response_format",
        "tool_choice",
        None,
        None,
    ]
    assert implied_checks_text(prompts) == (
        "the answers to 2 prompts are checked on what the request body asks (1 a JSON"
        ' response_format, 1 a forced tool call): no "expect" was written for them;'
        ' "expect": false turns one off (docs/quality.md "Checks a body implies")'
    )
    assert implied_checks_text(prompts[2:]) is None
