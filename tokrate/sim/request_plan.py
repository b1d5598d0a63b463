"""What a completion request asks the simulator for: parsed, validated, planned.

Every client mistake becomes a :class:`~tokrate.sim.bad_request.BadRequest` carrying
the OpenAI-style status, type, param and code, so the handler answers it like OpenAI
would.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from tokrate.physics import count_request_tokens, count_text_tokens
from tokrate.sim.answer_shape import AnswerShape, chat_shape
from tokrate.sim.answers import Reference, reference
from tokrate.sim.bad_request import invalid, model_not_found
from tokrate.sim.model import Tier, TierTiming
from tokrate.sim.prefix_cache import chat_block_keys, text_block_keys

__all__ = [
    "Limits",
    "RequestPlan",
    "extra_limits",
    "json_object",
    "opt_int",
    "plan_length",
    "plan_request",
]

# Parameters whose non-default values the simulator cannot honour: name -> the only
# accepted value(s). Anything else in the body is accepted and ignored, as vLLM does.
_UNSUPPORTED: Mapping[str, tuple[object, ...]] = {
    "n": (1, None),
    "best_of": (1, None),
    "echo": (False, None),
    "logprobs": (False, None, 0),
    "top_logprobs": (None, 0),
    "suffix": (None, ""),
}


@dataclass(frozen=True, slots=True)
class RequestPlan:
    """What the simulator will answer one request with, in any protocol.

    ``output_tokens`` includes the ``reasoning_tokens`` that come first;
    ``finish_reason`` is ``"stop"`` or ``"length"``; ``echo`` holds request fields a
    protocol repeats in its response object (Responses: ``instructions``,
    ``max_output_tokens``, ``reasoning``).
    """

    model: str
    input_tokens: int
    output_tokens: int
    finish_reason: str
    stream: bool
    include_usage: bool
    reasoning_tokens: int = 0
    echo: Mapping[str, Any] = field(default_factory=dict)
    #: The prompt's prefix-cache block keys (planned with ``block_keys=True``).
    block_keys: tuple[bytes, ...] = ()
    #: The right answer tokrate told a simulator target (:mod:`tokrate.sim.answers`).
    reference: Reference | None = None
    #: Prompt tokens the prefix cache may serve and keep (Anthropic: up to the last
    #: cache_control breakpoint, 0 without one; None: all, as vLLM's automatic cache).
    cache_limit_tokens: int | None = None
    #: What the answer is asked to be: a tool call, JSON, or text
    #: (:mod:`tokrate.sim.answer_shape`).
    shape: AnswerShape = field(default_factory=AnswerShape)
    #: The request's output limit (None: none), which cuts a planned answer too.
    output_limit: int | None = None


@dataclass(frozen=True, slots=True)
class Limits:
    """Length controls of a request (vLLM's ``min_tokens``/``ignore_eos`` included)."""

    max_tokens: int | None
    min_tokens: int
    ignore_eos: bool


def plan_request(
    raw: bytes,
    *,
    chat: bool,
    timings: Mapping[str, TierTiming],
    length_rng: Mapping[str, random.Random],
    block_keys: bool = False,
) -> RequestPlan:
    """Parse a chat (``chat``) or legacy completions body and plan its answer: the
    output length is the tier's sampled length, capped by max_tokens and the context.
    ``block_keys``: also key the prompt's blocks for the prefix cache.

    Raises:
        BadRequest: anything OpenAI would refuse, or a model no tier serves (404).
    """
    body = json_object(raw)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise invalid("you must provide a model parameter", "model")
    _check_unsupported(body)
    timing = timings.get(model)
    if timing is None:
        raise model_not_found(model)
    shape = chat_shape(body) if chat else AnswerShape()
    input_tokens, prompt_param = _input_tokens(body, shape, chat=chat)
    stream, include_usage = _stream_options(body)
    limits = _limits(body)
    tier = timing.tier
    ctx = tier.context_tokens
    if input_tokens + (limits.max_tokens or 1) > ctx:
        raise invalid(
            f"This model's maximum context length is {ctx} tokens. However, you requested "
            f"{input_tokens + (limits.max_tokens or 0)} tokens ({input_tokens} in the messages, "
            f"{limits.max_tokens or 0} in the completion). Please reduce the length of the "
            "messages or completion.",
            prompt_param,
            "context_length_exceeded",
        )
    n, finish = plan_length(tier, length_rng[model], input_tokens, limits)
    reasoning = tier.reasoning_tokens if chat else 0  # Completions has no field for it
    keys: tuple[bytes, ...] = ()
    if block_keys:
        keys = chat_block_keys(body["messages"]) if chat else text_block_keys(_prompt(body))
    return RequestPlan(
        model=model,
        input_tokens=input_tokens,
        output_tokens=n,
        finish_reason=finish,
        stream=stream,
        include_usage=include_usage,
        reasoning_tokens=reasoning,
        block_keys=keys,
        reference=reference(body),
        shape=shape,
        output_limit=limits.max_tokens,
    )


def plan_length(
    tier: Tier, rng: random.Random, input_tokens: int, limits: Limits
) -> tuple[int, str]:
    """(output tokens, finish reason): the tier's sampled length, capped by
    ``max_tokens`` and the context; ``ignore_eos`` makes it exactly ``max_tokens``."""
    max_tokens = limits.max_tokens
    ctx = tier.context_tokens
    cap = min(max_tokens, ctx - input_tokens) if max_tokens else ctx - input_tokens
    sampled = rng.randint(tier.output_tokens_min, tier.output_tokens_max)
    if limits.ignore_eos:
        n = cap if max_tokens else min(max(sampled, limits.min_tokens), cap)
    else:
        n = min(max(sampled, limits.min_tokens), cap)
    finish = "length" if n == cap and (max_tokens is not None or n < sampled) else "stop"
    return n, finish


def json_object(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object, or a 400 saying why not."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as err:
        raise invalid(f"We could not parse the JSON body of your request: {err}") from None
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object.")
    return body


def _check_unsupported(body: Mapping[str, Any]) -> None:
    for name, allowed in _UNSUPPORTED.items():
        if name in body and body[name] not in allowed:
            raise invalid(
                f"Unsupported value for parameter {name!r}: {body[name]!r} (the simulator "
                f"accepts only {', '.join(repr(a) for a in allowed if a is not None)})",
                name,
                "unsupported_parameter",
            )


def _input_tokens(body: Mapping[str, Any], shape: AnswerShape, *, chat: bool) -> tuple[int, str]:
    """The prompt's token count (its messages, tools and output schema:
    :func:`tokrate.physics.count_request_tokens`) and the parameter that carried it."""
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise invalid("'messages' must be a non-empty array", "messages")
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise invalid(
                    f"messages[{i}] must be an object with a string 'role'", f"messages[{i}]"
                )
        tools = [t.counted() for t in shape.tools]
        return count_request_tokens(messages, tools, shape.json_schema), "messages"
    return max(1, count_text_tokens(_prompt(body))), "prompt"


def _prompt(body: Mapping[str, Any]) -> str:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise invalid("'prompt' must be a string (batched prompts are not supported)", "prompt")
    return prompt


def _stream_options(body: Mapping[str, Any]) -> tuple[bool, bool]:
    """(stream, include_usage)."""
    stream = body.get("stream", False)
    if stream not in (True, False, None):
        raise invalid("'stream' must be a boolean", "stream")
    opts = body.get("stream_options")
    if opts is None:
        return bool(stream), False
    if not stream:
        raise invalid(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            "stream_options",
        )
    if not isinstance(opts, dict):
        raise invalid("'stream_options' must be an object", "stream_options")
    return True, opts.get("include_usage") is True


def _limits(body: Mapping[str, Any]) -> Limits:
    max_tokens = opt_int(body, "max_completion_tokens", 1)
    if max_tokens is None:
        max_tokens = opt_int(body, "max_tokens", 1)
    return extra_limits(body, max_tokens)


def extra_limits(body: Mapping[str, Any], max_tokens: int | None) -> Limits:
    """``max_tokens`` plus the vLLM extensions ``min_tokens`` and ``ignore_eos``
    (honoured on every protocol, so a per-model knob behaves the same everywhere)."""
    min_tokens = opt_int(body, "min_tokens", 0) or 0
    ignore_eos = body.get("ignore_eos", False)
    if not isinstance(ignore_eos, bool):
        raise invalid("'ignore_eos' must be a boolean", "ignore_eos")
    return Limits(max_tokens, min_tokens, ignore_eos)


def opt_int(body: Mapping[str, Any], name: str, minimum: int) -> int | None:
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise invalid(f"'{name}' must be an integer >= {minimum}, got {v!r}", name)
    return v
