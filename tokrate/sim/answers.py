"""Whether a simulated tier answers a checkable prompt right, and the right answer's
tokens.

tokrate tells the simulator (and only a simulator target) what a right answer looks like
in the request field :data:`ANSWER_FIELD`: ``{"text": EXAMPLE, "task": TASK, "key":
PROMPT_ID}`` (docs/quality.md), or instead of ``text`` a right tool call (``"tool_call":
{"name": ..., "arguments": {...}}``, arguments optional), that no tool is to be called
(``"no_tool_call": true``) or the JSON schema a right answer follows (``"json_schema":
{...}``); what the simulator streams for each is :mod:`tokrate.sim.structured`. A tier
answers right with its declared accuracy for the
task (:meth:`tokrate.sim.model.Tier.accuracy_for`): the prompt's draw ``u`` in [0, 1)
is a hash of the seed, the task and the key, the same for every tier, and a tier answers
right when ``u < accuracy``. So the same prompt gets the same verdict every time, a
larger tier (higher accuracy) answers right every prompt a smaller one does, and the
pass rate over many prompts approaches the declared accuracy. A wrong answer is the
simulator's ordinary filler text.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from tokrate.sim.model import Tier

__all__ = ["ANSWER_FIELD", "Reference", "answer_pieces", "answers_right", "draw", "reference"]

#: The request body field that carries the reference answer (simulator targets only).
ANSWER_FIELD: Final = "tokrate_answer"


@dataclass(frozen=True, slots=True)
class Reference:
    """What a right answer to this request is (``text``; None where it is a tool call,
    no tool call or JSON of a schema), and which prompt it is."""

    text: str | None
    task: str
    key: str
    #: The request's output limit (max_tokens, max_completion_tokens or
    #: max_output_tokens), which cuts the answer as it cuts any other.
    max_tokens: int | None = None
    #: A right answer calls this tool (``name``), with these arguments when given.
    tool_name: str | None = None
    tool_arguments: Mapping[str, Any] | None = None
    #: A right answer calls no tool.
    no_tool_call: bool = False
    #: A right answer is JSON this schema accepts.
    json_schema: Mapping[str, Any] | None = None


def reference(body: Mapping[str, Any]) -> Reference | None:
    """The request's reference answer, or None when it carries none (or a malformed one:
    the field is tokrate's own, so a bad one is ignored, never refused)."""
    raw = body.get(ANSWER_FIELD)
    if not isinstance(raw, dict):
        return None
    text, task, key = raw.get("text"), raw.get("task", ""), raw.get("key", "")
    if not isinstance(task, str):
        return None
    call = raw.get("tool_call")
    name = call.get("name") if isinstance(call, dict) else None
    arguments = call.get("arguments") if isinstance(call, dict) else None
    schema = raw.get("json_schema")
    shaped = isinstance(name, str) or raw.get("no_tool_call") is True or isinstance(schema, dict)
    if not (isinstance(text, str) and text) and not shaped:
        return None
    limits = (body.get(k) for k in ("max_completion_tokens", "max_tokens", "max_output_tokens"))
    limit = next((v for v in limits if isinstance(v, int) and not isinstance(v, bool)), None)
    return Reference(
        text if isinstance(text, str) and text else None,
        task,
        str(key),
        limit,
        tool_name=name if isinstance(name, str) else None,
        tool_arguments=arguments if isinstance(arguments, dict) else None,
        no_tool_call=raw.get("no_tool_call") is True,
        json_schema=schema if isinstance(schema, dict) else None,
    )


def draw(seed: int, task: str, key: str) -> float:
    """The prompt's uniform draw in [0, 1), the same for every tier."""
    digest = hashlib.blake2b(f"{seed}\0{task}\0{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def answers_right(seed: int, tier: Tier, ref: Reference) -> bool:
    """Whether ``tier`` answers the prompt of ``ref`` right (module docstring)."""
    return draw(seed, ref.task, ref.key) < tier.accuracy_for(ref.task)


def answer_pieces(text: str) -> tuple[bytes, ...]:
    """``text`` as output tokens: pieces of up to 4 UTF-8 bytes (whole characters; the
    simulator's ceil(bytes / 4) token count), each already escaped for the inside of a
    JSON string (the wire writes a token's bytes into one as they are)."""
    pieces: list[bytes] = []
    current: list[str] = []
    size = 0
    for ch in text:
        n = len(ch.encode())
        if current and size + n > 4:
            pieces.append(_escaped("".join(current)))
            current, size = [], 0
        current.append(ch)
        size += n
    if current:
        pieces.append(_escaped("".join(current)))
    return tuple(pieces)


def _escaped(piece: str) -> bytes:
    return json.dumps(piece, ensure_ascii=False)[1:-1].encode()
