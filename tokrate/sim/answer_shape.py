"""What a request asks its answer to be: a call of one of its tools, JSON, or text.

Each protocol names it differently; :func:`chat_shape`, :func:`responses_shape` and
:func:`messages_shape` read one body into the same :class:`AnswerShape`:

- Chat Completions: ``tools`` ``[{"type": "function", "function": {"name",
  "description", "parameters"}}]``, ``tool_choice`` ("auto" | "none" | "required" |
  ``{"type": "function", "function": {"name"}}``), ``response_format`` (``{"type":
  "json_object"}`` or ``{"type": "json_schema", "json_schema": {"name", "schema"}}``);
- Responses API: ``tools`` ``[{"type": "function", "name", "description",
  "parameters"}]``, ``tool_choice`` (the words, or ``{"type": "function", "name"}``),
  ``text.format`` (``{"type": "json_object"}`` or ``{"type": "json_schema", "name",
  "schema"}``);
- Anthropic Messages: ``tools`` ``[{"name", "description", "input_schema"}]``,
  ``tool_choice`` (``{"type": "auto" | "any" | "none" | "tool", "name"}``),
  ``output_config.format`` (``{"type": "json_schema", "schema"}``; the older
  ``output_format`` too).

The shape's tools and schema count as prompt tokens
(:func:`tokrate.physics.count_request_tokens`) and decide what the answer streams
(:mod:`tokrate.sim.structured`). A malformed one is a 400 in the provider's words.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tokrate.sim.bad_request import BadRequest, invalid

__all__ = ["AnswerShape", "ToolDef", "chat_shape", "messages_shape", "responses_shape"]


@dataclass(frozen=True, slots=True)
class ToolDef:
    """One function tool: its name, description and parameters schema (None: none)."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] | None = None

    def counted(self) -> tuple[str, str, object]:
        """``(name, description, parameters)`` as the token count takes it."""
        return self.name, self.description, self.parameters


@dataclass(frozen=True, slots=True)
class AnswerShape:
    """``tools`` offered; ``tool_choice`` "auto", "none", "required" or None (not
    given), ``forced`` the name of the one tool it must call; ``json_schema`` the schema
    a JSON answer must follow, ``json_mode`` any JSON object."""

    tools: tuple[ToolDef, ...] = ()
    tool_choice: str | None = None
    forced: str | None = None
    json_schema: Mapping[str, Any] | None = None
    json_mode: bool = False

    @property
    def calls_tool(self) -> bool:
        """Whether the answer is a tool call (tools offered and not turned off)."""
        return bool(self.tools) and self.tool_choice != "none"

    @property
    def wants_json(self) -> bool:
        return self.json_schema is not None or self.json_mode

    def tool(self, name: str) -> ToolDef | None:
        return next((t for t in self.tools if t.name == name), None)


def _tool(raw: Mapping[str, Any], param: str, schema_key: str) -> ToolDef:
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise invalid(f"Missing required parameter: '{param}.name'.", f"{param}.name")
    description = raw.get("description")
    params = raw.get(schema_key)
    if params is not None and not isinstance(params, dict):
        raise invalid(f"Invalid type for '{param}.{schema_key}': expected an object.", param)
    return ToolDef(name, description if isinstance(description, str) else "", params)


def _tools(body: Mapping[str, Any], read: Any) -> tuple[ToolDef, ...]:
    tools = body.get("tools")
    if tools is None:
        return ()
    if not isinstance(tools, list):
        raise invalid("Invalid type for 'tools': expected an array.", "tools")
    out = []
    for i, raw in enumerate(tools):
        if not isinstance(raw, dict):
            raise invalid(f"Invalid type for 'tools[{i}]': expected an object.", f"tools[{i}]")
        tool = read(raw, f"tools[{i}]")
        if tool is not None:
            out.append(tool)
    return tuple(out)


def _choice(
    word: object, name: object, tools: tuple[ToolDef, ...]
) -> tuple[str | None, str | None]:
    """(tool_choice word, forced tool name), checked against the tools offered."""
    if name is not None:
        if not any(t.name == name for t in tools):
            raise invalid(
                f"Invalid value for 'tool_choice': no tool named {name!r}.", "tool_choice"
            )
        return "required", str(name)
    if word is not None and word not in ("auto", "none", "required"):
        raise invalid(f"Invalid value for 'tool_choice': {word!r}.", "tool_choice")
    if word == "required" and not tools:
        raise invalid("'tool_choice' is 'required' but no tools were given.", "tool_choice")
    return (str(word) if word is not None else None), None


def _json_format(fmt: object, param: str, schema_of: Any) -> tuple[Mapping[str, Any] | None, bool]:
    if fmt is None:
        return None, False
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return None, False
    if kind == "json_object":
        return None, True
    if kind == "json_schema":
        assert isinstance(fmt, dict)
        schema = schema_of(fmt)
        if not isinstance(schema, dict):
            raise invalid(f"Missing required parameter: '{param}.schema'.", param)
        return schema, False
    raise invalid(f"Invalid value for '{param}.type': {kind!r}.", f"{param}.type")


def _chat_tool(raw: Mapping[str, Any], param: str) -> ToolDef | None:
    if raw.get("type", "function") != "function":
        return None  # custom tools: accepted, never called
    function = raw.get("function")
    if not isinstance(function, dict):
        raise invalid(f"Missing required parameter: '{param}.function'.", f"{param}.function")
    return _tool(function, f"{param}.function", "parameters")


def chat_shape(body: Mapping[str, Any]) -> AnswerShape:
    """A Chat Completions body's shape (module doc). Raises BadRequest."""
    tools = _tools(body, _chat_tool)
    choice = body.get("tool_choice")
    named = None
    if isinstance(choice, dict):
        function = choice.get("function")
        named = function.get("name") if isinstance(function, dict) else None
        if named is None:
            raise invalid("Missing required parameter: 'tool_choice.function.name'.", "tool_choice")
        choice = None
    word, forced = _choice(choice, named, tools)
    schema, mode = _json_format(
        body.get("response_format"),
        "response_format",
        lambda f: (f.get("json_schema") or {}).get("schema"),
    )
    return AnswerShape(tools, word, forced, schema, mode)


def _responses_tool(raw: Mapping[str, Any], param: str) -> ToolDef | None:
    if raw.get("type") != "function":
        return None
    return _tool(raw, param, "parameters")


def responses_shape(body: Mapping[str, Any]) -> AnswerShape:
    """A Responses API body's shape (module doc). Raises BadRequest."""
    tools = _tools(body, _responses_tool)
    choice = body.get("tool_choice")
    named = None
    if isinstance(choice, dict):
        named = choice.get("name")
        if named is None:
            raise invalid("Missing required parameter: 'tool_choice.name'.", "tool_choice")
        choice = None
    word, forced = _choice(choice, named, tools)
    text = body.get("text")
    fmt = text.get("format") if isinstance(text, dict) else None
    schema, mode = _json_format(fmt, "text.format", lambda f: f.get("schema"))
    return AnswerShape(tools, word, forced, schema, mode)


_ANTHROPIC_CHOICE = {"auto": "auto", "any": "required", "none": "none"}


def _messages_tool(raw: Mapping[str, Any], param: str) -> ToolDef | None:
    if "input_schema" not in raw:
        return None  # server tools (web search, ...): accepted, never called
    return _tool(raw, param, "input_schema")


def messages_shape(body: Mapping[str, Any]) -> AnswerShape:
    """An Anthropic Messages body's shape (module doc). Raises BadRequest (the 400s
    carry Anthropic's ``field: message`` wording)."""
    try:
        tools = _tools(body, _messages_tool)
    except BadRequest as err:
        raise invalid(f"tools: {err.message}") from None
    choice = body.get("tool_choice")
    word: str | None = None
    forced: str | None = None
    if choice is not None:
        kind = choice.get("type") if isinstance(choice, dict) else None
        if kind == "tool":
            assert isinstance(choice, dict)
            name = choice.get("name")
            if not any(t.name == name for t in tools):
                raise invalid(f"tool_choice.tool.name: no tool named {name!r}")
            word, forced = "required", str(name)
        elif kind in _ANTHROPIC_CHOICE:
            word = _ANTHROPIC_CHOICE[str(kind)]
        else:
            raise invalid(
                "tool_choice: Input tag does not match any of the expected tags: 'auto', "
                "'any', 'tool', 'none'"
            )
    config = body.get("output_config")
    fmt = config.get("format") if isinstance(config, dict) else body.get("output_format")
    try:
        schema, mode = _json_format(fmt, "output_config.format", lambda f: f.get("schema"))
    except BadRequest as err:
        raise invalid(f"output_config.format: {err.message}") from None
    if mode:
        raise invalid("output_config.format.type: Input should be 'json_schema'")
    return AnswerShape(tools, word, forced, schema, mode)
