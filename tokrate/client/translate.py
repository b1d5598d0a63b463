"""A prompt's Chat Completions request in another protocol, where a documented mapping
exists (docs/config.md "Request fields" has the table).

A prompt is written as a Chat Completions request (messages, and a ``body`` of request
fields: :mod:`tokrate.inputs.request_body`). To a Chat Completions target everything
goes as written. To a Responses API or Anthropic Messages target :func:`translate_fields`
and :func:`translate_messages` map each field and message part to its documented
equivalent (tools and tool_choice, JSON-schema output, temperature, top_p, stop, images,
reasoning effort and the thinking budget, earlier tool calls and their results); to a
legacy Completions target the sampling fields go as written (the two share them), and
what only chat has is refused. A field or part with no mapping raises
:class:`Untranslatable` naming it; the run's preparation turns that into one line naming
the prompt's file and line (:func:`check_translations`), before anything is sent.

Pure functions over JSON values; the input is never changed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

import orjson

from tokrate.physics import data_url

__all__ = [
    "ANTHROPIC_EFFORTS",
    "Untranslatable",
    "translate_fields",
    "translate_messages",
]

_SYSTEM_ROLES: Final = frozenset({"system", "developer"})
#: Names of the protocols, as the refusals say them.
_API_NAMES: Final = {
    "responses": "the Responses API",
    "anthropic": "Anthropic Messages",
    "completions": "legacy Completions",
}
#: ``reasoning_effort`` values Anthropic's ``output_config.effort`` takes by the same name.
ANTHROPIC_EFFORTS: Final = ("low", "medium", "high", "xhigh")


class Untranslatable(Exception):
    """A request field or message part with no documented equivalent in ``api``:
    ``field`` is its path ("stop", "messages[2].content[1]"), ``why`` one line."""

    def __init__(self, api: str, field: str, why: str) -> None:
        super().__init__(f"{field}: {why}")
        self.api = api
        self.field = field
        self.why = why


def _refuse(api: str, field: str, what: str = "") -> Untranslatable:
    name = _API_NAMES.get(api, api)
    why = what or f"has no equivalent in {name}"
    owner = f"{name}'" if name.endswith("s") else f"{name}'s"
    hint = f"send it to a Chat Completions target, or put {owner} own field in extra_body"
    return Untranslatable(api, field, f"{why}; {hint}")


# --- request fields ------------------------------------------------------------------------


def _function(tool: object, api: str, at: str) -> dict[str, Any]:
    function = tool.get("function") if isinstance(tool, dict) else None
    if (
        not isinstance(tool, dict)
        or tool.get("type") != "function"
        or not isinstance(function, dict)
    ):
        raise _refuse(api, at, "only function tools translate")
    return function


def _responses_tools(value: Any, api: str) -> list[dict[str, Any]]:
    out = []
    for i, tool in enumerate(value):
        function = _function(tool, api, f"tools[{i}]")
        out.append({"type": "function", **function})
    return out


def _anthropic_tools(value: Any, api: str) -> list[dict[str, Any]]:
    out = []
    for i, tool in enumerate(value):
        function = _function(tool, api, f"tools[{i}]")
        item: dict[str, Any] = {"name": function["name"]}
        if function.get("description") is not None:
            item["description"] = function["description"]
        item["input_schema"] = function.get("parameters") or {"type": "object", "properties": {}}
        if function.get("strict") is not None:
            item["strict"] = function["strict"]
        out.append(item)
    return out


def _named_function(value: Any) -> str | None:
    function = value.get("function") if isinstance(value, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    return name if isinstance(name, str) else None


def _responses_tool_choice(value: Any, api: str) -> Any:
    if isinstance(value, str):
        return value
    name = _named_function(value)
    if name is None:
        raise _refuse(
            api, "tool_choice", "only auto, none, required and a named function translate"
        )
    return {"type": "function", "name": name}


_ANTHROPIC_CHOICES: Final = {"auto": "auto", "required": "any", "none": "none"}


def _anthropic_tool_choice(value: Any, api: str) -> dict[str, Any]:
    if isinstance(value, str) and value in _ANTHROPIC_CHOICES:
        return {"type": _ANTHROPIC_CHOICES[value]}
    name = _named_function(value)
    if name is None:
        raise _refuse(
            api, "tool_choice", "only auto, none, required and a named function translate"
        )
    return {"type": "tool", "name": name}


def _responses_format(value: Any, api: str) -> dict[str, Any]:
    kind = value.get("type")
    if kind == "json_schema":
        return {"type": "json_schema", **value.get("json_schema", {})}
    return {"type": kind}


def _anthropic_format(value: Any, api: str) -> dict[str, Any] | None:
    kind = value.get("type")
    if kind == "text":
        return None  # the default: nothing to send
    if kind != "json_schema":
        raise _refuse(
            api,
            "response_format",
            f"type {kind!r} has no equivalent in Anthropic Messages (json_schema has)",
        )
    schema = (value.get("json_schema") or {}).get("schema")
    if not isinstance(schema, dict):
        raise _refuse(
            api, "response_format.json_schema.schema", "Anthropic needs the schema itself"
        )
    return {"type": "json_schema", "schema": schema}


def _responses(fields: Mapping[str, Any]) -> dict[str, Any]:
    api = "responses"
    out: dict[str, Any] = {}
    text: dict[str, Any] = {}
    for key, value in fields.items():
        if key in _SAME_IN_RESPONSES:
            out[key] = value
        elif key == "tools":
            out["tools"] = _responses_tools(value, api)
        elif key == "tool_choice":
            out["tool_choice"] = _responses_tool_choice(value, api)
        elif key == "response_format":
            text["format"] = _responses_format(value, api)
        elif key == "verbosity":
            text["verbosity"] = value
        elif key == "reasoning_effort":
            out["reasoning"] = {"effort": value}
        else:
            raise _refuse(api, key)
    if text:
        out["text"] = text
    return out


def _anthropic_tool_fields(fields: Mapping[str, Any], out: dict[str, Any]) -> None:
    """``tools``, ``tool_choice`` and ``parallel_tool_calls: false`` (Anthropic's
    ``disable_parallel_tool_use`` in its tool_choice; none has no such flag)."""
    api = "anthropic"
    if "tools" in fields:
        out["tools"] = _anthropic_tools(fields["tools"], api)
    choice = None
    if "tool_choice" in fields:
        choice = _anthropic_tool_choice(fields["tool_choice"], api)
    if fields.get("parallel_tool_calls") is False:
        choice = choice or {"type": "auto"}
        if choice["type"] != "none":
            choice["disable_parallel_tool_use"] = True
    if choice is not None:
        out["tool_choice"] = choice


_ANTHROPIC_TOOL_FIELDS: Final = ("tools", "tool_choice", "parallel_tool_calls")


def _anthropic(fields: Mapping[str, Any]) -> dict[str, Any]:
    api = "anthropic"
    out: dict[str, Any] = {}
    config: dict[str, Any] = {}
    for key, value in fields.items():
        if key in ("top_p", "top_k", "thinking"):
            out[key] = value
        elif key == "temperature":
            if isinstance(value, int | float) and not isinstance(value, bool) and value > 1:
                raise _refuse(api, key, f"{value!r} is over Anthropic's range of 0 to 1")
            out[key] = value
        elif key == "stop":
            out["stop_sequences"] = [value] if isinstance(value, str) else value
        elif key == "response_format":
            fmt = _anthropic_format(value, api)
            if fmt is not None:
                config["format"] = fmt
        elif key == "reasoning_effort":
            if value not in ANTHROPIC_EFFORTS:
                why = f"{value!r} is none of Anthropic's efforts {ANTHROPIC_EFFORTS}"
                raise _refuse(api, key, why)
            config["effort"] = value
        elif key == "user":
            out["metadata"] = {"user_id": value}
        elif key not in _ANTHROPIC_TOOL_FIELDS:
            raise _refuse(api, key)
    _anthropic_tool_fields(fields, out)
    if config:
        out["output_config"] = config
    return out


def _completions(fields: Mapping[str, Any]) -> dict[str, Any]:
    for key in fields:
        if key in _CHAT_ONLY:
            raise _refuse("completions", key)
    return dict(fields)


#: Chat fields the Responses API takes by the same name and meaning.
_SAME_IN_RESPONSES: Final = frozenset(
    {
        "temperature",
        "top_p",
        "parallel_tool_calls",
        "store",
        "metadata",
        "service_tier",
        "user",
        "prompt_cache_key",
        "safety_identifier",
    }
)
#: Chat fields legacy Completions has no place for (its sampling fields are chat's).
_CHAT_ONLY: Final = frozenset(
    {
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "functions",
        "function_call",
        "response_format",
        "reasoning_effort",
        "verbosity",
        "modalities",
        "audio",
        "prediction",
        "web_search_options",
        "logprobs",
        "top_logprobs",
        "store",
        "metadata",
    }
)
_FIELDS: Final[Mapping[str, Callable[[Mapping[str, Any]], dict[str, Any]]]] = {
    "responses": _responses,
    "anthropic": _anthropic,
    "completions": _completions,
}


def translate_fields(api: str, fields: Sequence[tuple[str, Any]]) -> dict[str, Any]:
    """A prompt body's fields (Chat Completions) as ``api`` names them; chat: as written.

    Raises:
        Untranslatable: a field (or a value of it) with no documented equivalent.
    """
    translate = _FIELDS.get(api)
    return dict(fields) if translate is None else translate(dict(fields))


# --- messages ----------------------------------------------------------------------------


def _text_of(content: Any) -> str:
    """A message's text: its string, or its text parts joined by a space."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("text")
        )
    return str(content or "")


def _image(part: Mapping[str, Any]) -> tuple[str, str | None]:
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else image
    detail = image.get("detail") if isinstance(image, dict) else None
    return str(url or ""), detail if isinstance(detail, str) else None


def _responses_part(part: Any, at: str, *, role: str) -> Any:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind == "text":
        return {
            "type": "output_text" if role == "assistant" else "input_text",
            "text": part["text"],
        }
    if kind == "image_url":
        url, detail = _image(part)
        return {"type": "input_image", "image_url": url, "detail": detail or "auto"}
    if kind == "file" and isinstance(part.get("file"), dict):
        return {"type": "input_file", **part["file"]}
    raise _refuse("responses", at, f"a {kind!r} part has no equivalent in the Responses API")


def _anthropic_part(part: Any, at: str) -> Any:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind == "text":
        return {"type": "text", "text": part["text"]}
    if kind == "image_url":
        url, _detail = _image(part)
        inline = data_url(url)
        if inline is not None:
            media_type, data = inline
            return {
                "type": "image",
                "source": {"type": "base64", "media_type": media_type, "data": data},
            }
        return {"type": "image", "source": {"type": "url", "url": url}}
    raise _refuse("anthropic", at, f"a {kind!r} part has no equivalent in Anthropic Messages")


def _parts(content: Any, convert: Callable[[Any, str], Any], at: str) -> Any:
    if not isinstance(content, list):
        return content
    return [convert(p, f"{at}.content[{j}]") for j, p in enumerate(content)]


_MESSAGE_KEYS: Final = frozenset({"role", "content", "tool_calls", "tool_call_id"})


def _check_keys(api: str, message: Mapping[str, Any], at: str) -> None:
    for key in message:
        if key not in _MESSAGE_KEYS:
            raise _refuse(api, f"{at}.{key}")


def _calls(message: Mapping[str, Any], api: str, at: str) -> Iterable[tuple[str, str, str]]:
    """(id, name, arguments text) of an assistant message's earlier tool calls."""
    calls = message.get("tool_calls") or []
    for i, call in enumerate(calls if isinstance(calls, list) else ()):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise _refuse(api, f"{at}.tool_calls[{i}]", "only function calls translate")
        arguments = function.get("arguments")
        yield str(call.get("id") or f"call_{i}"), function["name"], str(arguments or "{}")


def _responses_input(messages: Sequence[Any]) -> list[Any]:
    api = "responses"
    items: list[Any] = []
    for i, m in enumerate(messages):
        at = f"messages[{i}]"
        if not isinstance(m, dict):
            items.append(m)
            continue
        _check_keys(api, m, at)
        role = m.get("role")
        if role == "tool":
            call_id = str(m.get("tool_call_id") or "")
            output = _text_of(m.get("content"))
            items.append({"type": "function_call_output", "call_id": call_id, "output": output})
            continue
        content = m.get("content")
        if content not in (None, "", []):
            parts = _parts(content, functools.partial(_responses_part, role=str(role)), at)
            items.append({"role": role, "content": parts})
        for call_id, name, arguments in _calls(m, api, at):
            call = {"call_id": call_id, "name": name, "arguments": arguments}
            items.append({"type": "function_call", **call})
    return items


def _anthropic_turns(messages: Sequence[Any]) -> list[Any]:
    api = "anthropic"
    turns: list[Any] = []
    for i, m in enumerate(messages):
        at = f"messages[{i}]"
        if not isinstance(m, dict):
            turns.append(m)
            continue
        _check_keys(api, m, at)
        role = m.get("role")
        if role == "tool":
            use_id = str(m.get("tool_call_id") or "")
            result = {"type": "tool_result", "tool_use_id": use_id}
            turns.append(
                {"role": "user", "content": [{**result, "content": _text_of(m.get("content"))}]}
            )
            continue
        content = _parts(m.get("content"), _anthropic_part, at)
        calls = list(_calls(m, api, at))
        if not calls:
            turns.append({"role": role, "content": content})
            continue
        blocks: list[Any] = []
        if isinstance(content, str) and content:
            blocks.append({"type": "text", "text": content})
        elif isinstance(content, list):
            blocks.extend(content)
        for j, (call_id, name, arguments) in enumerate(calls):
            try:
                parsed = orjson.loads(arguments)
            except orjson.JSONDecodeError:
                parsed = None
            if not isinstance(parsed, dict):
                where = f"{at}.tool_calls[{j}].function.arguments"
                raise _refuse(api, where, "Anthropic takes a call's input as a JSON object")
            blocks.append({"type": "tool_use", "id": call_id, "name": name, "input": parsed})
        turns.append({"role": role, "content": blocks})
    return turns


def translate_messages(api: str, messages: Sequence[Any]) -> tuple[str | None, list[Any]]:
    """``(system text, the turns)`` of chat ``messages`` for ``api`` ("responses":
    Responses input items, "anthropic": Messages turns; system and developer messages
    become the system text, as both protocols keep it apart). Earlier tool calls and
    their results become ``function_call`` / ``function_call_output`` items or
    ``tool_use`` / ``tool_result`` blocks; images become ``input_image`` parts or
    ``image`` blocks.

    Raises:
        Untranslatable: a part or message key with no equivalent (audio, a message's
            ``name``, a call whose arguments Anthropic cannot take).
    """
    system = [m for m in messages if isinstance(m, dict) and m.get("role") in _SYSTEM_ROLES]
    rest = [m for m in messages if not (isinstance(m, dict) and m.get("role") in _SYSTEM_ROLES)]
    text = "\n\n".join(_text_of(m.get("content")) for m in system) if system else None
    if api == "responses":
        return text, _responses_input(rest)
    return text, _anthropic_turns(rest)
