"""Checks for tool calls and structured outputs (docs/quality.md): ``tool_call`` (name,
arguments as a subset, or an arguments schema), ``no_tool_call``, ``json_schema`` on a
structured answer; checked at load in one line, judged on the record's calls; a user
check that takes ``tool_calls`` gets them. And what the simulator answers with: a call
of the right tool at its accuracy, a wrong one otherwise; JSON a schema accepts, or
malformed (tokrate.sim.structured, tokrate.sim.schema_instance)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tokrate.analysis.checks import judge_answers
from tokrate.client.request import sim_reference
from tokrate.errors import PromptError
from tokrate.inputs.prompts import load_prompts
from tokrate.runfolder.checks_file import CheckEntry
from tokrate.runfolder.records import ANSWER_CUT, TOOL_CALLS_CUT
from tokrate.sim.answer_shape import AnswerShape, ToolDef
from tokrate.sim.answers import ANSWER_FIELD, Reference, reference
from tokrate.sim.schema_instance import instance
from tokrate.sim.structured import plan_answer
from tokrate.spec.expect import judge, parse_expect
from tokrate.spec.types import PromptsSpec

WEATHER = {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}


def _call(name: str, arguments: Any) -> dict[str, Any]:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"index": 0, "name": name, "arguments": text}


@pytest.mark.parametrize(
    ("calls", "passed"),
    [
        ([_call("get_weather", {"city": "Paris", "unit": "celsius"})], True),
        ([_call("get_weather", {"unit": "celsius", "city": "Paris", "days": 2})], True),
        ([_call("get_time", {}), _call("get_weather", '{"city":"Paris","unit":"celsius"}')], True),
        ([_call("get_weather", {"city": "paris", "unit": "celsius"})], False),
        ([_call("get_weather", {"city": "Paris"})], False),
        ([_call("get_time", {"city": "Paris", "unit": "celsius"})], False),
        ([_call("get_weather", '{"city": "Paris", "unit": "celsi')], False),
        ([], False),
    ],
)
def test_a_tool_call_check_matches_name_and_an_arguments_subset(
    calls: list[dict[str, Any]], passed: bool
) -> None:
    expect = parse_expect({"tool_call": WEATHER}, "f line 1")
    assert judge(expect, "", {}, calls).passed is passed


def test_subsets_are_json_values_recursively() -> None:
    want = {"tool_call": {"name": "f", "arguments": {"a": {"b": [1, {"c": True}]}, "n": 1}}}
    expect = parse_expect(want, "f")
    ok = _call("f", {"a": {"b": [1, {"c": True, "d": 0}], "x": 1}, "n": 1.0})
    assert judge(expect, "", {}, [ok]).passed
    for wrong in ({"a": {"b": [1]}, "n": 1}, {"a": {"b": [1, {"c": 1}]}, "n": 1}):
        assert not judge(expect, "", {}, [_call("f", wrong)]).passed


def test_an_arguments_schema_or_a_name_alone() -> None:
    schema = {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}
    expect = parse_expect({"tool_call": {"name": "get_weather", "arguments_schema": schema}}, "f")
    assert judge(expect, "", {}, [_call("get_weather", {"city": "Rome"})]).passed
    assert not judge(expect, "", {}, [_call("get_weather", {"town": "Rome"})]).passed
    named = parse_expect({"tool_call": {"name": "get_weather"}}, "f")
    assert judge(named, "", {}, [_call("get_weather", "not even json")]).passed


def test_no_tool_call_passes_only_without_calls() -> None:
    expect = parse_expect({"no_tool_call": True, "example": "366 days"}, "f")
    assert judge(expect, "366 days", {}, []).passed
    assert not judge(expect, "", {}, [_call("get_weather", {})]).passed


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ({"tool_call": "get_weather"}, "'tool_call' must be an object with a 'name'"),
        ({"tool_call": {"arguments": {}}}, "'tool_call.name' must be a non-empty string"),
        ({"tool_call": {"name": "f", "args": {}}}, "unknown key 'args' in 'tool_call'"),
        ({"tool_call": {"name": "f", "arguments": [1]}}, "'tool_call.arguments' must be an object"),
        (
            {"tool_call": {"name": "f", "arguments": {}, "arguments_schema": {}}},
            "'arguments' or 'arguments_schema', not both",
        ),
        ({"tool_call": {"name": "f", "arguments_schema": {"type": 3}}}, "not a valid schema"),
        ({"tool_call": {"name": "f"}, "example": "x"}, "takes no 'example'"),
        ({"no_tool_call": False}, "'no_tool_call' must be true"),
    ],
)
def test_a_bad_tool_check_is_one_line_at_load(raw: dict[str, Any], words: str) -> None:
    with pytest.raises(PromptError) as err:
        parse_expect(raw, "prompts/agent.jsonl line 4")
    assert str(err.value).startswith("prompts/agent.jsonl line 4: expect: ")
    assert words in str(err.value)


def test_a_user_check_that_takes_tool_calls_gets_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "agent_checks_u.py").write_text(
        "def first_tool(prompt, answer, tool_calls):\n"
        "    return bool(tool_calls) and tool_calls[0]['name'] == prompt['body']['tool_choice']\n"
        "def text_only(prompt, answer):\n"
        "    return answer == 'hi'\n"
    )
    calls = [_call("lookup", {"q": 1})]
    prompt = {"id": "p", "body": {"tool_choice": "lookup"}}
    takes = parse_expect({"check": "agent_checks_u:first_tool"}, "f")
    assert judge(takes, "", prompt, calls).passed
    plain = parse_expect({"check": "agent_checks_u:text_only"}, "f")
    assert judge(plain, "hi", prompt, calls).passed


def test_the_analysis_judges_a_records_tool_calls() -> None:
    entry = CheckEntry("p", None, "tools", "f line 1", {"tool_call": WEATHER}, {"id": "p"})
    rows = [
        {
            "prompt_id": "p",
            "turn": None,
            "status": "ok",
            "answer": "",
            "tool_calls": json.dumps([_call("get_weather", WEATHER["arguments"])]),
        },
        {
            "prompt_id": "p",
            "turn": None,
            "status": "ok",
            "answer": "It is sunny.",
            "tool_calls": None,
        },
        {"prompt_id": "p", "turn": None, "status": "error", "answer": None, "tool_calls": None},
    ]
    outcomes = judge_answers(rows, (entry,))
    assert [o and o.passed for o in outcomes] == [True, False, None]


def test_what_a_record_cut_off_is_a_check_error_not_a_wrong_answer() -> None:
    """A JSON answer past the 8,192 characters a record keeps no longer parses; calls
    past their bounds are missing: the record's bound, not the model's answer."""
    schema = {"type": "object"}
    entries = (
        CheckEntry("json", None, "s", "f line 1", {"json_schema": schema}, {"id": "json"}),
        CheckEntry("call", None, "t", "f line 2", {"tool_call": WEATHER}, {"id": "call"}),
        CheckEntry("none", None, "t", "f line 3", {"no_tool_call": True}, {"id": "none"}),
    )
    cut_text = json.dumps({ANSWER_CUT: 9000})
    cut_calls = {TOOL_CALLS_CUT: True}  # a mapping, as records.jsonl gives it
    calls = json.dumps([_call("get_weather", WEATHER["arguments"])])

    def row(pid: str, answer: str, tool_calls: str | None, extra: object) -> dict[str, Any]:
        return {
            "prompt_id": pid,
            "turn": None,
            "status": "ok",
            "answer": answer,
            "tool_calls": tool_calls,
            "extra": extra,
        }

    rows = [
        row("json", '{"items": [1, 2', None, cut_text),
        row("json", '{"items": [1, 2', None, None),
        row("call", "", calls, cut_calls),
        row("call", "", calls, cut_text),  # the text was cut, the calls were not
        row("none", "", calls, cut_calls),  # a call was made: wrong whatever was cut
    ]
    outcomes = judge_answers(rows, entries)
    assert [o and o.passed for o in outcomes] == [None, False, None, True, False]
    errors = [o and o.error for o in outcomes]
    assert errors[0] == (
        "the answer (9,000 characters) is longer than the 8,192 a record keeps, so it was not judged"
    )
    assert errors[2] is not None and errors[2].startswith("the answer's tool calls are longer")


def test_the_bundled_tool_and_structured_sets_load_with_their_checks() -> None:
    tools = load_prompts(PromptsSpec(sets=("tools",)))
    assert len(tools) == 20 and {p.task for p in tools} == {"tools"}
    kinds = {p.expect.kind for p in tools if p.expect}
    assert kinds == {"tool_call", "no_tool_call"}
    for p in tools:
        body = dict(p.body)
        names = {t["function"]["name"] for t in body["tools"]}
        if p.expect and p.expect.kind == "tool_call":
            assert p.expect.value["name"] in names
    structured = load_prompts(PromptsSpec(sets=("structured",)))
    assert len(structured) == 16
    for p in structured:
        fmt = dict(p.body)["response_format"]["json_schema"]
        assert p.expect is not None and p.expect.value == fmt["schema"]
        assert p.expect.example is not None
        jsonschema.validate(json.loads(p.expect.example), fmt["schema"])


# --- the simulator's side ------------------------------------------------------------------


def test_a_simulator_target_is_told_the_right_call() -> None:
    expect = parse_expect({"tool_call": WEATHER}, "f")
    assert sim_reference(expect) == {"tool_call": WEATHER}
    ref = reference({ANSWER_FIELD: {**sim_reference(expect), "task": "t", "key": "k"}})  # type: ignore[dict-item]
    assert ref == Reference(
        None, "t", "k", tool_name="get_weather", tool_arguments=WEATHER["arguments"]
    )
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert sim_reference(parse_expect({"json_schema": schema}, "f")) == {"json_schema": schema}
    assert sim_reference(parse_expect({"no_tool_call": True}, "f")) == {"no_tool_call": True}


PARAMS = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["city"],
}
SHAPE = AnswerShape(
    tools=(ToolDef("get_weather", "", PARAMS), ToolDef("get_time")), tool_choice="auto"
)


def test_a_right_answer_calls_the_reference_tool_and_a_wrong_one_another() -> None:
    ref = Reference(None, "tools", "k", tool_name="get_weather", tool_arguments={"city": "Oslo"})
    right = plan_answer(SHAPE, ref, right=True)
    assert (right.call_name, json.loads(right.call_arguments), right.right) == (
        "get_weather",
        {"city": "Oslo"},
        True,
    )
    wrong = plan_answer(SHAPE, ref, right=False)
    assert (wrong.call_name, wrong.right) == ("get_time", False)
    forced = AnswerShape(tools=SHAPE.tools, tool_choice="required", forced="get_weather")
    wrong_args = plan_answer(forced, ref, right=False)
    assert (wrong_args.call_name, json.loads(wrong_args.call_arguments)) == ("get_weather", {})


def test_without_a_reference_the_call_is_schema_valid_arguments() -> None:
    answer = plan_answer(SHAPE, None, right=True)
    assert answer.call_name == "get_weather"
    jsonschema.validate(json.loads(answer.call_arguments), PARAMS)


def test_no_tool_call_is_text_when_right_and_a_call_when_wrong() -> None:
    ref = Reference(None, "tools", "k", no_tool_call=True)
    assert plan_answer(SHAPE, ref, right=True).call_name is None
    assert plan_answer(SHAPE, ref, right=False).call_name == "get_weather"


def test_json_is_valid_when_right_and_malformed_when_wrong() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 3}}}
    shape = AnswerShape(json_schema=schema)
    right = plan_answer(shape, None, right=True)
    assert right.text is not None
    jsonschema.validate(json.loads(right.text), schema)
    wrong = plan_answer(shape, None, right=False)
    assert wrong.text is not None and not wrong.right
    with pytest.raises(json.JSONDecodeError):
        json.loads(wrong.text)
    told = plan_answer(shape, Reference('{"n": 7}', "t", "k"), right=True)
    assert told.text == '{"n": 7}'


@pytest.mark.parametrize(
    "schema",
    [
        {
            "type": "object",
            "properties": {
                "a": {"type": "string", "minLength": 6, "maxLength": 8},
                "b": {"type": "array", "items": {"type": "integer"}, "minItems": 2},
                "c": {"type": ["string", "null"], "format": "date"},
            },
            "required": ["a", "b", "c"],
            "additionalProperties": False,
        },
        {
            "$defs": {
                "p": {
                    "type": "object",
                    "properties": {"x": {"type": "number", "exclusiveMinimum": 5}},
                }
            },
            "type": "object",
            "properties": {"p": {"$ref": "#/$defs/p"}, "q": {"const": 3}},
        },
        {"anyOf": [{"type": "boolean"}, {"type": "string"}]},
        {"allOf": [{"type": "object", "properties": {"a": {"type": "integer", "maximum": -1}}}]},
    ],
)
def test_schema_instances_are_accepted_by_their_schema(schema: dict[str, Any]) -> None:
    validator = jsonschema.validators.validator_for(schema)(schema)
    assert [e.message for e in validator.iter_errors(instance(schema))] == []
