"""What a prompt is, and the pieces every prompt source shares.

:class:`Prompt` (one request's content, or the first turn of a multi-turn session with
its :class:`Turn` follow-ups), :func:`make_prompt` (the one constructor that fills the
token estimate), the token estimates (exactly what the simulator counts, see
:mod:`tokrate.physics`), UTF-8 decoding of prompt files, and seeded synthetic text of
an exact token length. Sources (files, sets, synthetic, sessions, traces, grids) live
in :mod:`tokrate.inputs.prompts` and the modules it calls.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from tokrate.errors import PromptError
from tokrate.inputs.media_parts import media_weight
from tokrate.inputs.request_body import body_output_schema, body_tools
from tokrate.physics import count_request_tokens, count_text_tokens
from tokrate.runfolder.checks_file import CheckEntry
from tokrate.spec.expect import Expect

__all__ = [
    "MAX_SESSION_TURNS",
    "ONE_MESSAGE_OVERHEAD",
    "Prompt",
    "Turn",
    "check_entries",
    "check_messages",
    "decode_utf8",
    "estimate_input_tokens",
    "estimate_tokens",
    "make_prompt",
    "parse_json_text",
    "prompt_text",
    "text_of_tokens",
]


#: Most turns one session may have: turn t of planned request k is recorded as request
#: k x MAX_SESSION_TURNS + t - 1, unique in its scenario.
MAX_SESSION_TURNS: Final = 1024


@dataclass(frozen=True, slots=True)
class Turn:
    """One follow-up turn of a session: the user's message and its output cap."""

    user: str
    max_tokens: int | None = None
    #: What a right answer to this turn looks like (docs/quality.md), or None.
    expect: Expect | None = None


@dataclass(frozen=True, slots=True)
class Prompt:
    """One prompt. Exactly one of ``messages`` (chat messages, each a dict with
    ``role`` and ``content``) and ``prompt`` (plain text) is set. ``max_tokens`` is the
    output cap this prompt asks for (None: the server's default); ``input_tokens_est``
    is :func:`estimate_tokens` of :func:`prompt_text`; ``source`` is "FILE:LINE",
    "set:NAME:LINE" or "synthetic:N" (sources of other kinds name theirs)."""

    id: str
    task: str
    messages: tuple[dict[str, Any], ...] | None
    prompt: str | None
    max_tokens: int | None
    input_tokens_est: int
    source: str
    #: A multi-turn session: the turns after the first (``messages`` is the first turn's
    #: prompt); each later turn sends the history with the model's real answers. Empty:
    #: an ordinary one-request prompt.
    turns: tuple[Turn, ...] = ()
    #: Seconds a session waits between an answer and its next turn (a user reading).
    think_time_s: float = 0.0
    #: Leading messages this prompt shares with others (a system prefix, RAG context):
    #: the cache-busting tag of ``[client] unique_prompts`` goes after them, so a
    #: server's prefix cache can serve the shared part.
    shared_messages: int = 0
    #: Ask for exactly ``max_tokens`` (``ignore_eos`` + ``min_tokens``, as ``[load]
    #: ignore_eos`` does for every prompt): length grids, imported traces.
    exact_output: bool = False
    #: What a right answer looks like (``expect``, docs/quality.md); for a session, the
    #: first turn's (each later turn carries its own).
    expect: Expect | None = None
    #: The request fields sent as written (a prompt's ``body``: tools, response_format,
    #: sampling settings, ...; :mod:`tokrate.inputs.request_body`), in their order.
    body: tuple[tuple[str, Any], ...] = ()
    #: The name the prompt's body gave its output limit ("max_completion_tokens"), sent
    #: under it unless the model says otherwise; None: "max_tokens".
    max_tokens_field: str | None = None
    #: Image, sound and file parts of the messages, and the bytes they add to the
    #: request body (:func:`tokrate.inputs.media_parts.media_weight`).
    media_parts: int = 0
    media_bytes: int = 0

    @property
    def is_session(self) -> bool:
        return bool(self.turns)


#: Tokens the simulator's chat template adds to a one-message prompt (4 around the
#: message, 2 priming the reply); synthetic text is shortened by this much so the chat
#: estimate equals the requested length.
ONE_MESSAGE_OVERHEAD: Final = 6


def estimate_tokens(text: str) -> int:
    """ceil(UTF-8 bytes / 4): the simulator's deterministic text approximation
    (``tokrate.physics.count_text_tokens``)."""

    return count_text_tokens(text)


def estimate_input_tokens(
    messages: Sequence[Any] | None,
    prompt: str | None,
    api: str = "chat",
    body: Sequence[tuple[str, Any]] = (),
) -> int:
    """Input tokens the simulator counts for this prompt sent through ``api``.

    chat: ``count_request_tokens`` of the messages (a plain prompt becomes one user
    message; images and sounds by their size), the body's tool definitions and its
    output schema; completions: ceil(bytes / 4) of :func:`prompt_text`, at least 1.
    """
    if api == "completions":
        return max(1, estimate_tokens(prompt_text(messages, prompt)))

    msgs = messages if messages is not None else ({"role": "user", "content": prompt or ""},)
    fields = dict(body)
    return count_request_tokens(
        (m if isinstance(m, dict) else {} for m in msgs),
        body_tools(fields),
        body_output_schema(fields),
    )


def prompt_text(messages: Sequence[Any] | None, prompt: str | None) -> str:
    """The text a server tokenizes: ``prompt``, or message contents (text parts of a
    content list) joined by a blank line."""
    if prompt is not None:
        return prompt
    parts = []
    for m in messages or ():
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list):
            content = " ".join(
                str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("text")
            )
        parts.append(str(content or ""))
    return "\n\n".join(parts)


def make_prompt(
    *,
    id: str,
    task: str,
    messages: Sequence[dict[str, Any]] | None,
    prompt: str | None,
    max_tokens: int | None,
    source: str,
    turns: Sequence[Turn] = (),
    think_time_s: float = 0.0,
    shared_messages: int = 0,
    exact_output: bool = False,
    expect: Expect | None = None,
    body: Sequence[tuple[str, Any]] = (),
    max_tokens_field: str | None = None,
) -> Prompt:
    """A Prompt with its input token estimate and media weight filled in."""
    msgs = tuple(messages) if messages is not None else None
    media_parts, media_bytes = media_weight(msgs)
    return Prompt(
        id=id,
        task=task,
        messages=msgs,
        prompt=prompt,
        max_tokens=max_tokens,
        input_tokens_est=estimate_input_tokens(msgs, prompt, body=body),
        source=source,
        turns=tuple(turns),
        think_time_s=think_time_s,
        shared_messages=shared_messages,
        exact_output=exact_output,
        expect=expect,
        body=tuple(body),
        max_tokens_field=max_tokens_field,
        media_parts=media_parts,
        media_bytes=media_bytes,
    )


def check_entries(prompts: Sequence[Prompt]) -> list[CheckEntry]:
    """checks.json's entries: every prompt (and session turn) with an ``expect``."""
    out = []
    for p in prompts:
        content: dict[str, Any] = {"id": p.id, "task": p.task}
        if p.messages is not None:
            content["messages"] = [dict(m) for m in p.messages]
        else:
            content["prompt"] = p.prompt
        if p.body:
            content["body"] = dict(p.body)
        turn = 1 if p.is_session else None
        if p.expect is not None:
            out.append(CheckEntry(p.id, turn, p.task, p.source, p.expect.to_dict(), content))
        for t, follow in enumerate(p.turns, start=2):
            if follow.expect is not None:
                said = {**content, "turn": t, "user": follow.user}
                out.append(CheckEntry(p.id, t, p.task, p.source, follow.expect.to_dict(), said))
    return out


def check_unicode(obj: object, where: str, path: str = "") -> None:
    """Refuse a parsed JSON value holding a lone UTF-16 surrogate (a ``\\ud800`` escape
    without its pair: JSON parsers accept it, no UTF-8 encoder can send it). Raises
    PromptError naming ``where``, the key path and the position, never the text."""
    if isinstance(obj, str):
        for i, ch in enumerate(obj, start=1):
            if "\ud800" <= ch <= "\udfff":
                at = f" {path}:" if path else ""
                raise PromptError(
                    f"{where}:{at} character {i} is a lone surrogate (a \\ud800-\\udfff"
                    " escape without its pair): not Unicode text, it cannot be sent"
                )
    elif isinstance(obj, dict):
        for key, value in obj.items():
            check_unicode(key, where, path)
            check_unicode(value, where, f"{path}.{key}" if path else str(key))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            check_unicode(value, where, f"{path}[{i}]")


def decode_utf8(data: bytes, where: str) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise PromptError(
            f"{where} line {line}: not valid UTF-8 (byte 0x{data[err.start]:02x} at "
            f"offset {err.start}); save the file as UTF-8"
        ) from None
    return text.removeprefix("\ufeff")  # a BOM is harmless; drop it


#: The integers a request body can carry: what orjson (and so every request tokrate
#: sends) encodes, -2**63 .. 2**64 - 1.
_MIN_JSON_INT: Final = -(2**63)
_MAX_JSON_INT: Final = 2**64 - 1
#: Digits of the longest integer in that range (a longer one is refused before int()).
_MAX_INT_DIGITS: Final = 20


class _NotSendable(ValueError):
    """A JSON value a prompt file may hold but a request cannot carry as written."""


def _constant(name: str) -> object:
    raise _NotSendable(f"{name} is not JSON: a server refuses it, or reads it as null")


def _integer(text: str) -> int:
    digits = text.removeprefix("-")
    value = int(text) if len(digits) <= _MAX_INT_DIGITS else None
    if value is None or not _MIN_JSON_INT <= value <= _MAX_JSON_INT:
        shown = text if len(text) <= 24 else f"{text[:20]}... ({len(digits)} digits)"
        raise _NotSendable(f"integer {shown} does not fit in 64 bits, so it cannot be sent")
    return value


def _number(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotSendable(f"{text} is too large for a number: it would be read as infinity")
    return value


def parse_json_text(text: str, where: str) -> Any:
    """``text`` parsed as strict JSON: what a request can carry as written. Python's
    parser also takes ``NaN``, ``Infinity``, numbers too large for a double (``1e999``,
    read as infinity), integers of any size and lone surrogate escapes, which a request body would turn into ``null`` or fail to encode mid-run;
    those are refused here (:func:`check_unicode`).

    Raises:
        PromptError: "WHERE: invalid JSON (WHY)" or "WHERE: KEY: character N is a lone
            surrogate ..." in one line.
    """
    try:
        obj = json.loads(text, parse_constant=_constant, parse_int=_integer, parse_float=_number)
    except json.JSONDecodeError as err:
        raise PromptError(f"{where}: invalid JSON ({err.msg})") from None
    except RecursionError:
        raise PromptError(f"{where}: invalid JSON (nested too deeply)") from None
    except _NotSendable as err:
        raise PromptError(f"{where}: invalid JSON ({err})") from None
    check_unicode(obj, where)
    return obj


# Words for synthetic text: varied vocabulary so caches and compressors see natural-ish
# text, not one repeated token.
_WORDS_TEXT: Final = """
    the a of to and in that is for on with as by at from this an be it are was or
    system network latency request server client model token stream queue batch cache
    memory bandwidth kernel thread process scheduler buffer packet route region cluster
    node replica shard index query table column record file folder report chart metric
    signal budget window sample window measure compare release version update patch
    engineer team customer partner vendor product service market quarter forecast
    river mountain forest harbor village garden bridge tower valley island desert coast
    morning evening season winter summer autumn spring weather storm cloud rain light
    quick careful steady bright quiet heavy gentle rapid narrow broad distant local
    build check explain describe summarize estimate improve reduce increase balance
    choose follow deliver observe record review prepare measure design consider detail
    because although while after before during unless until whether however therefore
"""
_WORDS: Final = tuple(_WORDS_TEXT.split())
_TOPICS: Final = (
    "a distributed storage system",
    "a small coastal town",
    "a quarterly planning meeting",
    "a mountain railway",
    "a customer support queue",
    "a compiler optimisation",
    "a community garden",
    "an inventory forecast",
)


def _sentence(rng: random.Random) -> str:
    n = rng.randint(6, 16)
    words = [rng.choice(_WORDS) for _ in range(n)]
    words[0] = words[0].capitalize()
    return " ".join(words) + rng.choice(".....?;")


def text_of_tokens(tokens: int, rng: random.Random) -> str:
    """ASCII text of exactly 4 x ``tokens`` bytes (estimate_tokens == tokens)."""
    target = 4 * tokens
    head = f"Write about {rng.choice(_TOPICS)}. Context: "
    parts = [head]
    size = len(head)
    while size < target:
        s = _sentence(rng) + " "
        parts.append(s)
        size += len(s)
    text = "".join(parts)[:target]
    return text.rstrip() + "." * (target - len(text.rstrip()))


_ROLES: Final = ("system", "user", "assistant", "developer", "tool")


def check_messages(value: object, where: str) -> list[dict[str, Any]]:
    """A chat ``messages`` list, checked: objects with a known role and string or
    list content (null content only on an assistant message that carries
    ``tool_calls``: the calls of an earlier turn)."""
    if not isinstance(value, list) or not value:
        raise PromptError(f"{where}: 'messages' must be a non-empty list of objects")
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, dict):
            raise PromptError(f"{where}: messages[{i}] must be an object with role and content")
        role = m.get("role")
        if role not in _ROLES:
            raise PromptError(
                f"{where}: messages[{i}].role must be one of {', '.join(_ROLES)}, got {role!r}"
            )
        content = m.get("content")
        calls = role == "assistant" and isinstance(m.get("tool_calls"), list)
        if not isinstance(content, str | list) and not (calls and content is None):
            raise PromptError(f"{where}: messages[{i}].content must be a string or a list")
        out.append(dict(m))
    return out
