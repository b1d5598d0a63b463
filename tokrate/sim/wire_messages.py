"""Anthropic Messages (POST /v1/messages) as bytes: SSE events, bodies, error objects.

Stream (each event ``event: <type>`` + ``data: {"type": <type>, ...}``)::

    message_start {message: {id, type, role, model, content: [], stop_reason: null,
                   usage: {input_tokens, output_tokens: 1, cache_*: 0}}}, ping   at once
    thinking block (index 0), when the plan has reasoning tokens:
      content_block_start {content_block: {type: "thinking", thinking: "", signature: ""}}
      content_block_delta {delta: {type: "thinking_delta", thinking}} x n
      content_block_delta {delta: {type: "signature_delta", signature}}, content_block_stop
    text block (next index):
      content_block_start {content_block: {type: "text", text: ""}}
      content_block_delta {delta: {type: "text_delta", text}} x n, content_block_stop
    or, when the answer is a tool call, a tool_use block (next index):
      content_block_start {content_block: {type: "tool_use", id, name, input: {}}}
      content_block_delta {delta: {type: "input_json_delta", partial_json}} x n,
      content_block_stop
    message_delta {delta: {stop_reason: "end_turn" | "max_tokens" | "tool_use",
                   stop_sequence: null},
                   usage: {output_tokens}}     (cumulative: the final count, thinking included)
    message_stop

The ``stream_error`` fault sends ``error`` ``{"type": "error", "error": {"type":
"overloaded_error", "message": "Overloaded"}}`` and ends the stream. Errors outside a
stream are ``{"type": "error", "error": {"type", "message"}, "request_id"}`` with
Anthropic's statuses (:data:`ERROR_TYPES`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from tokrate.sim.model import token_bytes
from tokrate.sim.wire import StreamWire, TokenUsage

__all__ = ["ANTHROPIC_VERSIONS", "ERROR_TYPES", "MessagesWire", "anthropic_error_body"]

#: Values of the ``anthropic-version`` header Anthropic accepts.
ANTHROPIC_VERSIONS = ("2023-06-01", "2023-01-01")

#: HTTP status -> Anthropic error type.
ERROR_TYPES: Mapping[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}

_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
#: Block type -> (its delta's type, the delta's text field).
_DELTA_FIELDS = {
    "thinking": (b"thinking_delta", b"thinking"),
    "text": (b"text_delta", b"text"),
    "tool_use": (b"input_json_delta", b"partial_json"),
}


def anthropic_error_body(status: int, message: str, request_id: str) -> bytes:
    """Anthropic's error object for ``status``."""
    error = {"type": ERROR_TYPES.get(status, "api_error"), "message": message}
    return orjson.dumps({"type": "error", "error": error, "request_id": request_id})


def _usage(input_tokens: int, out: int, usage: TokenUsage | None) -> dict[str, int]:
    """Anthropic's usage: ``input_tokens`` is the prompt's part neither read from nor
    written to the cache; reads and writes come apart (0 with the cache off)."""
    read = (usage.cached_tokens if usage else None) or 0
    written = (usage.cache_write_tokens if usage else None) or 0
    return {
        "input_tokens": input_tokens - read - written,
        "cache_creation_input_tokens": written,
        "cache_read_input_tokens": read,
        "output_tokens": out,
    }


def _event(obj: dict[str, Any]) -> bytes:
    return b"event: " + str(obj["type"]).encode() + b"\ndata: " + orjson.dumps(obj) + b"\n\n"


def _signature(message_id: str) -> str:
    # Opaque to clients, as the real one is; fixed per message so runs are reproducible.
    return "c2lt" + message_id.encode().hex()


class MessagesWire(StreamWire):
    """One Anthropic Messages response."""

    __slots__ = ("_block", "_call", "_id", "_index", "_input_tokens", "_model", "_pre")

    def __init__(self, message_id: str, model: str, input_tokens: int) -> None:
        self._id, self._model, self._input_tokens = message_id, model, input_tokens
        #: The open block's type ("thinking" / "text") and index; None before the first.
        self._block: str | None = None
        self._index = -1
        self._pre = b""
        #: The tool call the answer is (name, arguments JSON), or None.
        self._call: tuple[str, str] | None = None

    def _message(
        self,
        content: list[dict[str, Any]],
        stop: str | None,
        out: int,
        usage: TokenUsage | None = None,
    ) -> dict[str, Any]:
        return {
            "id": self._id,
            "type": "message",
            "role": "assistant",
            "model": self._model,
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": _usage(self._input_tokens, out, usage),
        }

    def _open(self, kind: str) -> bytes:
        """Close the open block (if any) and start a ``kind`` block."""
        out = self._close()
        self._index += 1
        self._block = kind
        block: dict[str, Any] = {"type": "text", "text": ""}
        if kind == "thinking":
            block = {"type": "thinking", "thinking": "", "signature": ""}
        elif kind == "tool_use":
            name = self._call[0] if self._call else ""
            block = {"type": "tool_use", "id": self._tool_use_id(), "name": name, "input": {}}
        delta_type, field = _DELTA_FIELDS[kind]
        self._pre = (
            b'event: content_block_delta\ndata: {"type":"content_block_delta","index":'
            + str(self._index).encode()
            + b',"delta":{"type":"'
            + delta_type
            + b'","'
            + field
            + b'":"'
        )
        start = {"type": "content_block_start", "index": self._index, "content_block": block}
        return out + _event(start)

    def _close(self) -> bytes:
        if self._block is None:
            return b""
        out = b""
        if self._block == "thinking":
            sig = {"type": "signature_delta", "signature": _signature(self._id)}
            out = _event({"type": "content_block_delta", "index": self._index, "delta": sig})
        self._block = None
        return out + _event({"type": "content_block_stop", "index": self._index})

    def opening(self) -> bytes:
        start = {"type": "message_start", "message": self._message([], None, 1)}
        return _event(start) + _event({"type": "ping"})

    def reasoning(self, text: bytes) -> bytes:
        head = self._open("thinking") if self._block != "thinking" else b""
        return head + self._pre + text + b'"}}\n\n'

    def content(self, text: bytes) -> bytes:
        head = self._open("text") if self._block != "text" else b""
        return head + self._pre + text + b'"}}\n\n'

    def _tool_use_id(self) -> str:
        return "toolu_" + self._id.removeprefix("msg_")

    def start_call(self, name: str, arguments: str) -> None:
        self._call = (name, arguments)

    def tool_call(self, text: bytes) -> bytes:
        head = self._open("tool_use") if self._block != "tool_use" else b""
        return head + self._pre + text + b'"}}\n\n'

    def malformed(self, text: bytes) -> bytes:
        pre = self._pre or b'event: content_block_delta\ndata: {"type":"content_block_delta'
        return pre + text + b"\n\n"

    def closing(self, finish_reason: str, usage: TokenUsage) -> bytes:
        # With the prefix cache on, the final usage carries the cache reads and writes
        # (message_start went out before the engine looked the prompt up).
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": _STOP_REASONS[finish_reason], "stop_sequence": None},
            "usage": {"output_tokens": usage.output_tokens}
            if usage.cached_tokens is None
            else _usage(self._input_tokens, usage.output_tokens, usage),
        }
        return self._close() + _event(delta) + _event({"type": "message_stop"})

    def failure(self, usage: TokenUsage) -> bytes:
        error = {"type": "overloaded_error", "message": "Overloaded"}
        return _event({"type": "error", "error": error})

    def whole(self, finish_reason: str, usage: TokenUsage, text: bytes) -> bytes:
        r = usage.reasoning_tokens
        content: list[dict[str, Any]] = []
        if r:
            thinking = token_bytes(0, r).decode("ascii")
            content.append(
                {"type": "thinking", "thinking": thinking, "signature": _signature(self._id)}
            )
        if self._call is not None:
            try:
                parsed = orjson.loads(self._call[1])
            except orjson.JSONDecodeError:
                parsed = {}
            block = {"type": "tool_use", "id": self._tool_use_id(), "name": self._call[0]}
            content.append({**block, "input": parsed if isinstance(parsed, dict) else {}})
        elif usage.output_tokens > r:
            content.append({"type": "text", "text": text.decode()})
        body = self._message(content, _STOP_REASONS[finish_reason], usage.output_tokens, usage)
        return orjson.dumps(body)
