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

:func:`line_expect` is a line's check: its own ``expect``, else the one its body
implies (a forced tool call's name and parameters schema, a JSON ``response_format``'s
schema; docs/quality.md "Checks a body implies"), so a production request file
without checks still says whether each model kept the contract its requests set.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from tokrate.errors import PromptError
from tokrate.spec.expect import Expect, parse_expect
from tokrate.spec.request_fields import LIMIT_FIELDS, OWNED_FIELDS, PROMPT_FIELDS, unstreamable

__all__ = [
    "PromptBody",
    "body_output_schema",
    "body_tools",
    "implied_expect",
    "line_expect",
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


def _forced_tool(fields: Mapping[str, Any]) -> str | None:
    """The function a body's ``tool_choice`` forces: the one it names, or the only
    function tool under ``"required"``; None where the model may choose (or not call)."""
    choice = fields.get("tool_choice")
    if isinstance(choice, dict):
        function = choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        return name if isinstance(name, str) else None
    if choice == "required":
        names = [name for name, _, _ in body_tools(fields)]
        return names[0] if len(names) == 1 else None
    return None


def _implied_raw(fields: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The check a body implies, as an ``expect`` object, and the field it comes from."""
    forced = _forced_tool(fields)
    if forced is not None:
        params = next((p for n, _, p in body_tools(fields) if n == forced), None)
        call: dict[str, Any] = {"name": forced}
        if isinstance(params, dict) and params:
            call["arguments_schema"] = params
        return "tool_choice", {"tool_call": call}
    fmt = fields.get("response_format")
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "json_object":
        # JSON mode promises an object, of any shape.
        return "response_format", {"json_schema": {"type": "object"}}
    if kind == "json_schema":
        schema = body_output_schema(fields)
        # Without a schema any JSON value is the contract: the empty schema accepts it.
        return "response_format", {"json_schema": schema if isinstance(schema, dict) else {}}
    return None


def implied_expect(fields: Mapping[str, Any], where: str) -> Expect | None:
    """The check a body's fields imply (None: none): a ``tool_call`` check of the
    function ``tool_choice`` forces (its ``parameters`` as ``arguments_schema``), else
    a ``json_schema`` check of a ``json_schema`` ``response_format``'s schema (the
    empty schema when it gives none: the answer parses as JSON), or of a JSON object
    for ``json_object``.

    Raises:
        PromptError: the schema the check would use is not a JSON schema, in one line
            naming the body field.
    """
    implied = _implied_raw(fields)
    if implied is None:
        return None
    field, raw = implied
    try:
        return dataclasses.replace(parse_expect(raw, where), implied_by=field)
    except PromptError as err:
        why = str(err).removeprefix(f"{where}: expect: ")
        raise _fail(where, field, f"the check it implies does not load: {why}") from None


def line_expect(raw: object, body: PromptBody, where: str) -> Expect | None:
    """A line's (or a turn's) check: its ``expect`` when it has one, none when it says
    ``"expect": false``, else the check its ``body`` implies (:func:`implied_expect`).

    Raises:
        PromptError: a malformed ``expect`` or implied check, in one line.
    """
    if raw is False:
        return None
    if raw is not None:
        return parse_expect(raw, where)
    return implied_expect(dict(body.fields), where)
