"""The simulator as a raw ASGI 3 application (served by uvicorn).

Routes: ``POST /v1/chat/completions``, ``POST /v1/completions``, ``GET /v1/models``,
``GET /v1/models/{id}``, ``GET /health``. Every client mistake becomes an OpenAI-style
error object with the status OpenAI uses; nothing a client sends can crash the server.
Per-tier engines (:mod:`tokrate.sim.scheduler`) are created on first use inside the
server's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import random
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Any

import orjson

from tokrate.sim.faults import FaultPlan, FaultRule
from tokrate.sim.model import TierTiming, count_chat_tokens, count_text_tokens, token_bytes
from tokrate.sim.protocol import ChunkBytes, completion_body, error_body, usage_dict
from tokrate.sim.scheduler import BatchEngine, FixedEngine, InjectedDisconnect, SimRequest
from tokrate.sim.truth import TruthLog

__all__ = ["ServerStopping", "SimApp", "SimState"]

Scope = Mapping[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

#: Request bodies above this are refused with 413 (a prompt set is never this large).
MAX_BODY_BYTES = 32 * 1024 * 1024

_JSON = [(b"content-type", b"application/json")]
_SSE = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]
_HTML_ERROR = (
    b"<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title></head>\n"
    b"<body><center><h1>502 Bad Gateway</h1></center><hr><center>nginx</center></body></html>\n"
)

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


class _BadRequest(Exception):
    def __init__(self, status: int, message: str, type_: str, param: str | None, code: str | None):
        super().__init__(message)
        self.status, self.message, self.type_, self.param, self.code = (
            status,
            message,
            type_,
            param,
            code,
        )


class _ClientGone(Exception):
    """The client disconnected before its request body was complete."""


def _invalid(message: str, param: str | None = None, code: str | None = None) -> _BadRequest:
    return _BadRequest(400, message, "invalid_request_error", param, code)


class ServerStopping(Exception):
    """Raised into open request handlers when the simulator stops: connections drop."""


class _DropInjectedDisconnect(logging.Filter):
    """Keep uvicorn from logging a traceback for a deliberate drop (fault or stop)."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, InjectedDisconnect | ServerStopping)


_uvicorn_error = logging.getLogger("uvicorn.error")
if not any(isinstance(f, _DropInjectedDisconnect) for f in _uvicorn_error.filters):
    _uvicorn_error.addFilter(_DropInjectedDisconnect())


@dataclass(frozen=True, slots=True)
class SimState:
    """Everything the app needs, resolved before the server starts (no I/O in here)."""

    timings: Mapping[str, TierTiming]
    faults: FaultPlan
    seed: int
    time_scale: float
    api_key: str | None
    truth: TruthLog | None


class SimApp:
    """ASGI 3 callable. One instance serves one simulator (one event loop)."""

    def __init__(self, state: SimState) -> None:
        self.state = state
        self._engines: dict[str, BatchEngine | FixedEngine] = {}
        self._length_rng = {
            name: random.Random(f"length:{state.seed}:{name}") for name in state.timings
        }
        self._id_prefix = secrets.token_hex(4)
        self._counter = 0
        self._api_key = state.api_key.encode() if state.api_key else None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._active: set[SimRequest] = set()
        self._stopping: asyncio.Future[None] | None = None

    def stop_streams(self) -> None:
        """Drop every open request now (thread-safe), so the server stops at once.

        Called before uvicorn's shutdown; otherwise open streams would wait out the
        graceful-shutdown timeout and then be cancelled with logged tracebacks.
        """
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # loop already stopped
                loop.call_soon_threadsafe(self._abort_all)

    def _abort_all(self) -> None:
        if self._stopping is not None and not self._stopping.done():
            self._stopping.set_result(None)
        for req in list(self._active):
            req.cancelled = True
            if not req.done.done():
                req.done.set_exception(ServerStopping())

    async def _sleep(self, seconds: float) -> None:
        """asyncio.sleep that ends with ServerStopping when the server stops."""
        assert self._stopping is not None
        await asyncio.wait((self._stopping,), timeout=seconds)
        if self._stopping.done():
            raise ServerStopping()

    def engine(self, name: str) -> BatchEngine | FixedEngine:
        eng = self._engines.get(name)
        if eng is None:
            timing = self.state.timings[name]
            eng = (FixedEngine if timing.tier.fixed_timing else BatchEngine)(
                timing, self.state.time_scale
            )
            self._engines[name] = eng
        return eng

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._stopping = self._loop.create_future()
        kind = scope["type"]
        if kind == "lifespan":
            await _lifespan(receive, send)
            return
        if kind != "http":
            return
        method, path = scope["method"], scope["path"].rstrip("/")
        try:
            if path == "/health":
                _require_method(method, "GET")
                stats = {name: e.stats() for name, e in self._engines.items()}
                await _respond(send, 200, orjson.dumps({"status": "ok", "engines": stats}))
                return
            if path.startswith("/v1/"):
                self._check_auth(scope)
            if path in ("/v1/chat/completions", "/v1/completions"):
                _require_method(method, "POST")
                body = await _read_body(receive)
                await self._completion(body, receive, send, chat=path == "/v1/chat/completions")
                return
            if path == "/v1/models":
                _require_method(method, "GET")
                await _respond(send, 200, orjson.dumps({"object": "list", "data": self._models()}))
                return
            if path.startswith("/v1/models/"):
                _require_method(method, "GET")
                name = path[len("/v1/models/") :]
                found = [m for m in self._models() if m["id"] == name]
                if not found:
                    raise _model_not_found(name)
                await _respond(send, 200, orjson.dumps(found[0]))
                return
            raise _BadRequest(
                404, f"Unknown path {path!r}", "invalid_request_error", None, "unknown_url"
            )
        except _BadRequest as err:
            await _respond(
                send, err.status, error_body(err.message, err.type_, param=err.param, code=err.code)
            )

    # --- helpers -------------------------------------------------------------------

    def _check_auth(self, scope: Scope) -> None:
        if self._api_key is None:
            return
        got = b""
        for k, v in scope["headers"]:
            if k == b"authorization":
                got = v
                break
        # Compare in constant time and never echo what was sent (it may be a real key).
        if not hmac.compare_digest(got, b"Bearer " + self._api_key):
            raise _BadRequest(
                401,
                "Incorrect API key provided."
                if got
                else "Missing bearer authentication in header.",
                "invalid_request_error",
                None,
                "invalid_api_key",
            )

    def _models(self) -> list[dict[str, Any]]:
        return [
            {
                "id": name,
                "object": "model",
                "created": 0,
                "owned_by": "tokrate-sim",
                "tokrate": t.describe(),
            }
            for name, t in self.state.timings.items()
        ]

    def _next_id(self, chat: bool) -> str:
        self._counter += 1
        return f"{'chatcmpl' if chat else 'cmpl'}-{self._id_prefix}{self._counter:08x}"

    async def _completion(self, raw: bytes, receive: Receive, send: Send, *, chat: bool) -> None:
        received_ns = perf_counter_ns()
        plan = self._parse(raw, chat=chat)
        timing = self.state.timings[plan.model]
        fault = self.state.faults.draw(plan.model)
        rid = self._next_id(chat)
        truth = self.state.truth
        kind = fault.kind if fault else None

        if kind in ("http_500", "http_429", "http_503"):
            assert fault is not None
            t = perf_counter_ns()
            await _fault_response(send, fault)
            if truth:
                truth.record(rid, plan.model, received_ns, t, [], t, 0, kind)
            return
        if kind == "slow_first_byte":
            assert fault is not None
            await self._sleep(fault.param("seconds"))
        if kind == "html_200":
            t = perf_counter_ns()
            await _respond(send, 200, _HTML_ERROR, [(b"content-type", b"text/html; charset=utf-8")])
            if truth:
                truth.record(rid, plan.model, received_ns, t, [], t, 0, kind)
            return

        created = int(time.time())
        chunks = ChunkBytes(rid, plan.model, created, chat=chat)
        req = SimRequest(
            chunks=chunks,
            stream=plan.stream,
            include_usage=plan.include_usage,
            input_tokens=plan.input_tokens,
            output_tokens=plan.output_tokens,
            reasoning_tokens=timing.tier.reasoning_tokens if chat else 0,
            finish_reason=plan.finish_reason,
            fault=fault,
            send=send,
        )
        engine = self.engine(plan.model)
        if truth and plan.stream:

            def record_truth() -> None:
                truth.record(
                    rid, plan.model, received_ns, req.first_write_ns, req.content_write_ns,
                    req.done_ns, req.produced, kind,
                )  # fmt: skip

            req.before_final = record_truth
        if plan.stream:
            await send({"type": "http.response.start", "status": 200, "headers": _SSE})
            if chat:
                # The role chunk goes out at once: it is the first byte, never a token.
                req.first_write_ns = perf_counter_ns()
                await send({"type": "http.response.body", "body": chunks.role(), "more_body": True})
        if isinstance(engine, FixedEngine):
            engine.submit(req, perf_counter_ns() if kind == "slow_first_byte" else received_ns)
        else:
            engine.submit(req)
        # A client that hangs up stops its request (frees its batch slot), as real
        # engines abort on disconnect; otherwise abandoned streams would slow others.
        watcher = asyncio.ensure_future(_until_disconnect(receive))
        self._active.add(req)
        try:
            await asyncio.wait((req.done, watcher), return_when=asyncio.FIRST_COMPLETED)
        finally:
            watcher.cancel()
            self._active.discard(req)
        if not req.done.done():
            req.cancel()
            if truth and (not plan.stream or req.before_final is not None):
                truth.record(
                    rid, plan.model, received_ns, req.first_write_ns, req.content_write_ns,
                    perf_counter_ns(), req.produced, kind,
                )  # fmt: skip
            return
        try:
            req.done.result()
        except ServerStopping:
            if truth and (not plan.stream or req.before_final is not None):
                truth.record(
                    rid, plan.model, received_ns, req.first_write_ns, req.content_write_ns,
                    perf_counter_ns(), req.produced, kind,
                )  # fmt: skip
            raise
        except InjectedDisconnect:
            if truth and (not plan.stream or req.before_final is not None):
                truth.record(
                    rid, plan.model, received_ns, req.first_write_ns, req.content_write_ns,
                    req.done_ns, req.produced, kind,
                )  # fmt: skip
            raise
        if not plan.stream:
            await self._send_whole(send, req, rid, plan.model, created, chat, fault)
        if truth and not plan.stream:
            truth.record(
                rid, plan.model, received_ns, req.first_write_ns, req.content_write_ns,
                req.done_ns, req.produced, kind,
            )  # fmt: skip

    async def _send_whole(
        self, send: Send, req: SimRequest, rid: str, model: str, created: int, chat: bool,
        fault: FaultRule | None,
    ) -> None:  # fmt: skip
        r = min(req.reasoning_tokens, req.produced)
        body = completion_body(
            response_id=rid,
            model=model,
            created=created,
            chat=chat,
            content=token_bytes(r, req.produced).decode("ascii"),
            reasoning=token_bytes(0, r).decode("ascii") if r else None,
            finish_reason=req.finish_reason,
            usage=usage_dict(req.input_tokens, req.produced, r),
        )
        kind = fault.kind if fault else None
        if kind == "stall":
            assert fault is not None
            await self._sleep(fault.param("seconds"))
        if kind == "malformed":
            body = body[: len(body) // 2]
        t = perf_counter_ns()
        req.first_write_ns = req.done_ns = t
        if kind == "disconnect":
            # Promise the whole body, send half, then drop the connection.
            headers = [*_JSON, (b"content-length", str(len(body)).encode())]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send(
                {"type": "http.response.body", "body": body[: len(body) // 2], "more_body": True}
            )
            raise InjectedDisconnect()
        await _respond(send, 200, body)

    def _parse(self, raw: bytes, *, chat: bool) -> _Plan:
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as err:
            raise _invalid(f"We could not parse the JSON body of your request: {err}") from None
        if not isinstance(body, dict):
            raise _invalid("The request body must be a JSON object.")
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise _invalid("you must provide a model parameter", "model")
        for name, allowed in _UNSUPPORTED.items():
            if name in body and body[name] not in allowed:
                raise _invalid(
                    f"Unsupported value for parameter {name!r}: {body[name]!r} (the simulator "
                    f"accepts only {', '.join(repr(a) for a in allowed if a is not None)})",
                    name,
                    "unsupported_parameter",
                )
        timing = self.state.timings.get(model)
        if timing is None:
            raise _model_not_found(model)
        tier = timing.tier
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise _invalid("'messages' must be a non-empty array", "messages")
            for i, m in enumerate(messages):
                if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                    raise _invalid(
                        f"messages[{i}] must be an object with a string 'role'", f"messages[{i}]"
                    )
            input_tokens = count_chat_tokens(messages)
            prompt_param = "messages"
        else:
            prompt = body.get("prompt")
            if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
                prompt = prompt[0]
            if not isinstance(prompt, str):
                raise _invalid(
                    "'prompt' must be a string (batched prompts are not supported)", "prompt"
                )
            input_tokens = max(1, count_text_tokens(prompt))
            prompt_param = "prompt"
        stream = body.get("stream", False)
        if stream not in (True, False, None):
            raise _invalid("'stream' must be a boolean", "stream")
        stream = bool(stream)
        opts = body.get("stream_options")
        include_usage = False
        if opts is not None:
            if not stream:
                raise _invalid(
                    "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
                    "stream_options",
                )
            if not isinstance(opts, dict):
                raise _invalid("'stream_options' must be an object", "stream_options")
            include_usage = opts.get("include_usage") is True
        max_tokens = _opt_int(body, "max_completion_tokens", 1)
        if max_tokens is None:
            max_tokens = _opt_int(body, "max_tokens", 1)
        min_tokens = _opt_int(body, "min_tokens", 0) or 0
        ignore_eos = body.get("ignore_eos", False)
        if not isinstance(ignore_eos, bool):
            raise _invalid("'ignore_eos' must be a boolean", "ignore_eos")

        ctx = tier.context_tokens
        if input_tokens + (max_tokens or 1) > ctx:
            raise _invalid(
                f"This model's maximum context length is {ctx} tokens. However, you requested "
                f"{input_tokens + (max_tokens or 0)} tokens ({input_tokens} in the messages, "
                f"{max_tokens or 0} in the completion). Please reduce the length of the "
                "messages or completion.",
                prompt_param,
                "context_length_exceeded",
            )
        cap = min(max_tokens, ctx - input_tokens) if max_tokens else ctx - input_tokens
        sampled = self._length_rng[model].randint(tier.output_tokens_min, tier.output_tokens_max)
        if ignore_eos:
            n = cap if max_tokens else min(max(sampled, min_tokens), cap)
        else:
            n = min(max(sampled, min_tokens), cap)
        finish = "length" if n == cap and (max_tokens is not None or n < sampled) else "stop"
        return _Plan(model, input_tokens, n, finish, stream, include_usage)


@dataclass(frozen=True, slots=True)
class _Plan:
    model: str
    input_tokens: int
    output_tokens: int
    finish_reason: str
    stream: bool
    include_usage: bool


def _opt_int(body: Mapping[str, Any], name: str, minimum: int) -> int | None:
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise _invalid(f"'{name}' must be an integer >= {minimum}, got {v!r}", name)
    return v


def _model_not_found(name: str) -> _BadRequest:
    return _BadRequest(
        404,
        f"The model {name!r} does not exist or you do not have access to it.",
        "invalid_request_error",
        "model",
        "model_not_found",
    )


def _require_method(method: str, allowed: str) -> None:
    if method != allowed:
        raise _BadRequest(
            405, f"Method {method} not allowed; use {allowed}", "invalid_request_error", None, None
        )


async def _read_body(receive: Receive) -> bytes:
    parts: list[bytes] = []
    size = 0
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            raise _ClientGone
        chunk = msg.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise _BadRequest(
                413,
                f"Request body over {MAX_BODY_BYTES} bytes",
                "invalid_request_error",
                None,
                None,
            )
        parts.append(chunk)
        if not msg.get("more_body", False):
            return b"".join(parts)


async def _until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _respond(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    hdrs = [
        *(headers if headers is not None else _JSON),
        (b"content-length", str(len(body)).encode()),
    ]
    await send({"type": "http.response.start", "status": status, "headers": hdrs})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _fault_response(send: Send, fault: FaultRule) -> None:
    if fault.kind == "http_429":
        retry_after = fault.param("retry_after")
        body = error_body(
            "Rate limit reached for requests (simulated fault http_429).",
            "requests",
            code="rate_limit_exceeded",
        )
        ra = f"{retry_after:g}".encode()
        await _respond(send, 429, body, [*_JSON, (b"retry-after", ra)])
    elif fault.kind == "http_503":
        body = error_body(
            "The engine is currently overloaded (simulated fault http_503).",
            "server_error",
            code="overloaded",
        )
        await _respond(send, 503, body)
    else:
        body = error_body(
            "The server had an error while processing your request (simulated fault http_500).",
            "server_error",
        )
        await _respond(send, 500, body)


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        msg = await receive()
        if msg["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif msg["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
