"""Prompt files in other shapes: conversations (multi-turn sessions), ShareGPT traces,
OpenAI batch files. Local files only; nothing is ever downloaded.

- Conversation JSONL (one session per line)::

      {"id": "s1", "system": "You are terse.", "turns": [{"user": "Hi"},
       {"user": "And then?", "max_tokens": 64}], "max_tokens": 128, "think_time_s": 2}

  ``turns`` is a non-empty list of ``{"user": TEXT, "max_tokens": N, "expect": {...}}``
  objects (or plain strings; ``expect``: :mod:`tokrate.spec.expect`); ``system``, ``id``, ``task``, ``max_tokens`` (every turn's default)
  and ``think_time_s`` are optional. Each turn sends the whole history with the
  model's real previous answers.
- ShareGPT JSON (a list of ``{"id", "conversations": [{"from": "human"|"gpt"|
  "system", "value": TEXT}, ...]}``): each conversation's first human message (after
  its system message, if any) is one prompt, and the gpt reply after it sets
  ``max_tokens`` to the reply's length in tokens (as the simulator counts: ceil(bytes /
  4)). Conversations without a human message followed by a gpt reply are skipped.
- OpenAI batch JSONL (``{"custom_id", "method", "url", "body": {"model", "messages",
  "max_tokens", ...}}``): each line is one prompt with id ``custom_id``, the body's
  ``messages`` (or ``prompt`` for /v1/completions) and ``max_tokens`` (or
  ``max_completion_tokens``); every other body field (tools, response_format,
  sampling settings, ...) is sent as written (:mod:`tokrate.inputs.request_body`),
  except ``model``, ``stream`` and ``stream_options``, which tokrate owns (the run's
  targets say which models answer). An ``expect`` beside ``body`` is the line's check
  (:mod:`tokrate.spec.expect`); without one, the check its body implies
  (:func:`tokrate.inputs.request_body.line_expect`; ``"expect": false``: none).

A conversation line may carry a ``body`` too (its request fields, sent with every
turn). Media parts naming a ``file`` are read relative to the prompts file
(:mod:`tokrate.inputs.media_parts`).

Errors are :class:`~tokrate.errors.PromptError`, one line naming the file (and line or
entry).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tokrate.errors import PromptError
from tokrate.inputs.media_parts import resolve_media
from tokrate.inputs.prompt_base import (
    Prompt,
    Turn,
    check_messages,
    decode_utf8,
    make_prompt,
    parse_json_text,
)
from tokrate.inputs.request_body import PromptBody, line_expect, parse_body
from tokrate.physics import count_text_tokens

__all__ = [
    "is_batch_line",
    "is_session_line",
    "line_body",
    "parse_batch_line",
    "parse_session_line",
    "parse_sharegpt",
]


def is_session_line(obj: object) -> bool:
    return isinstance(obj, dict) and "turns" in obj


def is_batch_line(obj: object) -> bool:
    return isinstance(obj, dict) and "custom_id" in obj and "body" in obj


def _positive(value: object, where: str, key: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PromptError(f"{where}: '{key}' must be a positive integer, got {value!r}")
    return value


def _text(value: object, where: str, key: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise PromptError(f"{where}: '{key}' must be a non-empty string")
    return value


def _id(obj: dict[str, Any], key: str, default: str, where: str) -> str:
    pid = obj.get(key, default)
    if isinstance(pid, bool) or not isinstance(pid, str | int) or not str(pid).strip():
        raise PromptError(f"{where}: '{key}' must be a non-empty string or an integer")
    return str(pid)


def _turn(raw: object, where: str, default_max: int | None, body: PromptBody) -> Turn:
    if isinstance(raw, str):
        return Turn(_text(raw, where, "user"), default_max, line_expect(None, body, where))
    if not isinstance(raw, dict):
        raise PromptError(f"{where}: a turn must be a string or an object with 'user'")
    limit = _positive(raw.get("max_tokens"), where, "max_tokens")
    expect = line_expect(raw.get("expect"), body, where)
    return Turn(_text(raw.get("user"), where, "user"), limit or default_max, expect)


def line_body(obj: dict[str, Any], where: str) -> PromptBody:
    """A prompt or conversation line's optional ``body`` (its request fields)."""
    if obj.get("body") is None:
        return PromptBody()
    return parse_body(obj["body"], where, with_prompt=False)


def parse_session_line(
    obj: dict[str, Any], where: str, default_id: str, default_task: str, think_time_s: float
) -> Prompt:
    """One conversation line (see the module doc) as a session Prompt."""
    raw_turns = obj.get("turns")
    if not isinstance(raw_turns, list) or not raw_turns:
        raise PromptError(f"{where}: 'turns' must be a non-empty list")
    default_max = _positive(obj.get("max_tokens"), where, "max_tokens")
    body = line_body(obj, where)
    turns = [_turn(t, f"{where} turns[{i}]", default_max, body) for i, t in enumerate(raw_turns)]
    think = obj.get("think_time_s", think_time_s)
    if isinstance(think, bool) or not isinstance(think, int | float) or not think >= 0:
        raise PromptError(f"{where}: 'think_time_s' must be a number >= 0, got {think!r}")
    task = obj.get("task", default_task)
    messages = []
    if "system" in obj:
        messages.append({"role": "system", "content": _text(obj["system"], where, "system")})
    messages.append({"role": "user", "content": turns[0].user})
    return make_prompt(
        id=_id(obj, "id", default_id, where),
        task=_text(task, where, "task"),
        messages=messages,
        prompt=None,
        max_tokens=turns[0].max_tokens,
        source=where,
        turns=turns[1:],
        think_time_s=float(think),
        expect=turns[0].expect,
        body=body.fields,
        max_tokens_field=body.limit_field,
    )


def parse_batch_line(
    obj: dict[str, Any], where: str, default_task: str, base_dir: Path | None = None
) -> Prompt:
    """One OpenAI batch-file line (see the module doc) as a Prompt; ``base_dir`` is
    where media files it names are read from (None: it may name none)."""
    raw = obj.get("body")
    if not isinstance(raw, dict):
        raise PromptError(f"{where}: 'body' must be an object")
    body = parse_body(raw, where, with_prompt=True)
    has_messages = "messages" in raw
    if has_messages == ("prompt" in raw):
        raise PromptError(f"{where}: 'body' needs exactly one of 'messages' or 'prompt'")
    messages = None
    if has_messages:
        checked = check_messages(raw["messages"], f"{where} body")
        messages = resolve_media(checked, base_dir, f"{where} body")
    prompt = None if has_messages else _text(raw.get("prompt"), where, "body.prompt")
    return make_prompt(
        id=_id(obj, "custom_id", "", where),
        task=default_task,
        messages=messages,
        prompt=prompt,
        max_tokens=body.limit,
        source=where,
        expect=line_expect(obj.get("expect"), body, where),
        body=body.fields,
        max_tokens_field=body.limit_field,
    )


_ROLE_OF = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "bard": "assistant",
    "bing": "assistant",
    "system": "system",
}


def _sharegpt_prompt(entry: object, where: str, default_id: str, task: str) -> Prompt | None:
    if not isinstance(entry, dict):
        raise PromptError(f"{where}: expected an object with 'conversations'")
    conv = entry.get("conversations")
    if not isinstance(conv, list):
        raise PromptError(f"{where}: 'conversations' must be a list")
    messages: list[dict[str, Any]] = []
    for i, turn in enumerate(conv):
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            raise PromptError(f"{where}: conversations[{i}] must have a string 'value'")
        role = _ROLE_OF.get(str(turn.get("from", "")).lower())
        if role is None:
            raise PromptError(f"{where}: conversations[{i}].from {turn.get('from')!r} unknown")
        if role == "system" and not messages:
            messages.append({"role": "system", "content": turn["value"]})
        elif role == "user" and turn["value"].strip():
            nxt = conv[i + 1] if i + 1 < len(conv) else None
            if not isinstance(nxt, dict) or _ROLE_OF.get(str(nxt.get("from", "")).lower()) != (
                "assistant"
            ):
                return None
            reply = nxt.get("value")
            if not isinstance(reply, str) or not reply:
                return None
            messages.append({"role": "user", "content": turn["value"]})
            return make_prompt(
                id=_id(entry, "id", default_id, where),
                task=task,
                messages=messages,
                prompt=None,
                max_tokens=max(1, count_text_tokens(reply)),
                source=where,
            )
        else:
            return None
    return None


def parse_sharegpt(data: bytes, name: str, *, default_task: str | None = None) -> list[Prompt]:
    """Prompts of a ShareGPT-format JSON file (see the module doc).

    Raises:
        PromptError: not UTF-8, not JSON, not a list of conversations, or no usable one.
    """
    text = decode_utf8(data, name)
    entries = parse_json_text(text, name)
    if not isinstance(entries, list):
        raise PromptError(f"{name}: a ShareGPT file is a JSON list of conversations")
    stem = Path(name).stem
    task = default_task or stem
    out = []
    for n, entry in enumerate(entries):
        p = _sharegpt_prompt(entry, f"{name} entry {n}", f"{stem}:{n}", task)
        if p is not None:
            out.append(p)
    if not out:
        raise PromptError(f"{name}: no conversation with a human message and a gpt reply")
    return out
