"""A prompt's request fields: the ``body`` of an OpenAI batch line or of a prompt line,
checked and kept to be sent as written (docs/config.md "Request fields").

A body is a Chat Completions request body. :func:`parse_body` splits it into what
tokrate sends as written (``tools``, ``tool_choice``, ``response_format``, sampling
settings, ``seed``, ``reasoning_effort``, anything a server accepts), the prompt's output
limit (``max_tokens`` / ``max_completion_tokens``, under ``[prompts] max_tokens``'s
override rule, sent under the name it was written with), and the fields tokrate owns
(``model``, ``stream``, ``stream_options``: replaced, never sent). A field that cannot
be honoured while a stream is measured (:func:`tokrate.spec.request_fields.unstreamable`)
and a malformed ``tools``, ``tool_choice`` or ``response_format`` are refused here, in
one line naming the file, line and field, before anything is sent.

:func:`body_tools` and :func:`body_output_schema` read a body's tool definitions and
output schema for the input-token estimate (:func:`tokrate.physics.count_request_tokens`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from tokrate.errors import PromptError
from tokrate.spec.request_fields import LIMIT_FIELDS, OWNED_FIELDS, PROMPT_FIELDS, unstreamable

__all__ = [
    "PromptBody",
    "body_output_schema",
    "body_tools",
    "parse_body",
]

#: ``response_format`` types of Chat Completions.
_FORMAT_TYPES: Final = ("text", "json_object", "json_schema")
_TOOL_CHOICE_WORDS: Final = ("auto", "none", "required")


@dataclass(frozen=True, slots=True)
class PromptBody:
    """A prompt body, checked: ``fields`` go out as written (in their order), ``limit``
    is the output limit it asked for (None: none) under the name ``limit_field``."""

    fields: tuple[tuple[str, Any], ...] = ()
    limit: int | None = None
    limit_field: str | None = None


def _fail(where: str, key: str, what: str) -> PromptError:
    return PromptError(f"{where}: body.{key}: {what}")


def _limit(body: Mapping[str, Any], where: str) -> tuple[int | None, str | None]:
    given = [k for k in LIMIT_FIELDS if body.get(k) is not None]
    if len(given) > 1:
        raise _fail(where, given[1], f"give one output limit, not both {' and '.join(given)}")
    if not given:
        return None, None
    key = given[0]
    value = body[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _fail(where, key, f"must be a positive integer, got {value!r}")
    return value, key


def _check_tools(value: object, where: str) -> None:
    if not isinstance(value, list):
        raise _fail(where, "tools", "must be a list of tool objects")
    for i, tool in enumerate(value):
        at = f"tools[{i}]"
        if not isinstance(tool, dict) or not isinstance(tool.get("type"), str):
            raise _fail(where, at, 'must be an object with a "type" (e.g. "function")')
        if tool["type"] != "function":
            continue  # custom tools: sent as written, refused where they cannot be
        function = tool.get("function")
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise _fail(where, f"{at}.function", 'must be an object with a string "name"')
        params = function.get("parameters")
        if params is not None and not isinstance(params, dict):
            raise _fail(where, f"{at}.function.parameters", "must be a JSON Schema object")


def _check_tool_choice(value: object, where: str) -> None:
    if isinstance(value, str):
        if value not in _TOOL_CHOICE_WORDS:
            raise _fail(where, "tool_choice", f"must be one of {_TOOL_CHOICE_WORDS}, got {value!r}")
        return
    function = value.get("function") if isinstance(value, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise _fail(
            where,
            "tool_choice",
            'must be "auto", "none", "required" or {"type": "function", "function": {"name": ...}}',
        )


def _check_response_format(value: object, where: str) -> None:
    kind = value.get("type") if isinstance(value, dict) else None
    if kind not in _FORMAT_TYPES:
        raise _fail(
            where, "response_format", f'must be an object with "type" one of {_FORMAT_TYPES}'
        )
    assert isinstance(value, dict)
    if kind == "json_schema":
        spec = value.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            raise _fail(
                where, "response_format.json_schema", 'must be an object with a string "name"'
            )
        if spec.get("schema") is not None and not isinstance(spec["schema"], dict):
            raise _fail(where, "response_format.json_schema.schema", "must be a JSON Schema object")


_SHAPES: Final = {
    "tools": _check_tools,
    "tool_choice": _check_tool_choice,
    "response_format": _check_response_format,
}


def parse_body(body: object, where: str, *, with_prompt: bool) -> PromptBody:
    """``body`` checked (see the module doc). ``with_prompt``: the body carries the
    prompt itself (an OpenAI batch line: its ``messages`` or ``prompt``, which the
    caller reads); otherwise a prompt field in it is refused (a prompt line's
    ``messages`` or ``prompt`` go at the top level).

    Raises:
        PromptError: "WHERE: body.FIELD: WHAT" in one line.
    """
    if not isinstance(body, dict):
        raise PromptError(f"{where}: 'body' must be an object")
    limit, limit_field = _limit(body, where)
    fields: list[tuple[str, Any]] = []
    for key, value in body.items():
        if key in LIMIT_FIELDS:
            continue
        if key in PROMPT_FIELDS:
            if key == "input":
                raise _fail(
                    where,
                    key,
                    "is a Responses API field; a prompt body is a Chat Completions body "
                    "(messages): tokrate translates it for a Responses target",
                )
            if not with_prompt:
                raise _fail(where, key, "goes at the top level of the line, not in 'body'")
            continue
        why = unstreamable(key, value)
        if why is not None:
            raise _fail(where, key, why)
        if key in OWNED_FIELDS:
            continue  # tokrate's own: the target names the model; every request streams
        check = _SHAPES.get(key)
        if check is not None:
            check(value, where)
        fields.append((key, value))
    return PromptBody(tuple(fields), limit, limit_field)


def body_tools(fields: Mapping[str, Any]) -> Iterator[tuple[str, str, object]]:
    """``(name, description, parameters)`` of each function tool of a chat body."""
    tools = fields.get("tools")
    for tool in tools if isinstance(tools, list) else ():
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict):
            name, description = function.get("name"), function.get("description")
            yield (
                name if isinstance(name, str) else "",
                description if isinstance(description, str) else "",
                function.get("parameters"),
            )


def body_output_schema(fields: Mapping[str, Any]) -> object:
    """The JSON schema a chat body's ``response_format`` asks the answer to follow
    (None: none, or free-form JSON)."""
    fmt = fields.get("response_format")
    spec = fmt.get("json_schema") if isinstance(fmt, dict) else None
    return spec.get("schema") if isinstance(spec, dict) else None
