"""Prompt checks (docs/quality.md): the expect vocabulary judged, bad ones refused at
load in one line naming the file and line, a user check's failure kept as the check's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tokrate.errors import PromptError
from tokrate.inputs.prompts import parse_jsonl
from tokrate.spec.expect import judge, normalise, parse_expect

SCHEMA = {
    "type": "object",
    "required": ["vendor", "total"],
    "properties": {"vendor": {"type": "string"}, "total": {"type": "number"}},
}


@pytest.mark.parametrize(
    ("expect", "answer", "passed"),
    [
        ({"equals": "Paris"}, "  paris.", True),
        ({"equals": "Paris"}, "Paris, France", False),
        ({"contains": "42 km"}, "It is about 42 KM away", True),
        ({"contains": "42 km"}, "It is 41 km", False),
        ({"one_of": ["billing", "technical"]}, "Billing", True),
        ({"one_of": ["billing", "technical"]}, "shipping", False),
        ({"regex": r"^A\d+$"}, "A123", True),
        ({"regex": r"^A\d+$"}, "B123", False),
        ({"number": 42, "tolerance": 0.5}, "The answer is 42.4.", True),
        ({"number": 1200}, "1,200 apples", True),
        ({"number": 42}, "forty-two", False),
        ({"json_schema": SCHEMA}, '```json\n{"vendor": "N", "total": 540.0}\n```', True),
        ({"json_schema": SCHEMA}, '{"vendor": "N"}', False),
        ({"json_schema": SCHEMA}, "not json at all", False),
    ],
)
def test_builtin_kinds(expect: dict[str, object], answer: str, passed: bool) -> None:
    outcome = judge(parse_expect(expect, "f line 1"), answer, {})
    assert outcome.passed is passed
    assert outcome.score == (1.0 if passed else 0.0)
    assert outcome.error is None


def test_normalise_ignores_what_a_grader_ignores() -> None:
    assert normalise('  "The  Answer."\n') == "the answer"


@pytest.mark.parametrize(
    ("expect", "message"),
    [
        ('{"regex": "("}', "'regex' '(' does not compile"),
        ('{"json_schema": {"type": 3}}', "'json_schema' is not a valid schema at type"),
        ('{"check": "no_such_module_xyz:f"}', "cannot import 'no_such_module_xyz'"),
        ('{"check": "nocolon"}', "'check' must be 'module:function'"),
        ('{"equals": "a", "one_of": ["a"]}', "needs exactly one of"),
        ('{"sounds_like": "a"}', "needs exactly one of"),
        ('{"number": "x"}', "'number' must be a number"),
        ('{"equals": "a", "tolerance": 1}', "unknown key 'tolerance'"),
        ('{"one_of": ["a"], "example": "b"}', "'example' 'b' does not pass its own"),
        ('"a"', "must be an object"),
    ],
)
def test_bad_expect_is_one_line_naming_file_and_line(expect: str, message: str) -> None:
    data = b'{"prompt": "fine"}\n{"prompt": "hi", "expect": ' + expect.encode() + b"}\n"
    with pytest.raises(PromptError) as err:
        parse_jsonl(data, "mine.jsonl")
    text = str(err.value)
    assert text.startswith("mine.jsonl line 2: expect: ")
    assert message in text
    assert "\n" not in text


def test_expect_on_a_prompt_and_on_session_turns() -> None:
    data = (
        b'{"id": "p", "prompt": "6 x 7?", "expect": {"number": 42}}\n'
        b'{"id": "s", "turns": [{"user": "hi", "expect": {"contains": "hello"}},'
        b' {"user": "2+2?", "expect": {"number": 4}}]}\n'
    )
    plain, session = parse_jsonl(data, "f.jsonl")
    assert plain.expect is not None and plain.expect.example == "42"
    assert session.expect is not None and session.expect.kind == "contains"
    assert session.turns[0].expect is not None and session.turns[0].expect.value == 4.0


def test_user_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_checks_ut.py").write_text(
        "def score(prompt, answer):\n"
        "    return 0.75 if prompt['id'] in answer else 0.25\n"
        "def boom(prompt, answer):\n"
        "    raise RuntimeError('grader down')\n"
        "def odd(prompt, answer):\n"
        "    return 'yes'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        expect = parse_expect({"check": "my_checks_ut:score"}, "f line 1")
        assert judge(expect, "about p7", {"id": "p7"}).passed is True
        low = judge(expect, "nothing", {"id": "p7"})
        assert (low.passed, low.score) == (False, 0.25)
        strict = parse_expect({"check": "my_checks_ut:score", "min_score": 0.8}, "f line 1")
        assert judge(strict, "about p7", {"id": "p7"}).passed is False
        boom = judge(parse_expect({"check": "my_checks_ut:boom"}, "w"), "x", {})
        assert boom.passed is None and boom.score is None
        assert boom.error == "my_checks_ut:boom raised RuntimeError: grader down"
        odd = judge(parse_expect({"check": "my_checks_ut:odd"}, "w"), "x", {})
        assert odd.error is not None and "want a bool or a number in [0, 1]" in odd.error
        with pytest.raises(PromptError, match="has no function 'nope'"):
            parse_expect({"check": "my_checks_ut:nope"}, "w")
    finally:
        sys.modules.pop("my_checks_ut", None)


def test_expect_on_an_openai_batch_line() -> None:
    data = (
        b'{"custom_id": "b1", "method": "POST", "url": "/v1/chat/completions", "body": '
        b'{"messages": [{"role": "user", "content": "2+2?"}]}, "expect": {"number": 4}}\n'
    )
    (prompt,) = parse_jsonl(data, "batch.jsonl")
    assert prompt.expect is not None and prompt.expect.value == 4.0


def test_a_cap_does_not_cut_a_checked_prompts_own_limit(tmp_path: Path) -> None:
    from tokrate.inputs.prompts import load_prompts
    from tokrate.spec.types import PromptsSpec

    path = tmp_path / "p.jsonl"
    path.write_text(
        '{"id": "a", "prompt": "x", "max_tokens": 64, "expect": {"equals": "y"}}\n'
        '{"id": "b", "prompt": "x", "max_tokens": 64}\n'
        '{"id": "c", "prompt": "x", "max_tokens": 8, "expect": {"equals": "y"}}\n'
    )
    prompts = load_prompts(PromptsSpec(paths=(str(path),), max_tokens=16))
    assert [p.max_tokens for p in prompts] == [64, 16, 16]
