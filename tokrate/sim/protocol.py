"""OpenAI Chat Completions and legacy Completions as bytes: SSE chunks, bodies, errors.

Pure functions and one small per-response template (:class:`ChunkBytes`, the
:class:`~tokrate.sim.wire.StreamWire` of these two protocols) that turns
a token's text into a complete ``data: {...}\\n\\n`` event with two concatenations,
because the engine builds tens of thousands of these per second. Token texts are
plain ASCII without quotes or backslashes (see :func:`tokrate.sim.model.token_text`),
so they are pasted into JSON strings as they are.
"""

from __future__ import annotations

from typing import Any

import orjson

from tokrate.sim.model import token_bytes
from tokrate.sim.wire import StreamWire, TokenUsage

__all__ = [
    "DONE",
    "ChunkBytes",
    "completion_body",
    "error_body",
    "usage_dict",
]

DONE = b"data: [DONE]\n\n"
_CALL_POST = b'"}}]},"logprobs":null,"finish_reason":null}]}\n\n'


def usage_dict(
    prompt_tokens: int,
    completion_tokens: int,
    reasoning_tokens: int,
    *,
    cached_tokens: int | None = None,
) -> dict[str, Any]:
    """OpenAI ``usage`` object; ``completion_tokens`` includes reasoning tokens;
    ``prompt_tokens_details.cached_tokens`` when the prefix cache is on."""
    out: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens_details": {"reasoning_tokens": reasoning_tokens},
    }
    if cached_tokens is not None:
        out["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    return out


def error_body(
    message: str, type_: str, *, param: str | None = None, code: str | None = None
) -> bytes:
    """An OpenAI-style error object: ``{"error": {"message", "type", "param", "code"}}``."""
    return orjson.dumps(
        {"error": {"message": message, "type": type_, "param": param, "code": code}}
    )


class ChunkBytes(StreamWire):
    """Byte templates of one chat or text completion, streamed or whole.

    Invariant: every method returns whole SSE events (``data: ...\\n\\n``).
    ``include_usage`` (the request's ``stream_options.include_usage``) adds the
    usage-only chunk before ``[DONE]``.
    """

    __slots__ = (
        "_call",
        "_call_pre",
        "_content_pre",
        "_created",
        "_head",
        "_id",
        "_model",
        "_post",
        "_reasoning_pre",
        "chat",
        "include_usage",
    )

    def __init__(
        self,
        response_id: str,
        model: str,
        created: int,
        *,
        chat: bool,
        include_usage: bool = False,
    ) -> None:
        self.chat = chat
        self.include_usage = include_usage
        self._id, self._model, self._created = response_id, model, created
        #: The tool call the answer is (name, arguments JSON), and the prefix of its
        #: argument deltas once its first delta (which names it) went out.
        self._call: tuple[str, str] | None = None
        self._call_pre = b""
        obj = "chat.completion.chunk" if chat else "text_completion"
        head = orjson.dumps({"id": response_id, "object": obj, "created": created, "model": model})
        # head without the closing brace, so fields can follow
        self._head = b"data: " + head[:-1]
        if chat:
            self._content_pre = (
                self._head
                + b',"system_fingerprint":null,"choices":[{"index":0,"delta":{"content":"'
            )
            self._reasoning_pre = (
                self._head
                + b',"system_fingerprint":null,"choices":[{"index":0,"delta":{"reasoning_content":"'
            )
            self._post = b'"},"logprobs":null,"finish_reason":null}]}\n\n'
        else:
            self._content_pre = self._head + b',"choices":[{"text":"'
            self._reasoning_pre = self._content_pre  # text completions have no reasoning field
            self._post = b'","index":0,"logprobs":null,"finish_reason":null}]}\n\n'

    def opening(self) -> bytes:
        """Chat: the role chunk (role only, empty content: no token). Completions: none."""
        if not self.chat:
            return b""
        return (
            self._head
            + b',"system_fingerprint":null,"choices":[{"index":0,"delta":{"role":"assistant",'
            b'"content":""},"logprobs":null,"finish_reason":null}]}\n\n'
        )

    def content(self, text: bytes) -> bytes:
        """One answer-content event carrying ``text`` (already JSON-safe ASCII)."""
        return self._content_pre + text + self._post

    def reasoning(self, text: bytes) -> bytes:
        """One ``reasoning_content`` event (chat only)."""
        return self._reasoning_pre + text + self._post

    def start_call(self, name: str, arguments: str) -> None:
        self._call = (name, arguments)

    def _call_id(self) -> str:
        return "call_" + self._id.rsplit("-", 1)[-1]

    def tool_call(self, text: bytes) -> bytes:
        """A ``tool_calls`` delta of call 0: the first carries its id, type and name."""
        if not self._call_pre:
            name = self._call[0] if self._call else ""
            head = {"index": 0, "id": self._call_id(), "type": "function"}
            first = (
                self._head
                + b',"system_fingerprint":null,"choices":[{"index":0,"delta":{"tool_calls":['
                + orjson.dumps(head)[:-1]
                + b',"function":{"name":'
                + orjson.dumps(name)
                + b',"arguments":"'
            )
            self._call_pre = (
                self._head
                + b',"system_fingerprint":null,"choices":[{"index":0,"delta":{"tool_calls":'
                b'[{"index":0,"function":{"arguments":"'
            )
            return first + text + _CALL_POST
        return self._call_pre + text + _CALL_POST

    def malformed(self, text: bytes) -> bytes:
        """A content event cut off mid-JSON (the ``malformed`` fault): not parseable."""
        return self._content_pre + text + b"\n\n"

    def finish(self, reason: str) -> bytes:
        """The event that carries ``finish_reason`` and no content."""
        if self.chat:
            return (
                self._head
                + b',"system_fingerprint":null,"choices":[{"index":0,"delta":{},"logprobs":null,'
                b'"finish_reason":"' + reason.encode() + b'"}]}\n\n'
            )
        return (
            self._head
            + b',"choices":[{"text":"","index":0,"logprobs":null,"finish_reason":"'
            + reason.encode()
            + b'"}]}\n\n'
        )

    def usage(self, usage: TokenUsage) -> bytes:
        """The usage-only event (``choices`` empty), sent when include_usage is true."""
        extra = b',"system_fingerprint":null' if self.chat else b""
        body = orjson.dumps(_usage(usage))
        metrics = b"" if usage.metrics is None else b',"metrics":' + orjson.dumps(usage.metrics)
        return self._head + extra + b',"choices":[],"usage":' + body + metrics + b"}\n\n"

    def closing(self, finish_reason: str, usage: TokenUsage) -> bytes:
        tail = self.usage(usage) if self.include_usage else b""
        return self.finish(finish_reason) + tail + DONE

    def failure(self, usage: TokenUsage) -> bytes:
        """An in-band error chunk (as vLLM sends one); the stream ends without [DONE]."""
        body = error_body(
            "The server had an error while processing your request (simulated fault stream_error).",
            "server_error",
        )
        return b"data: " + body + b"\n\n"

    def whole(self, finish_reason: str, usage: TokenUsage, text: bytes) -> bytes:
        r = usage.reasoning_tokens
        call = None
        if self._call is not None:
            name, arguments = self._call
            function = {"name": name, "arguments": arguments}
            call = {"id": self._call_id(), "type": "function", "function": function}
        return completion_body(
            response_id=self._id,
            model=self._model,
            created=self._created,
            chat=self.chat,
            content=None if call else text.decode("ascii"),
            reasoning=token_bytes(0, r).decode("ascii") if r else None,
            finish_reason=finish_reason,
            usage=_usage(usage),
            tool_calls=[call] if call else None,
        )


def _usage(usage: TokenUsage) -> dict[str, Any]:
    return usage_dict(
        usage.input_tokens,
        usage.output_tokens,
        usage.reasoning_tokens,
        cached_tokens=usage.cached_tokens,
    )


def completion_body(
    *,
    response_id: str,
    model: str,
    created: int,
    chat: bool,
    content: str | None,
    reasoning: str | None,
    finish_reason: str,
    usage: dict[str, Any],
    tool_calls: list[dict[str, Any]] | None = None,
) -> bytes:
    """The non-streaming JSON body (``chat.completion`` or ``text_completion``)."""
    if chat:
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if reasoning is not None:
            message["reasoning_content"] = reasoning
        if tool_calls:
            message["tool_calls"] = tool_calls
        choice: dict[str, Any] = {
            "index": 0,
            "message": message,
            "logprobs": None,
            "finish_reason": finish_reason,
        }
        obj = "chat.completion"
    else:
        choice = {"text": content, "index": 0, "logprobs": None, "finish_reason": finish_reason}
        obj = "text_completion"
    return orjson.dumps(
        {
            "id": response_id,
            "object": obj,
            "created": created,
            "model": model,
            "choices": [choice],
            "usage": usage,
        }
    )
