"""What the simulator answers a request with when it offers tools or asks for JSON, or
when tokrate told it the right answer (:mod:`tokrate.sim.answers`).

:func:`plan_answer` takes the request's :class:`~tokrate.sim.answer_shape.AnswerShape`,
its reference (None: tokrate told it nothing) and whether the tier answers right (drawn
at its task accuracy by the caller) and returns an :class:`Answer`:

- tools offered (``tool_choice`` not "none"): a call. Right: the reference's tool with
  its arguments (or arguments generated from the tool's parameters schema:
  :mod:`tokrate.sim.schema_instance`), else the forced tool (``tool_choice`` naming one),
  else the first. Wrong: another of the offered tools (unless one is forced), else the
  same tool with wrong arguments (``{}``, or ``{"unexpected": true}`` where ``{}`` is
  right). A reference that says the right answer is text (``no_tool_call``, or a text
  answer and no tool) is answered in text when right and with a call when wrong, unless
  ``tool_choice`` forces a call.
- JSON asked for (``response_format`` / ``text.format`` / ``output_config.format``):
  right, the reference's text when it is JSON, else an instance of the schema (of the
  format, else of the reference's); wrong, the same JSON without its last character
  (malformed).
- otherwise, as before: the reference's text when right, else the filler text.

Pure: no clock, no I/O, no randomness (the caller draws).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from tokrate.sim.answer_shape import AnswerShape
from tokrate.sim.answers import Reference
from tokrate.sim.schema_instance import instance

__all__ = ["Answer", "plan_answer"]

#: The JSON object answered in JSON mode without a schema or a reference.
_FREE_JSON: Final = {"answer": "text"}


@dataclass(frozen=True, slots=True)
class Answer:
    """The answer: ``text`` (None: the filler text), or a call of tool ``call_name``
    with ``call_arguments`` (JSON text); ``right`` whether it is the right one."""

    text: str | None = None
    call_name: str | None = None
    call_arguments: str = ""
    right: bool = True


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _arguments(shape: AnswerShape, name: str, given: Mapping[str, Any] | None) -> Any:
    if given is not None:
        return dict(given)
    tool = shape.tool(name)
    params = tool.parameters if tool is not None else None
    value = instance(params) if params is not None else {}
    return value if isinstance(value, dict) else {}


def _call(shape: AnswerShape, ref: Reference | None, right: bool) -> Answer:
    name = shape.forced or shape.tools[0].name
    if ref is not None and ref.tool_name is not None and shape.tool(ref.tool_name) is not None:
        name = ref.tool_name
    right_args = _arguments(shape, name, ref.tool_arguments if ref is not None else None)
    if right:
        return Answer(call_name=name, call_arguments=_dumps(right_args))
    other = next((t for t in shape.tools if t.name != name), None)
    if other is not None and shape.forced is None:
        arguments = _dumps(_arguments(shape, other.name, None))
        return Answer(call_name=other.name, call_arguments=arguments, right=False)
    wrong = {} if right_args else {"unexpected": True}
    return Answer(call_name=name, call_arguments=_dumps(wrong), right=False)


def _text_is_right(ref: Reference | None) -> bool:
    """Whether the reference says the right answer is text, not a call."""
    return ref is not None and (
        ref.no_tool_call or (ref.text is not None and ref.tool_name is None)
    )


def _json(shape: AnswerShape, ref: Reference | None, right: bool) -> Answer:
    text = ref.text if ref is not None else None
    if text is not None:
        try:
            json.loads(text)
        except ValueError:
            text = None
    if text is None:
        schema = shape.json_schema or (ref.json_schema if ref is not None else None)
        text = _dumps(instance(schema) if schema is not None else _FREE_JSON)
    if right:
        return Answer(text)
    return Answer(text[:-1] if len(text) > 1 else "{", right=False)


def plan_answer(shape: AnswerShape, ref: Reference | None, right: bool) -> Answer:
    """The answer to a request of ``shape`` with reference ``ref`` (module doc)."""
    if shape.calls_tool:
        must_call = shape.forced is not None or shape.tool_choice == "required"
        if _text_is_right(ref) and not must_call:
            assert ref is not None
            if right:
                return Answer(ref.text)
            # The mistake with tools at hand: calling one when it should answer.
            return dataclasses.replace(_call(shape, None, right=True), right=False)
        return _call(shape, ref, right)
    if shape.wants_json:
        return _json(shape, ref, right)
    if ref is not None and ref.no_tool_call:
        return Answer(ref.text)  # no tool to call: any text is right
    if ref is None or not right:
        return Answer(right=ref is None)
    if ref.text is not None:
        return Answer(ref.text)
    if ref.json_schema is not None:
        return Answer(_dumps(instance(ref.json_schema)))
    return Answer(right=False)  # a call is right, and the request offers no tool
