"""A loopback HTTP/1.1 server on 127.0.0.1 (port 0) that streams recorded event
sequences of every protocol tokrate speaks, for the shapes the simulator does not
produce (Azure deployment URLs, the o-series max_tokens refusal, a transformers-style
strict 422, mid-stream rate-limit events, cached-token usage, tool-call deltas) and
for what its truth log does not keep (the prompt's place in each body). Timing, usage,
faults and knobs are tested on the simulator itself (tests/loopback/test_protocols_sim.py).

Routes (``{scenario}`` is the first path segment, so one server serves every case):

    POST /{scenario}/v1/chat/completions              Chat Completions chunks, [DONE]
    POST /{scenario}/v1/responses                     Responses API typed events
    POST /{scenario}/v1/messages                      Anthropic Messages typed events
    POST /{scenario}/openai/deployments/{model}/chat/completions?api-version=...  (Azure)
    GET  anything                                     404 (no /models: pre-flight probes)
    POST with "stream": false                         200 {} (the pre-flight probe)

Scenarios: ``ok`` (reasoning deltas, then answer deltas, then usage and the end
event), ``overloaded`` / ``rate_limited`` (Anthropic ``error`` event mid-stream;
Responses ``response.failed`` / an ``error`` event), ``reject_max_tokens`` (chat: HTTP
400 as OpenAI's o-series answers when the body names ``max_tokens``), ``strict`` (HTTP
422 for any body field outside the protocol's basic set, as transformers serve does),
``echo_key`` (the ``ok`` events with the caller's key, its ``x-api-key`` or
``Authorization`` value, echoed as every event's model name and response id and in the
pre-flight probe's answer).
Every request is kept in ``server.requests`` (path, query, headers, body) and every
content-bearing write is stamped with ``time.perf_counter_ns()`` (the client's clock)
in ``server.truth[response_id]``: tests compare against what was really written.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

import orjson

from helpers.hostile_server import HostileServer, read_request

#: Body fields a ``strict`` server accepts (per route); anything else is a 422.
_BASIC_FIELDS = {
    "chat": {"model", "messages", "stream", "stream_options", "max_tokens"},
    "responses": {"model", "input", "instructions", "stream", "max_output_tokens"},
    "messages": {"model", "messages", "system", "stream", "max_tokens"},
}
REASONING = 3
ANSWER = 5
INPUT_TOKENS = 11
CACHED_TOKENS = 4
MAX_TOKENS_ERROR = (
    b'{"error":{"message":"Unsupported parameter: \'max_tokens\' is not supported with this'
    b' model. Use \'max_completion_tokens\' instead.","type":"invalid_request_error",'
    b'"param":"max_tokens","code":"unsupported_parameter"}}'
)


@dataclass
class Truth:
    received_ns: int
    content_write_ns: list[int] = field(default_factory=list)
    reasoning_writes: int = 0


class ProtocolServer(HostileServer):
    """Context manager: ``with ProtocolServer(itl_ms=5) as s: s.url("ok")`` (the
    hostile server's thread and lifecycle, with its own request handling)."""

    def __init__(self, *, itl_ms: float = 5.0) -> None:
        super().__init__()
        self.itl_s = itl_ms / 1000
        self.requests: list[dict[str, Any]] = []
        self.truth: dict[str, Truth] = {}  # type: ignore[assignment]

    def url(self, scenario: str) -> str:
        """The base URL of ``scenario`` (ends in /v1)."""
        return f"http://127.0.0.1:{self.port}/{scenario}/v1"

    def azure_url(self, scenario: str) -> str:
        """An Azure-style resource base (no /v1: deployment URLs hang from it)."""
        return f"http://127.0.0.1:{self.port}/{scenario}"

    def __enter__(self) -> ProtocolServer:
        super().__enter__()
        return self

    async def _handle(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self._writers.add(w)
        try:
            while True:
                method, target, headers, raw, received = await read_request(r)
                body = orjson.loads(raw) if raw else {}
                path, _, query = target.partition("?")
                self.requests.append(
                    {
                        "method": method,
                        "path": path,
                        "query": dict(parse_qsl(query)),
                        "headers": headers,
                        "body": body,
                    }
                )
                await self._serve(method, path, body, w, received)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            with contextlib.suppress(Exception):
                w.close()
                await w.wait_closed()
            self._writers.discard(w)

    async def _json(self, w: asyncio.StreamWriter, status: int, doc: bytes) -> None:
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 422: "Unprocessable Entity"}
        w.write(
            f"HTTP/1.1 {status} {reason[status]}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(doc)}\r\n\r\n".encode()
            + doc
        )
        await w.drain()

    async def _serve(
        self, method: str, path: str, body: dict[str, Any], w: asyncio.StreamWriter, rx: int
    ) -> None:
        scenario = path.split("/")[1]
        route = (
            "chat"
            if path.endswith("/chat/completions")
            else "responses"
            if path.endswith("/responses")
            else "messages"
        )
        if method != "POST":
            await self._json(w, 404, b'{"error":{"message":"no such route"}}')
            return
        headers = self.requests[-1]["headers"]
        echoed = headers.get("x-api-key") or headers.get("authorization") or ""
        if body.get("stream") is False:
            probe: dict[str, Any] = {"id": "probe", "choices": []}
            if scenario == "echo_key":
                probe.update(id=f"probe {echoed}", model=echoed)
            await self._json(w, 200, orjson.dumps(probe))
            return
        if scenario == "reject_max_tokens" and "max_tokens" in body:
            await self._json(w, 400, MAX_TOKENS_ERROR)
            return
        if scenario == "strict":
            unknown = sorted(set(body) - _BASIC_FIELDS[route])
            if unknown:
                doc = orjson.dumps({"detail": f"Unexpected fields in the request: {unknown}"})
                await self._json(w, 422, doc)
                return
        self._counter += 1
        rid = f"{route}-{self._counter}"
        truth = self.truth[rid] = Truth(received_ns=rx)
        w.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        events = {"chat": _chat, "responses": _responses, "messages": _messages}[route]
        for name, data, kind in events(rid, scenario):
            if scenario == "echo_key" and isinstance(data, dict):
                _echo(data, echoed)
            if kind is not None:
                await asyncio.sleep(self.itl_s)
            frame = (f"event: {name}\n" if name else "").encode()
            frame += b"data: " + (data if isinstance(data, bytes) else orjson.dumps(data))
            frame += b"\n\n"
            if kind is not None:
                # Stamped just before the write: the transport may send at once.
                truth.content_write_ns.append(time.perf_counter_ns())
                truth.reasoning_writes += kind == "reasoning"
            w.write(b"%x\r\n%s\r\n" % (len(frame), frame))
            await w.drain()
        w.write(b"0\r\n\r\n")
        await w.drain()


Event = tuple[str | None, Any, str | None]  # (SSE event name, data, content kind)


def _echo(data: dict[str, Any], echoed: str) -> None:
    """The ``echo_key`` scenario: ``echoed`` as the model and in the id of the event (chat
    chunks, Responses' response object, Anthropic's message_start)."""
    for obj in (data, data.get("response"), data.get("message")):
        if isinstance(obj, dict):
            obj["model"] = echoed
            if "id" in obj and echoed not in str(obj["id"]):  # events repeat one dict
                obj["id"] = f"{obj['id']} {echoed}"


def _chat(rid: str, scenario: str) -> list[Event]:
    def chunk(delta: dict[str, Any], **more: Any) -> dict[str, Any]:
        return {
            "id": rid,
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
            **more,
        }

    out: list[Event] = [(None, chunk({"role": "assistant", "content": ""}), None)]
    out += [(None, chunk({"reasoning_content": "hm "}), "reasoning")] * REASONING
    out += [(None, chunk({"content": "tok "}), "answer")] * (ANSWER - 1)
    call = {"index": 0, "id": "call_1", "function": {"name": "f", "arguments": "{}"}}
    out.append((None, chunk({"tool_calls": [call]}), "tool_call"))
    done = chunk({})
    done["choices"][0]["finish_reason"] = "stop"
    out.append((None, done, None))
    usage = {
        "prompt_tokens": INPUT_TOKENS,
        "completion_tokens": REASONING + ANSWER,
        "completion_tokens_details": {"reasoning_tokens": REASONING},
    }
    out.append((None, {"id": rid, "choices": [], "usage": usage}, None))
    out.append((None, b"[DONE]", None))
    return out


def _responses(rid: str, scenario: str) -> list[Event]:
    def ev(type_: str, kind: str | None = None, **data: Any) -> Event:
        return (type_, {"type": type_, **data}, kind)

    response = {"id": rid, "object": "response", "status": "in_progress", "output": []}
    out = [ev("response.created", response=response)]
    out.append(ev("response.output_item.added", output_index=0, item={"type": "reasoning"}))
    for _ in range(REASONING):
        out.append(
            ev(
                "response.reasoning_summary_text.delta",
                "reasoning",
                delta="hm ",
                item_id="rs_1",
                output_index=0,
                summary_index=0,
            )
        )
    out.append(ev("response.output_item.added", output_index=1, item={"type": "message"}))
    answer = ev(
        "response.output_text.delta",
        "answer",
        delta="tok ",
        item_id="msg_1",
        output_index=1,
        content_index=0,
    )
    if scenario == "overloaded":
        failed = {
            **response,
            "status": "failed",
            "error": {"code": "server_error", "message": "The server is overloaded"},
        }
        return [*out, answer, answer, ev("response.failed", response=failed)]
    if scenario == "rate_limited":
        error = ev("error", code="rate_limit_exceeded", message="Rate limit reached", param=None)
        return [*out, answer, answer, error]
    out += [answer] * ANSWER
    out.append(ev("response.output_text.done", text="tok " * ANSWER))
    usage = {
        "input_tokens": INPUT_TOKENS,
        "input_tokens_details": {"cached_tokens": CACHED_TOKENS},
        "output_tokens": REASONING + ANSWER,
        "output_tokens_details": {"reasoning_tokens": REASONING},
        "total_tokens": INPUT_TOKENS + REASONING + ANSWER,
    }
    final = {
        **response,
        "status": "completed",
        "usage": usage,
        "output": [{"type": "reasoning"}, {"type": "message"}],
    }
    out.append(ev("response.completed", response=final))
    return out


def _messages(rid: str, scenario: str) -> list[Event]:
    def ev(type_: str, kind: str | None = None, **data: Any) -> Event:
        return (type_, {"type": type_, **data}, kind)

    usage = {
        "input_tokens": INPUT_TOKENS - CACHED_TOKENS,
        "cache_read_input_tokens": CACHED_TOKENS,
        "cache_creation_input_tokens": 0,
        "output_tokens": 1,
    }
    message: dict[str, Any] = {
        "id": rid,
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "m",
        "stop_reason": None,
        "usage": usage,
    }
    out = [ev("message_start", message=message)]
    out.append(
        ev("content_block_start", index=0, content_block={"type": "thinking", "thinking": ""})
    )
    out.append(ev("ping"))
    for _ in range(REASONING):
        out.append(
            ev(
                "content_block_delta",
                "reasoning",
                index=0,
                delta={"type": "thinking_delta", "thinking": "hm "},
            )
        )
    out.append(
        ev("content_block_delta", index=0, delta={"type": "signature_delta", "signature": "s"})
    )
    out.append(ev("content_block_stop", index=0))
    out.append(ev("content_block_start", index=1, content_block={"type": "text", "text": ""}))
    text = ev(
        "content_block_delta", "answer", index=1, delta={"type": "text_delta", "text": "tok "}
    )
    if scenario in ("overloaded", "rate_limited"):
        kind = "overloaded_error" if scenario == "overloaded" else "rate_limit_error"
        error = ev("error", error={"type": kind, "message": kind.replace("_", " ")})
        return [*out, text, text, error]
    out += [text] * (ANSWER - 1)
    out.append(ev("content_block_stop", index=1))
    out.append(
        ev(
            "content_block_start",
            index=2,
            content_block={"type": "tool_use", "id": "t1", "name": "f", "input": {}},
        )
    )
    out.append(
        ev(
            "content_block_delta",
            "tool_call",
            index=2,
            delta={"type": "input_json_delta", "partial_json": "{}"},
        )
    )
    out.append(ev("content_block_stop", index=2))
    out.append(
        ev(
            "message_delta",
            delta={"stop_reason": "tool_use", "stop_sequence": None},
            usage={"output_tokens": REASONING + ANSWER},
        )
    )
    out.append(ev("message_stop"))
    return out
