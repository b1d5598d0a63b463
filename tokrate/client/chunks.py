"""Classify one decoded OpenAI streaming chunk (chat or legacy completions).

A chunk is *content-bearing* when it carries non-empty answer text, reasoning text
(``reasoning_content`` or ``reasoning``) or a tool-call delta; only those count for
TTFT, ITL and the chunk-count fallback of output tokens. Role-only chunks, empty
deltas, finish-only chunks and usage-only chunks (empty ``choices``) do not.

A tool-call chunk also says which call it continues and what it adds
(``ChunkFacts.tool_parts``: ``(key, name or None, arguments text)``), so the client can
keep each call's name and arguments (:class:`~tokrate.client.accumulate.StreamState`).

Besides content, a chunk may say which model answered (``model``, kept as sent, at
most :data:`MAX_MODEL_CHARS`), how many prompt tokens the server took from its prompt
cache (``usage.prompt_tokens_details.cached_tokens``, or llama.cpp's
``timings.cache_n``), and the server's own per-request timing object in its usage (or
choice-less) chunk, under one of :data:`TIMING_KEYS` (llama.cpp ``timings``, vLLM
``metrics``, NVIDIA NIM ``stats``): only finite numeric entries are kept, and objects
of them one level down (vLLM's ``speculative_decoding``), at most
:data:`MAX_TIMING_KEYS`; which key it came from is kept beside it.

Pure functions over already-parsed JSON; nothing here touches the clock.
"""

from __future__ import annotations

import math
from typing import Any, Final

__all__ = [
    "MAX_MODEL_CHARS",
    "MAX_SANE_TOKENS",
    "MAX_TIMING_KEYS",
    "TIMING_KEYS",
    "ChunkFacts",
    "ChunkError",
    "classify_chunk",
    "clean_model",
    "parse_timings",
    "parse_usage",
    "plain_answer",
]

#: Usage counts above this are treated as garbage (no real response is 100M tokens).
MAX_SANE_TOKENS: Final = 100_000_000
#: A response's ``model`` longer than this is cut (a path to a .gguf can be long).
MAX_MODEL_CHARS: Final = 256
#: Entries of a server timing object kept (llama.cpp sends 7); more is not timing.
MAX_TIMING_KEYS: Final = 32
_MAX_TIMING_KEY_CHARS: Final = 64
#: Where servers put a request's own timings in a response, looked up in this order:
#: llama.cpp ``timings``, vLLM's per-request ``metrics``, NVIDIA NIM's ``stats``.
TIMING_KEYS: Final = ("timings", "metrics", "stats")


class ChunkError(ValueError):
    """The chunk is not a valid OpenAI stream chunk (message says why, one line)."""


class ChunkFacts:
    """What one chunk says. ``answer``/``reasoning``/``tool_call`` are True when the
    chunk carries that kind of non-empty content; ``usage`` is the parsed usage (see
    :func:`parse_usage`) or None; ``error`` is an in-band error object's message.
    ``model`` is a response model name a classifier of another protocol found (the
    chat classifier leaves it None: StreamState reads ``model`` from the first chunk
    itself, so content chunks pay nothing for it), ``timings`` the server timing object
    of a usage or choice-less chunk (:func:`parse_timings`), ``error_kind`` an in-band error's ``type`` or string
    ``code`` (how a context overflow is told apart)."""

    # Fields added later go at the end (several branches add some): not sorted.
    __slots__ = (  # noqa: RUF023
        "answer",
        "error",
        "error_code",
        "finish_reason",
        "reasoning",
        "response_id",
        "tool_call",
        "usage",
        "model",
        "timings",
        "error_kind",
        # Typed protocols (tokrate.client.events_*): the terminator event, and the
        # record error class an in-band error stands for.
        "end_of_stream",
        "error_class",
        # The response key the timing object came from (one of TIMING_KEYS).
        "timings_source",
        # What a tool-call chunk adds to which call (None: nothing).
        "tool_parts",
    )

    def __init__(self) -> None:
        self.answer = False
        self.reasoning = False
        self.tool_call = False
        self.finish_reason: str | None = None
        self.usage: dict[str, int] | None = None
        self.error: str | None = None
        self.error_code: int | None = None
        self.response_id: str | None = None
        self.model: str | None = None
        self.timings: dict[str, Any] | None = None
        self.timings_source: str | None = None
        self.error_kind: str | None = None
        #: True for the protocol's terminator (response.completed/incomplete/failed,
        #: message_stop); chat's [DONE] is not a chunk.
        self.end_of_stream = False
        #: The class of an in-band error (None: decided from error_code).
        self.error_class: str | None = None
        #: ``(call key, name or None, arguments text)`` per tool call this chunk adds
        #: to: the key is the call's index in its protocol (chat ``index``, Responses
        #: ``output_index``, Anthropic block ``index``); None when it adds to none.
        self.tool_parts: list[tuple[int, str | None, str]] | None = None

    @property
    def content_bearing(self) -> bool:
        """True when this chunk counts as a token arrival (TTFT/ITL)."""
        return self.answer or self.reasoning or self.tool_call

    @property
    def kind(self) -> str:
        """One word for tests and debug output: error, tool_call, content, reasoning,
        usage, finish or empty (role-only and empty deltas)."""
        if self.error is not None:
            return "error"
        if self.tool_call:
            return "tool_call"
        if self.answer:
            return "content"
        if self.reasoning:
            return "reasoning"
        if self.usage is not None:
            return "usage"
        if self.finish_reason is not None:
            return "finish"
        return "empty"


def json_text(value: Any) -> str:
    """``value`` as the JSON it came as: ``true``, ``NaN``, ``Infinity``, ``"many"``
    (the lenient parsers some clients use turn those into Python values)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, str):
        return f'"{value[:38]}"'
    return f"{value!r:.40}"


def _count(value: Any, field: str) -> int:
    """The one rule for a token count in usage, in every client: a JSON integer (never
    ``true``, ``NaN``, ``Infinity`` or ``1.5``), 0 to MAX_SANE_TOKENS."""
    # bool is an int subclass; true/false are never token counts.
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool):
        raise ChunkError(f"usage.{field} is not an integer: {json_text(value)}")
    if value < 0 or value > MAX_SANE_TOKENS:
        raise ChunkError(f"usage.{field}={value} is not a plausible token count")
    return value


def parse_usage(usage: Any) -> dict[str, int]:
    """Validate a ``usage`` object into ``{"completion_tokens"}`` plus
    ``"prompt_tokens"`` and ``"reasoning_tokens"`` when the server reports them.

    Raises:
        ChunkError: not an object, a count that is not an int, negative or absurd.
    """
    if not isinstance(usage, dict):
        raise ChunkError(f"usage is not an object: {usage!r:.40}")
    if usage.get("completion_tokens") is None:
        raise ChunkError("usage has no completion_tokens")
    out = {"completion_tokens": _count(usage["completion_tokens"], "completion_tokens")}
    if usage.get("prompt_tokens") is not None:
        out["prompt_tokens"] = _count(usage["prompt_tokens"], "prompt_tokens")
    details = usage.get("completion_tokens_details")
    if isinstance(details, dict) and details.get("reasoning_tokens") is not None:
        out["reasoning_tokens"] = _count(
            details["reasoning_tokens"], "completion_tokens_details.reasoning_tokens"
        )
    prompt_details = usage.get("prompt_tokens_details")
    if isinstance(prompt_details, dict) and prompt_details.get("cached_tokens") is not None:
        out["cached_tokens"] = _count(
            prompt_details["cached_tokens"], "prompt_tokens_details.cached_tokens"
        )
    return out


def _number(value: Any) -> bool:
    return (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and math.isfinite(value)
        and abs(value) <= 1e15
    )


def parse_timings(timings: Any, *, nested: bool = True) -> dict[str, Any] | None:
    """A server's timing object as ``{name: number}``: only entries whose key is a short
    string and whose value a finite int or float (not bool) are kept, and (``nested``)
    objects one level down parsed the same way (vLLM's ``speculative_decoding``), at
    most :data:`MAX_TIMING_KEYS` entries in all; None when nothing usable is left.
    Never raises: timings are the server's extra, never a reason to fail a measured
    stream."""
    if not isinstance(timings, dict):
        return None
    out: dict[str, Any] = {}
    kept = 0
    for key, value in timings.items():
        if kept >= MAX_TIMING_KEYS:
            break
        if not isinstance(key, str) or not key or len(key) > _MAX_TIMING_KEY_CHARS:
            continue
        if _number(value):
            out[key] = value
            kept += 1
        elif nested and isinstance(value, dict):
            inner = parse_timings(value, nested=False)
            if inner is not None:
                inner = dict(list(inner.items())[: MAX_TIMING_KEYS - kept])
                out[key] = inner
                kept += len(inner)
    return out or None


def clean_model(value: str) -> str | None:
    """A response's ``model`` as kept: printable characters only, at most
    :data:`MAX_MODEL_CHARS`; None when nothing is left. Called once per stream (on the
    first chunk naming a model), never per chunk: this is the hot path."""
    text = "".join(ch for ch in value[: MAX_MODEL_CHARS * 4] if ch.isprintable()).strip()
    return text[:MAX_MODEL_CHARS] or None


def _error_facts(facts: ChunkFacts, err: Any) -> ChunkFacts:
    if isinstance(err, dict):
        message = err.get("message") or err.get("type") or "error"
        code = err.get("code")
        kind = err.get("type") if isinstance(err.get("type"), str) else code
        if isinstance(kind, str) and kind:
            facts.error_kind = kind[:80]
        if isinstance(code, str) and code.isdigit():
            code = int(code)
        if isinstance(code, int) and not isinstance(code, bool) and 100 <= code <= 599:
            facts.error_code = code
    else:
        message = err
    facts.error = " ".join(str(message).split())[:200] or "error"
    return facts


def classify_chunk(obj: Any) -> ChunkFacts:
    """Classify one parsed ``data:`` payload.

    Accepts chat chunks (``choices[].delta`` with ``content``, ``reasoning_content``,
    ``reasoning``, ``tool_calls``, legacy ``function_call``) and legacy completions
    chunks (``choices[].text``). Several choices are merged (any content counts).

    Raises:
        ChunkError: not an object, ``choices`` missing (and no usage/error) or not a
            list, or a malformed usage object.
    """
    facts = ChunkFacts()
    if not isinstance(obj, dict):
        raise ChunkError(f"chunk is not a JSON object: {obj!r:.60}")
    err = obj.get("error")
    if err is not None:
        return _error_facts(facts, err)
    rid = obj.get("id")
    if isinstance(rid, str):
        facts.response_id = rid
    usage = obj.get("usage")
    if usage is not None:
        facts.usage = parse_usage(usage)
    choices = obj.get("choices")
    if choices is None:
        _read_timings(facts, obj)
        if facts.usage is None and facts.timings is None:
            raise ChunkError("chunk has no choices")
        return facts
    if not isinstance(choices, list):
        raise ChunkError("chunk choices is not a list")
    for choice in choices:
        _merge_choice(facts, choice)
    if facts.usage is not None or not choices:
        # Timing objects ride in the usage chunk (llama.cpp); content chunks, the hot
        # path, are not searched for one.
        _read_timings(facts, obj)
    return facts


def plain_answer(obj: object) -> object:
    """The ``delta.content`` of a chat chunk that :func:`classify_chunk` would find to
    say nothing but answer text (one choice, non-empty content, no reasoning, tool
    call, finish_reason, usage or error); None for every other chunk (classify it).

    The per-token shortcut: the common chunk skips building a ChunkFacts. Exact types
    only (what orjson gives), so anything unusual takes the full classifier.
    """
    if type(obj) is not dict or obj.get("error") is not None or obj.get("usage") is not None:
        return None
    choices = obj.get("choices")
    if type(choices) is not list or len(choices) != 1:
        return None
    choice = choices[0]
    if type(choice) is not dict or choice.get("finish_reason") is not None:
        return None
    delta = choice.get("delta")
    if type(delta) is not dict:
        return None
    content = delta.get("content")
    if not content or (
        delta.get("reasoning_content")
        or delta.get("reasoning")
        or delta.get("tool_calls")
        or delta.get("function_call")
    ):
        return None
    return content


def _tool_parts(facts: ChunkFacts, delta: dict[str, Any]) -> None:
    """What a chat delta's ``tool_calls`` (or legacy ``function_call``, call 0) add:
    each entry's ``index`` (its position when missing), function name and arguments."""
    calls = delta.get("tool_calls")
    entries = calls if isinstance(calls, list) else [{"function": delta.get("function_call")}]
    parts = facts.tool_parts if facts.tool_parts is not None else []
    for position, entry in enumerate(entries):
        if not isinstance(entry, dict):
            continue
        index = entry.get("index", position)
        function = entry.get("function")
        function = function if isinstance(function, dict) else {}
        name, arguments = function.get("name"), function.get("arguments")
        parts.append(
            (
                index if isinstance(index, int) and not isinstance(index, bool) else position,
                name if isinstance(name, str) and name else None,
                arguments if isinstance(arguments, str) else "",
            )
        )
    facts.tool_parts = parts


def _read_timings(facts: ChunkFacts, obj: dict[str, Any]) -> None:
    for key in TIMING_KEYS:
        timings = obj.get(key)
        if timings is not None:
            parsed = parse_timings(timings)
            if parsed is not None:
                facts.timings, facts.timings_source = parsed, key
                return


def _merge_choice(facts: ChunkFacts, choice: object) -> None:
    if not isinstance(choice, dict):
        raise ChunkError("chunk choice is not an object")
    delta = choice.get("delta")
    if isinstance(delta, dict):
        if delta.get("content"):
            facts.answer = True
        if delta.get("reasoning_content") or delta.get("reasoning"):
            facts.reasoning = True
        if delta.get("tool_calls") or delta.get("function_call"):
            facts.tool_call = True
            _tool_parts(facts, delta)
    elif choice.get("text"):
        facts.answer = True
    reason = choice.get("finish_reason")
    if reason is not None:
        facts.finish_reason = str(reason)
