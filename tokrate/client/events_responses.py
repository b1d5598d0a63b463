"""Classify one OpenAI Responses API stream event into :class:`ChunkFacts`.

The stream is typed (``event: <type>`` plus the same ``type`` in the data) and ends
with a terminal event (``response.completed`` / ``response.incomplete`` /
``response.failed``), never ``[DONE]``. The same definitions as Chat Completions:

- tool calls: a ``response.output_item.added`` event whose item is a
  ``function_call`` (or ``custom_tool_call``, ``mcp_call``) names the call at its
  ``output_index``; each arguments delta adds to the call at its ``output_index``
  (``ChunkFacts.tool_parts``). The added event is lifecycle, not content.
- content-bearing = a non-empty ``delta`` of ``response.output_text.delta`` or
  ``response.refusal.delta`` (answer), ``response.reasoning_summary_text.delta`` or
  ``response.reasoning_text.delta`` (reasoning), ``response.function_call_arguments.delta``
  (and the custom/MCP tool-call input deltas: tool_call). Lifecycle events
  (``response.created``, ``*.added``, ``*.done``) never are.
- usage (on the terminal event's ``response.usage``) normalised to
  ``completion_tokens`` = ``output_tokens`` (reasoning included), ``prompt_tokens`` =
  ``input_tokens``, ``reasoning_tokens`` = ``output_tokens_details.reasoning_tokens``,
  ``cached_tokens`` = ``input_tokens_details.cached_tokens``.
- finish reasons in the Chat Completions words: completed -> ``stop`` (``tool_calls``
  when it called a function), incomplete by its reason (``max_output_tokens`` ->
  ``length``).
- ``response.failed`` and ``error`` events are in-band errors classed by their code
  (:func:`~tokrate.client.events_common.in_band_error_class`).

Unknown event types are empty facts (OpenAI adds types; they carry nothing tokrate
counts). Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from tokrate.client.chunks import ChunkError, ChunkFacts, _count
from tokrate.client.events_common import event_object, event_type, fail_facts, has_text

__all__ = ["RESPONSES_TERMINAL", "classify_responses_event"]

#: Events that end a Responses stream.
RESPONSES_TERMINAL: Final = frozenset(
    {"response.completed", "response.incomplete", "response.failed"}
)
#: Delta events -> which kind of content a non-empty ``delta`` is.
_DELTAS: Final[Mapping[str, str]] = {
    "response.output_text.delta": "answer",
    "response.refusal.delta": "answer",
    "response.reasoning_summary_text.delta": "reasoning",
    "response.reasoning_text.delta": "reasoning",
    "response.function_call_arguments.delta": "tool_call",
    "response.custom_tool_call_input.delta": "tool_call",
    "response.mcp_call_arguments.delta": "tool_call",
}
_INCOMPLETE: Final[Mapping[str, str]] = {
    "max_output_tokens": "length",
    "content_filter": "content_filter",
}


#: Output items that are a call of one of the request's tools.
_CALL_ITEMS: Final = frozenset({"function_call", "custom_tool_call", "mcp_call"})


def _output_index(data: dict[str, Any]) -> int:
    index = data.get("output_index")
    return index if isinstance(index, int) and not isinstance(index, bool) else 0


def _usage(usage: Any) -> dict[str, int]:
    if not isinstance(usage, dict):
        raise ChunkError(f"response.usage is not an object: {usage!r:.40}")
    if usage.get("output_tokens") is None:
        raise ChunkError("response.usage has no output_tokens")
    out = {"completion_tokens": _count(usage["output_tokens"], "output_tokens")}
    if usage.get("input_tokens") is not None:
        out["prompt_tokens"] = _count(usage["input_tokens"], "input_tokens")
    details = usage.get("output_tokens_details")
    if isinstance(details, dict) and details.get("reasoning_tokens") is not None:
        out["reasoning_tokens"] = _count(
            details["reasoning_tokens"], "output_tokens_details.reasoning_tokens"
        )
    cached = usage.get("input_tokens_details")
    if isinstance(cached, dict) and cached.get("cached_tokens") is not None:
        out["cached_tokens"] = _count(cached["cached_tokens"], "input_tokens_details.cached_tokens")
    return out


def _terminal(facts: ChunkFacts, response: Any, type_: str) -> ChunkFacts:
    if not isinstance(response, dict):
        raise ChunkError(f"{type_} has no response object")
    facts.end_of_stream = True
    if isinstance(response.get("id"), str):
        facts.response_id = response["id"]
    if response.get("usage") is not None:
        facts.usage = _usage(response["usage"])
    if type_ == "response.failed":
        err = response.get("error")
        err = err if isinstance(err, dict) else {}
        return fail_facts(facts, err.get("message") or "response failed", err.get("code"), None)
    if type_ == "response.completed":
        output = response.get("output")
        called = isinstance(output, list) and any(
            isinstance(item, dict) and item.get("type") == "function_call" for item in output
        )
        facts.finish_reason = "tool_calls" if called else "stop"
    else:
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        facts.finish_reason = _INCOMPLETE.get(str(reason), str(reason or "incomplete"))
    return facts


def classify_responses_event(obj: object, event_name: str | None = None) -> ChunkFacts:
    """Classify one parsed Responses event (``event_name``: its SSE ``event:`` line,
    used when the data has no ``type``).

    Raises:
        ChunkError: not a JSON object, a terminal event without its response, or a
            malformed usage object.
    """
    data = event_object(obj)
    type_ = event_type(data, event_name)
    facts = ChunkFacts()
    kind = _DELTAS.get(type_)
    if kind is not None:
        delta = data.get("delta")
        if has_text(delta):
            setattr(facts, kind, True)
            if kind == "tool_call":
                facts.tool_parts = [(_output_index(data), None, delta)]
        return facts
    if type_ == "response.output_item.added":
        item = data.get("item")
        if isinstance(item, dict) and item.get("type") in _CALL_ITEMS:
            name = item.get("name")
            arguments = item.get("arguments") or item.get("input")
            facts.tool_parts = [
                (
                    _output_index(data),
                    name if isinstance(name, str) and name else None,
                    arguments if isinstance(arguments, str) else "",
                )
            ]
        return facts
    if type_ in RESPONSES_TERMINAL:
        return _terminal(facts, data.get("response"), type_)
    if type_ == "error":
        # The documented event has code/message at the top; some servers nest them
        # in "error" as Chat Completions does.
        nested = data.get("error")
        err = nested if isinstance(nested, dict) else data
        facts.end_of_stream = True
        return fail_facts(facts, err.get("message"), err.get("code"), err.get("type"))
    if type_ in ("response.created", "response.in_progress", "response.queued"):
        response = data.get("response")
        if isinstance(response, dict):
            if isinstance(response.get("id"), str):
                facts.response_id = response["id"]
            if isinstance(response.get("model"), str):
                facts.model = response["model"]
    return facts
