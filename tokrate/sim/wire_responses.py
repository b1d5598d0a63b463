"""OpenAI Responses API (POST /v1/responses) as bytes: typed SSE events and bodies.

Stream (each event ``event: <type>`` + ``data: {"type": <type>, "sequence_number": n,
...}``, n counting from 0; no ``[DONE]``)::

    response.created, response.in_progress        at once (status "in_progress")
    reasoning item (output_index 0), when the plan has reasoning tokens:
      response.output_item.added {item: {type: "reasoning"}}
      summary asked: response.reasoning_summary_part.added,
                     response.reasoning_summary_text.delta x n,
                     response.reasoning_summary_text.done, response.reasoning_summary_part.done
      otherwise:     response.content_part.added {part: {type: "reasoning_text"}},
                     response.reasoning_text.delta x n,
                     response.reasoning_text.done, response.content_part.done
      response.output_item.done
    message item (next output_index), when answer tokens come:
      response.output_item.added {item: {type: "message"}}, response.content_part.added,
      response.output_text.delta x n, response.output_text.done,
      response.content_part.done, response.output_item.done
    or, when the answer is a tool call, a function_call item (next output_index):
      response.output_item.added {item: {type: "function_call", id, call_id, name,
      arguments: ""}}, response.function_call_arguments.delta x n,
      response.function_call_arguments.done, response.output_item.done
    response.completed (finish "stop" or a call) | response.incomplete
    (max_output_tokens), with usage

``usage``: ``input_tokens``, ``input_tokens_details`` (``cached_tokens`` 0,
``cache_write_tokens`` 0), ``output_tokens`` (reasoning included),
``output_tokens_details.reasoning_tokens``, ``total_tokens``. The ``stream_error``
fault sends ``error`` then ``response.failed`` (``response.error.code`` "server_error",
usage so far) and ends the stream.
"""

from __future__ import annotations

from typing import Any

import orjson

from tokrate.sim.model import token_bytes
from tokrate.sim.wire import StreamWire, TokenUsage

__all__ = ["ResponsesWire"]


def _event(obj: dict[str, Any]) -> bytes:
    return b"event: " + str(obj["type"]).encode() + b"\ndata: " + orjson.dumps(obj) + b"\n\n"


def _usage(usage: TokenUsage) -> dict[str, Any]:
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {
            "cached_tokens": usage.cached_tokens or 0,
            "cache_write_tokens": 0,
        },
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.input_tokens + usage.output_tokens,
    }


class ResponsesWire(StreamWire):
    """One Responses API response. ``echo`` carries ``instructions``,
    ``max_output_tokens`` and ``reasoning`` (``{effort, summary}``) of the request."""

    __slots__ = (
        "_call",
        "_call_index",
        "_call_pre",
        "_call_text",
        "_created",
        "_delta_post",
        "_echo",
        "_id",
        "_message_id",
        "_message_index",
        "_model",
        "_reasoning",
        "_reasoning_id",
        "_reasoning_open",
        "_seq",
        "_summary",
        "_text",
        "_text_pre",
        "_think_pre",
    )

    def __init__(self, response_id: str, model: str, created: int, echo: dict[str, Any]) -> None:
        self._id, self._model, self._created = response_id, model, created
        self._echo = echo
        suffix = response_id.removeprefix("resp_")
        self._reasoning_id = f"rs_{suffix}"
        self._message_id = f"msg_{suffix}"
        self._summary = (echo.get("reasoning") or {}).get("summary") is not None
        self._seq = 0
        self._reasoning: list[bytes] = []
        self._text: list[bytes] = []
        self._reasoning_open = False
        self._message_index: int | None = None
        kind = "reasoning_summary_text" if self._summary else "reasoning_text"
        part = b'"summary_index":0' if self._summary else b'"content_index":0'
        self._think_pre = (
            b"event: response."
            + kind.encode()
            + b'.delta\ndata: {"type":"response.'
            + kind.encode()
            + b'.delta","item_id":"'
            + self._reasoning_id.encode()
            + b'","output_index":0,'
            + part
            + b',"delta":"'
        )
        self._text_pre = b""
        self._delta_post = b'","sequence_number":'
        #: The tool call the answer is (name, arguments JSON), its output index once
        #: open, the argument pieces streamed and their delta prefix.
        self._call: tuple[str, str] | None = None
        self._call_index: int | None = None
        self._call_text: list[bytes] = []
        self._call_pre = b""

    # --- events ----------------------------------------------------------------------

    def _next(self, obj: dict[str, Any]) -> bytes:
        obj["sequence_number"] = self._seq
        self._seq += 1
        return _event(obj)

    def _delta(self, pre: bytes, text: bytes) -> bytes:
        seq = self._seq
        self._seq += 1
        return pre + text + self._delta_post + str(seq).encode() + b"}\n\n"

    def _response(self, status: str, output: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        echo = self._echo
        return {
            "id": self._id,
            "object": "response",
            "created_at": self._created,
            "status": status,
            "error": None,
            "incomplete_details": None,
            "instructions": echo.get("instructions"),
            "max_output_tokens": echo.get("max_output_tokens"),
            "model": self._model,
            "output": output,
            "parallel_tool_calls": True,
            "previous_response_id": None,
            "reasoning": echo.get("reasoning") or {"effort": None, "summary": None},
            "store": False,
            "temperature": 1.0,
            "text": {"format": {"type": "text"}},
            "tool_choice": "auto",
            "tools": [],
            "top_p": 1.0,
            "truncation": "disabled",
            "usage": None,
            "user": None,
            "metadata": {},
            **extra,
        }

    def _reasoning_item(self, text: str | None) -> dict[str, Any]:
        item: dict[str, Any] = {"id": self._reasoning_id, "type": "reasoning", "summary": []}
        if text is None:
            return item
        if self._summary:
            item["summary"] = [{"type": "summary_text", "text": text}]
        else:
            item["content"] = [{"type": "reasoning_text", "text": text}]
        return item

    def _message_item(self, text: str | None, status: str) -> dict[str, Any]:
        content = [] if text is None else [_output_text(text)]
        return {
            "id": self._message_id,
            "type": "message",
            "status": status,
            "role": "assistant",
            "content": content,
        }

    def _close_reasoning(self) -> bytes:
        self._reasoning_open = False
        text = b"".join(self._reasoning).decode("ascii")
        ids = {"item_id": self._reasoning_id, "output_index": 0}
        if self._summary:
            part = {"type": "summary_text", "text": text}
            done = [
                {
                    "type": "response.reasoning_summary_text.done",
                    **ids,
                    "summary_index": 0,
                    "text": text,
                },
                {
                    "type": "response.reasoning_summary_part.done",
                    **ids,
                    "summary_index": 0,
                    "part": part,
                },
            ]
        else:
            part = {"type": "reasoning_text", "text": text}
            done = [
                {"type": "response.reasoning_text.done", **ids, "content_index": 0, "text": text},
                {"type": "response.content_part.done", **ids, "content_index": 0, "part": part},
            ]
        done.append(
            {
                "type": "response.output_item.done",
                "output_index": 0,
                "item": self._reasoning_item(text),
            }
        )
        return b"".join(self._next(e) for e in done)

    def _call_item(self, arguments: str, status: str) -> dict[str, Any]:
        suffix = self._id.removeprefix("resp_")
        return {
            "id": f"fc_{suffix}",
            "type": "function_call",
            "status": status,
            "call_id": f"call_{suffix}",
            "name": self._call[0] if self._call else "",
            "arguments": arguments,
        }

    def _call_arguments(self) -> str:
        """The arguments streamed so far, as the client decoded them."""
        return str(orjson.loads(b'"' + b"".join(self._call_text) + b'"'))

    def _output(self, finish: str | None) -> list[dict[str, Any]]:
        """The response's output items as they stand (finish None: still streaming)."""
        out: list[dict[str, Any]] = []
        done = finish in ("stop", "tool_calls")
        if self._reasoning:
            out.append(self._reasoning_item(b"".join(self._reasoning).decode("ascii")))
        if self._message_index is not None:
            status = "completed" if done else "incomplete"
            out.append(self._message_item(b"".join(self._text).decode("ascii"), status))
        if self._call_index is not None:
            out.append(
                self._call_item(self._call_arguments(), "completed" if done else "incomplete")
            )
        return out

    # --- StreamWire --------------------------------------------------------------------

    def opening(self) -> bytes:
        return b"".join(
            self._next({"type": t, "response": self._response("in_progress", [])})
            for t in ("response.created", "response.in_progress")
        )

    def reasoning(self, text: bytes) -> bytes:
        head = b""
        if not self._reasoning_open and not self._reasoning:
            self._reasoning_open = True
            ids = {"item_id": self._reasoning_id, "output_index": 0}
            added = self._next(
                {
                    "type": "response.output_item.added",
                    "output_index": 0,
                    "item": self._reasoning_item(None),
                }
            )
            if self._summary:
                part = self._next(
                    {
                        "type": "response.reasoning_summary_part.added",
                        **ids,
                        "summary_index": 0,
                        "part": {"type": "summary_text", "text": ""},
                    }
                )
            else:
                part = self._next(
                    {
                        "type": "response.content_part.added",
                        **ids,
                        "content_index": 0,
                        "part": {"type": "reasoning_text", "text": ""},
                    }
                )
            head = added + part
        self._reasoning.append(text)
        return head + self._delta(self._think_pre, text)

    def content(self, text: bytes) -> bytes:
        head = b""
        if self._message_index is None:
            if self._reasoning_open:
                head = self._close_reasoning()
            index = self._message_index = 1 if self._reasoning else 0
            head += self._next(
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": self._message_item(None, "in_progress"),
                }
            )
            head += self._next(
                {
                    "type": "response.content_part.added",
                    "item_id": self._message_id,
                    "output_index": index,
                    "content_index": 0,
                    "part": _output_text(""),
                }
            )
            self._text_pre = (
                b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
                b'"item_id":"'
                + self._message_id.encode()
                + b'","output_index":'
                + str(index).encode()
                + b',"content_index":0,"logprobs":[],"delta":"'
            )
        self._text.append(text)
        return head + self._delta(self._text_pre, text)

    def start_call(self, name: str, arguments: str) -> None:
        self._call = (name, arguments)

    def tool_call(self, text: bytes) -> bytes:
        head = b""
        if self._call_index is None:
            if self._reasoning_open:
                head = self._close_reasoning()
            index = self._call_index = 1 if self._reasoning else 0
            head += self._next(
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": self._call_item("", "in_progress"),
                }
            )
            item_id = self._call_item("", "").get("id", "")
            self._call_pre = (
                b"event: response.function_call_arguments.delta\ndata: "
                b'{"type":"response.function_call_arguments.delta","item_id":"'
                + str(item_id).encode()
                + b'","output_index":'
                + str(index).encode()
                + b',"delta":"'
            )
        self._call_text.append(text)
        return head + self._delta(self._call_pre, text)

    def malformed(self, text: bytes) -> bytes:
        pre = self._text_pre or self._call_pre or self._think_pre
        return pre + text + b"\n\n"

    def closing(self, finish_reason: str, usage: TokenUsage) -> bytes:
        out = self._close_reasoning() if self._reasoning_open else b""
        index = self._message_index
        if index is not None:
            text = b"".join(self._text).decode("ascii")
            ids = {"item_id": self._message_id, "output_index": index, "content_index": 0}
            status = "completed" if finish_reason == "stop" else "incomplete"
            out += self._next(
                {"type": "response.output_text.done", **ids, "text": text, "logprobs": []}
            )
            out += self._next(
                {"type": "response.content_part.done", **ids, "part": _output_text(text)}
            )
            out += self._next(
                {
                    "type": "response.output_item.done",
                    "output_index": index,
                    "item": self._message_item(text, status),
                }
            )
        if self._call_index is not None:
            out += self._close_call(finish_reason)
        final = self._final(finish_reason, usage)
        kind = "response.completed" if final["status"] == "completed" else "response.incomplete"
        return out + self._next({"type": kind, "response": final})

    def _close_call(self, finish_reason: str) -> bytes:
        arguments = self._call_arguments()
        ids = {"item_id": self._call_item("", "")["id"], "output_index": self._call_index}
        status = "completed" if finish_reason in ("stop", "tool_calls") else "incomplete"
        done = {"type": "response.function_call_arguments.done", **ids, "arguments": arguments}
        item = {
            "type": "response.output_item.done",
            "output_index": self._call_index,
            "item": self._call_item(arguments, status),
        }
        return self._next(done) + self._next(item)

    def _final(self, finish_reason: str, usage: TokenUsage) -> dict[str, Any]:
        if finish_reason in ("stop", "tool_calls"):
            return self._response("completed", self._output("stop"), usage=_usage(usage))
        return self._response(
            "incomplete",
            self._output(finish_reason),
            usage=_usage(usage),
            incomplete_details={"reason": "max_output_tokens"},
        )

    def failure(self, usage: TokenUsage) -> bytes:
        message = "The server had an error processing your request (simulated fault stream_error)."
        error = self._next(
            {"type": "error", "code": "server_error", "message": message, "param": None}
        )
        failed = self._response(
            "failed",
            self._output(None),
            usage=_usage(usage),
            error={"code": "server_error", "message": message},
        )
        return error + self._next({"type": "response.failed", "response": failed})

    def whole(self, finish_reason: str, usage: TokenUsage, text: bytes) -> bytes:
        r = usage.reasoning_tokens
        if r:
            self._reasoning = [token_bytes(0, r)]
        if self._call is not None:
            self._call_text = [orjson.dumps(self._call[1])[1:-1]]
            self._call_index = 1 if r else 0
        elif usage.output_tokens > r:
            self._text = [text]
            self._message_index = 1 if r else 0
        return orjson.dumps(self._final(finish_reason, usage))


def _output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
