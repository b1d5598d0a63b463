"""Request bodies of the Responses API and of Anthropic Messages, planned.

Each parser turns a body into the same :class:`~tokrate.sim.request_plan.RequestPlan`
the Chat Completions parser makes, so one engine, one fault draw and one truth-log line
serve every protocol; only the reasoning rule differs:

- Responses: the tier's ``reasoning_tokens``, none with ``reasoning.effort = "none"``.
- Messages: ``min(thinking.budget_tokens, tier reasoning_tokens)`` with
  ``thinking: {"type": "enabled", ...}``, the tier's with ``"adaptive"``, else none.

Mistakes become :class:`~tokrate.sim.request_plan.BadRequest` with the status the
provider uses; the message texts follow the provider's wording.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import orjson

from tokrate.physics import count_request_tokens
from tokrate.sim.answer_shape import AnswerShape, messages_shape, responses_shape
from tokrate.sim.answers import reference
from tokrate.sim.bad_request import BadRequest, invalid, model_not_found
from tokrate.sim.model import TierTiming
from tokrate.sim.prefix_cache import breakpoint_tokens, chat_block_keys
from tokrate.sim.request_plan import RequestPlan, extra_limits, json_object, plan_length

__all__ = [
    "ANTHROPIC_MIN_THINKING_BUDGET",
    "RESPONSES_EFFORTS",
    "RESPONSES_MIN_OUTPUT_TOKENS",
    "plan_messages",
    "plan_responses",
]

#: OpenAI refuses a smaller ``max_output_tokens``.
RESPONSES_MIN_OUTPUT_TOKENS = 16
RESPONSES_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
_SUMMARIES = ("auto", "concise", "detailed")
#: Anthropic refuses a smaller ``thinking.budget_tokens``.
ANTHROPIC_MIN_THINKING_BUDGET = 1024


def _stream_flag(body: Mapping[str, Any]) -> bool:
    stream = body.get("stream", False)
    if stream not in (True, False, None):
        raise invalid("'stream' must be a boolean", "stream")
    return bool(stream)


def _text_parts(content: Any, where: str) -> Any:
    """Responses content parts (``input_text``/``output_text``, ``input_image``) as the
    chat parts the shared token count reads; a string stays a string."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid(f"Invalid type for '{where}': expected a string or an array.", where)
    parts: list[dict[str, Any]] = []
    for p in content:
        if not isinstance(p, dict):
            continue
        if isinstance(p.get("text"), str):
            parts.append({"type": "text", "text": p["text"]})
        elif p.get("type") == "input_image":
            image = {"url": p.get("image_url"), "detail": p.get("detail")}
            parts.append({"type": "image_url", "image_url": image})
    return parts


def _responses_item(item: Mapping[str, Any]) -> dict[str, Any] | None:
    """A function call of an earlier turn, or its output, as the chat message the
    shared token count reads; None for items that carry no text (reasoning)."""
    kind = item.get("type")
    if kind == "function_call":
        function = {"name": item.get("name"), "arguments": item.get("arguments")}
        return {"role": "assistant", "content": None, "tool_calls": [{"function": function}]}
    if kind == "function_call_output":
        output = item.get("output")
        return {"role": "tool", "content": output if isinstance(output, str) else ""}
    return None


def _responses_messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    items = body.get("input")
    if isinstance(items, str):
        messages: list[dict[str, Any]] = [{"role": "user", "content": items}]
    elif isinstance(items, list) and items:
        messages = []
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise invalid(f"Invalid type for 'input[{i}]': expected an object.", f"input[{i}]")
            if item.get("type", "message") != "message":
                converted = _responses_item(item)
                if converted is not None:
                    messages.append(converted)
                continue
            if not isinstance(item.get("role"), str):
                raise invalid(f"Missing required parameter: 'input[{i}].role'.", f"input[{i}].role")
            content = _text_parts(item.get("content", ""), f"input[{i}].content")
            messages.append({"role": item["role"], "content": content})
    else:
        raise invalid("Missing required parameter: 'input'.", "input", "missing_required_parameter")
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise invalid("Invalid type for 'instructions': expected a string.", "instructions")
    if instructions:
        messages = [{"role": "developer", "content": instructions}, *messages]
    return messages


def _responses_reasoning(body: Mapping[str, Any]) -> dict[str, Any]:
    reasoning = body.get("reasoning")
    if reasoning is None:
        return {"effort": None, "summary": None}
    if not isinstance(reasoning, dict):
        raise invalid("Invalid type for 'reasoning': expected an object.", "reasoning")
    effort = reasoning.get("effort")
    if effort is not None and effort not in RESPONSES_EFFORTS:
        raise invalid(
            f"Invalid value: {effort!r}. Supported values are: "
            + ", ".join(repr(e) for e in RESPONSES_EFFORTS)
            + ".",
            "reasoning.effort",
            "invalid_value",
        )
    summary = reasoning.get("summary", reasoning.get("generate_summary"))
    if summary is not None and summary not in _SUMMARIES:
        raise invalid(
            f"Invalid value: {summary!r}. Supported values are: 'auto', 'concise' and 'detailed'.",
            "reasoning.summary",
            "invalid_value",
        )
    return {"effort": effort, "summary": summary}


def plan_responses(
    raw: bytes,
    timings: Mapping[str, TierTiming],
    rngs: Mapping[str, random.Random],
    block_keys: bool = False,
) -> RequestPlan:
    """POST /v1/responses: ``input`` (a string or message items), ``instructions``,
    ``max_output_tokens`` (>= 16), ``reasoning: {effort, summary}``, ``stream``.

    Reasoning streams as ``reasoning_summary_text`` deltas when ``reasoning.summary``
    is set, else as ``reasoning_text`` deltas (as open-weight servers send it).
    """
    body = json_object(raw)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise invalid("Missing required parameter: 'model'.", "model", "missing_required_parameter")
    timing = timings.get(model)
    if timing is None:
        raise model_not_found(model)
    tier = timing.tier
    stream = _stream_flag(body)
    messages = _responses_messages(body)
    shape = responses_shape(body)
    input_tokens = _counted(messages, shape)
    limit = body.get("max_output_tokens")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
        raise invalid(
            f"Invalid type for 'max_output_tokens': expected an integer, but got {limit!r}.",
            "max_output_tokens",
            "invalid_type",
        )
    if limit is not None and limit < RESPONSES_MIN_OUTPUT_TOKENS:
        raise invalid(
            "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= "
            f"{RESPONSES_MIN_OUTPUT_TOKENS}, but got {limit} instead.",
            "max_output_tokens",
            "integer_below_min_value",
        )
    if input_tokens + (limit or 1) > tier.context_tokens:
        raise invalid(
            f"Your input exceeds the context window of this model ({tier.context_tokens} "
            f"tokens: {input_tokens} in the input, {limit or 0} for the output). Please adjust "
            "your input and try again.",
            "input",
            "context_length_exceeded",
        )
    reasoning = _responses_reasoning(body)
    n, finish = plan_length(tier, rngs[model], input_tokens, extra_limits(body, limit))
    reasoning_tokens = 0 if reasoning["effort"] == "none" else tier.reasoning_tokens
    echo = {
        "instructions": body.get("instructions"),
        "max_output_tokens": limit,
        "reasoning": reasoning,
    }
    keys = chat_block_keys(messages) if block_keys else ()
    return RequestPlan(
        model=model,
        input_tokens=input_tokens,
        output_tokens=n,
        finish_reason=finish,
        stream=stream,
        include_usage=False,
        reasoning_tokens=reasoning_tokens,
        echo=echo,
        block_keys=keys,
        reference=reference(body),
        shape=shape,
        output_limit=limit,
    )


def _counted(messages: list[dict[str, Any]], shape: AnswerShape) -> int:
    tools = [t.counted() for t in shape.tools]
    return count_request_tokens(messages, tools, shape.json_schema)


def _anthropic_block(block: Any) -> Any:
    """An Anthropic content block as the chat part the shared token count reads: an
    image as an ``image_url`` part (base64 as a data URL), a tool call's name and
    input, a tool result's text; text blocks as they are."""
    if not isinstance(block, dict):
        return block
    kind = block.get("type")
    if kind == "image":
        source = block.get("source")
        source = source if isinstance(source, dict) else {}
        url = source.get("url")
        if source.get("type") == "base64":
            url = f"data:{source.get('media_type')};base64,{source.get('data')}"
        return {"type": "image_url", "image_url": {"url": url}}
    if kind == "tool_use":
        text = f"{block.get('name', '')}{orjson.dumps(block.get('input')).decode()}"
        return {"type": "text", "text": text}
    if kind == "tool_result":
        content = block.get("content")
        if isinstance(content, list):
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        return {"type": "text", "text": content if isinstance(content, str) else ""}
    return block


def _anthropic_counted(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    if not isinstance(content, list):
        return message
    return {**message, "content": [_anthropic_block(b) for b in content]}


def _anthropic_messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    messages = body.get("messages")
    if messages is None:
        raise invalid("messages: Field required")
    if not isinstance(messages, list) or not messages:
        raise invalid("messages: Input should be a non-empty list")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise invalid(f"messages.{i}: Input should be a valid dictionary")
        if m.get("role") not in ("user", "assistant"):
            raise invalid(f"messages.{i}.role: Input should be 'user' or 'assistant'")
        if not isinstance(m.get("content"), str | list):
            raise invalid(f"messages.{i}.content: Input should be a valid string or list")
    system = body.get("system")
    if system is None:
        return messages
    if not isinstance(system, str | list):
        raise invalid("system: Input should be a valid string or list of text blocks")
    return [{"role": "system", "content": system}, *messages]


def _thinking_tokens(body: Mapping[str, Any], max_tokens: int, tier_reasoning: int) -> int:
    thinking = body.get("thinking")
    if thinking is None:
        return 0
    kind = thinking.get("type") if isinstance(thinking, dict) else None
    if kind == "disabled":
        return 0
    if kind == "adaptive":
        return tier_reasoning
    if kind != "enabled":
        raise invalid(
            "thinking: Input tag does not match any of the expected tags: 'enabled', "
            "'disabled', 'adaptive'"
        )
    assert isinstance(thinking, dict)
    budget = thinking.get("budget_tokens")
    if isinstance(budget, bool) or not isinstance(budget, int):
        raise invalid("thinking.enabled.budget_tokens: Field required")
    if budget < ANTHROPIC_MIN_THINKING_BUDGET:
        raise invalid(
            "thinking.enabled.budget_tokens: Input should be greater than or equal to "
            f"{ANTHROPIC_MIN_THINKING_BUDGET}"
        )
    if budget >= max_tokens:
        raise invalid("`max_tokens` must be greater than `thinking.budget_tokens`.")
    return min(budget, tier_reasoning)


def plan_messages(
    raw: bytes,
    timings: Mapping[str, TierTiming],
    rngs: Mapping[str, random.Random],
    block_keys: bool = False,
) -> RequestPlan:
    """POST /v1/messages (Anthropic): ``model``, ``max_tokens`` (required),
    ``messages`` (user/assistant), top-level ``system``, ``thinking``, ``stream``."""
    body = json_object(raw)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise invalid("model: Field required")
    timing = timings.get(model)
    if timing is None:
        raise BadRequest(404, f"model: {model}", "not_found_error", None, None)
    tier = timing.tier
    max_tokens = body.get("max_tokens")
    if max_tokens is None:
        raise invalid("max_tokens: Field required")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise invalid("max_tokens: Input should be a valid integer greater than or equal to 1")
    messages = _anthropic_messages(body)
    shape = messages_shape(body)
    input_tokens = _counted([_anthropic_counted(m) for m in messages], shape)
    stream = _stream_flag(body)
    if input_tokens + max_tokens > tier.context_tokens:
        raise invalid(
            f"input length and `max_tokens` exceed context limit: {input_tokens} + "
            f"{max_tokens} > {tier.context_tokens}, decrease input length or `max_tokens` "
            "and try again"
        )
    reasoning = _thinking_tokens(body, max_tokens, tier.reasoning_tokens)
    n, finish = plan_length(tier, rngs[model], input_tokens, extra_limits(body, max_tokens))
    keys = chat_block_keys(messages) if block_keys else ()
    # Anthropic caches only up to a cache_control breakpoint: none, nothing cached.
    limit = (breakpoint_tokens(messages) or 0) if block_keys else None
    return RequestPlan(
        model=model,
        input_tokens=input_tokens,
        output_tokens=n,
        finish_reason=finish,
        stream=stream,
        include_usage=False,
        reasoning_tokens=reasoning,
        block_keys=keys,
        reference=reference(body),
        cache_limit_tokens=limit,
        shape=shape,
        output_limit=max_tokens,
    )
