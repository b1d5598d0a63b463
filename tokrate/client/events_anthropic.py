"""Classify one Anthropic Messages stream event into :class:`ChunkFacts`.

Events: ``message_start`` (id, input usage), ``content_block_start``,
``content_block_delta`` (``text_delta`` / ``thinking_delta`` / ``input_json_delta`` /
``signature_delta``), ``content_block_stop``, ``ping``, ``message_delta`` (stop
reason, cumulative output usage), ``message_stop`` (the end: no ``[DONE]``) and
``error`` (e.g. ``overloaded_error`` mid-stream). The same definitions as Chat
Completions:

- content-bearing = non-empty ``text_delta`` text (answer), ``thinking_delta``
  thinking (reasoning), ``input_json_delta`` partial_json (tool_call); signatures,
  pings and block starts/stops are not.
- tool calls: a ``content_block_start`` of a ``tool_use`` block names the call at
  its block ``index``; each ``input_json_delta`` adds to the call at its ``index``
  (``ChunkFacts.tool_parts``).
- usage arrives in parts, merged by the caller
  (:func:`~tokrate.client.events_common.merge_usage`): ``message_start`` yields only
  ``prompt_tokens`` (= ``input_tokens`` + cache creation + cache read: Anthropic's
  ``input_tokens`` excludes cached ones), ``cached_tokens`` (=
  ``cache_read_input_tokens``) and ``cache_write_tokens`` (=
  ``cache_creation_input_tokens``, what this request wrote to the cache); its
  ``output_tokens`` is a placeholder, not the count.
  ``message_delta`` carries the final ``completion_tokens`` (= ``output_tokens``).
- stop reasons in the Chat Completions words (``end_turn`` -> ``stop``,
  ``max_tokens`` -> ``length``, ``tool_use`` -> ``tool_calls``, ...).
- ``error`` events are classed by their type: ``overloaded_error`` -> ``http_5xx``
  (Anthropic's status 529), ``rate_limit_error`` -> ``http_429``.

Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from tokrate.client.chunks import ChunkError, ChunkFacts, _count
from tokrate.client.events_common import event_object, event_type, fail_facts, has_text

__all__ = ["ANTHROPIC_STOP_REASONS", "classify_anthropic_event"]

#: Anthropic ``stop_reason`` -> the Chat Completions finish word.
ANTHROPIC_STOP_REASONS: Final[Mapping[str, str]] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
    "pause_turn": "stop",
}
_INPUT_PARTS: Final = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


def _usage(usage: Any, *, with_output: bool) -> dict[str, int]:
    if not isinstance(usage, dict):
        raise ChunkError(f"usage is not an object: {usage!r:.40}")
    out: dict[str, int] = {}
    if with_output:
        if usage.get("output_tokens") is None:
            raise ChunkError("message_delta usage has no output_tokens")
        out["completion_tokens"] = _count(usage["output_tokens"], "output_tokens")
    if usage.get("input_tokens") is not None:
        out["prompt_tokens"] = sum(_count(usage.get(k), k) for k in _INPUT_PARTS)
    if usage.get("cache_read_input_tokens") is not None:
        out["cached_tokens"] = _count(usage["cache_read_input_tokens"], "cache_read_input_tokens")
    if usage.get("cache_creation_input_tokens") is not None:
        out["cache_write_tokens"] = _count(
            usage["cache_creation_input_tokens"], "cache_creation_input_tokens"
        )
    return out


def _index(data: dict[str, Any]) -> int:
    index = data.get("index")
    return index if isinstance(index, int) and not isinstance(index, bool) else 0


def _delta(facts: ChunkFacts, data: dict[str, Any]) -> ChunkFacts:
    delta = data.get("delta")
    if isinstance(delta, dict):
        kind = delta.get("type")
        if kind == "text_delta":
            facts.answer = has_text(delta.get("text"))
        elif kind == "thinking_delta":
            facts.reasoning = has_text(delta.get("thinking"))
        elif kind == "input_json_delta":
            partial = delta.get("partial_json")
            if has_text(partial):
                facts.tool_call = True
                facts.tool_parts = [(_index(data), None, partial)]
    return facts


def _message_start(facts: ChunkFacts, message: object) -> ChunkFacts:
    if isinstance(message, dict):
        if isinstance(message.get("id"), str):
            facts.response_id = message["id"]
        if isinstance(message.get("model"), str):
            facts.model = message["model"]
        if message.get("usage") is not None:
            facts.usage = _usage(message["usage"], with_output=False) or None
    return facts


def classify_anthropic_event(obj: object, event_name: str | None = None) -> ChunkFacts:
    """Classify one parsed Messages event (``event_name``: its SSE ``event:`` line,
    used when the data has no ``type``). Unknown types (and ``ping``) are empty facts.

    Raises:
        ChunkError: not a JSON object, or a malformed usage object.
    """
    data = event_object(obj)
    type_ = event_type(data, event_name)
    facts = ChunkFacts()
    if type_ == "content_block_delta":
        return _delta(facts, data)
    if type_ == "content_block_start":
        block = data.get("content_block")
        if isinstance(block, dict):  # empty in practice; counted when it is not
            facts.answer = block.get("type") == "text" and has_text(block.get("text"))
            facts.reasoning = block.get("type") == "thinking" and has_text(block.get("thinking"))
            if block.get("type") == "tool_use":
                name = block.get("name")
                facts.tool_parts = [(_index(data), name if has_text(name) else None, "")]
        return facts
    if type_ == "message_start":
        return _message_start(facts, data.get("message"))
    if type_ == "message_delta":
        delta = data.get("delta")
        reason = delta.get("stop_reason") if isinstance(delta, dict) else None
        if reason is not None:
            facts.finish_reason = ANTHROPIC_STOP_REASONS.get(str(reason), str(reason))
        if data.get("usage") is not None:
            facts.usage = _usage(data["usage"], with_output=True)
        return facts
    if type_ == "message_stop":
        facts.end_of_stream = True
        return facts
    if type_ == "error":
        nested = data.get("error")
        err = nested if isinstance(nested, dict) else {}
        facts.end_of_stream = True
        return fail_facts(facts, err.get("message"), None, err.get("type"))
    return facts
