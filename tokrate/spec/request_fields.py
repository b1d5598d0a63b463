"""Request-body fields: the ones tokrate sets itself, and the ones it cannot honour while
it measures a stream (docs/config.md "Request fields").

One home for the rule that a prompt's ``body`` (an OpenAI batch line's, or a prompt
line's), ``extra_body`` and ``--body`` share:

- :data:`OWNED_FIELDS` are tokrate's: the target names the model, every request streams
  and asks for usage in the stream. A prompt body's value is replaced, never sent.
- :data:`LIMIT_FIELDS` are the prompt's output limit (``max_tokens`` or
  ``max_completion_tokens``): kept as the prompt's ``max_tokens`` under ``[prompts]
  max_tokens``'s override rule and sent under the name it was written with.
- :func:`unstreamable` names what a field would make of a measured stream when its value
  cannot be honoured (``n`` other than 1, ``stream: false``, ...): such a field is refused
  before anything is sent, never dropped.
"""

from __future__ import annotations

from typing import Final

__all__ = ["LIMIT_FIELDS", "OWNED_FIELDS", "PROMPT_FIELDS", "unstreamable"]

#: Fields tokrate sets on every request; a prompt body's values are replaced.
OWNED_FIELDS: Final = ("model", "stream", "stream_options")
#: A prompt's output limit, under either of its Chat Completions names.
LIMIT_FIELDS: Final = ("max_tokens", "max_completion_tokens")
#: The prompt itself (chat messages, completions text; ``input`` is the Responses API's).
PROMPT_FIELDS: Final = ("messages", "prompt", "input")


def _count(value: object) -> str | None:
    if value is None or value == 1:
        return None
    return "not 1"


def unstreamable(key: str, value: object) -> str | None:
    """Why ``key: value`` cannot be honoured while tokrate measures one streamed answer
    per request (one line, ending with what to do), or None when it can.

    ``n`` / ``best_of`` other than 1 (several answers, or one picked from several, in
    one stream), ``stream`` other than true, ``echo: true`` (the prompt streamed back as
    if it were the answer), vLLM's ``use_beam_search: true`` (beams do not stream).
    """
    if key == "n" and _count(value) is not None:
        return (
            f"{value!r} asks for several answers in one stream, and tokrate times one "
            "answer per request; send the prompt more often ([load] requests) instead"
        )
    if key == "best_of" and _count(value) is not None:
        return (
            f"{value!r} has the server generate several answers and stream the best, so "
            "the stream's timing would not be one answer's; leave it out"
        )
    if key == "stream" and value is not True:
        return f"{value!r}: tokrate measures streamed answers token by token; leave it out"
    if key == "echo" and value not in (None, False):
        return (
            f"{value!r} streams the prompt back before the answer, and it would be timed "
            "as answer tokens; leave it out"
        )
    if key == "use_beam_search" and value not in (None, False):
        return f"{value!r}: beam search does not stream token by token; leave it out"
    return None
