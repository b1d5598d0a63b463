"""The simulator as a raw ASGI 3 application (served by uvicorn).

Routes: ``POST /v1/chat/completions``, ``POST /v1/completions``, ``POST /v1/responses``
(OpenAI Responses API), ``POST /v1/messages`` (Anthropic Messages), ``GET /v1/models``,
``GET /v1/models/{id}``, ``GET /health``. Every generation route is one code path
(:meth:`SimApp._completion`): the same engines, fault draw and truth log; only the
parser and the wire of its :class:`~tokrate.sim.apis.Api` differ. Every client mistake
becomes an error object in the route's own shape with the status its provider uses;
nothing a client sends can crash the server. Per-tier engines
(:mod:`tokrate.sim.scheduler`) are created on first use inside the server's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Any

import orjson

from tokrate.sim.answers import answer_pieces, answers_right
from tokrate.sim.apis import API_ROUTES, Api, check_any_key
from tokrate.sim.arrival import ARRIVAL_KEY
from tokrate.sim.bad_request import BadRequest, model_not_found
from tokrate.sim.capture import request_capture
from tokrate.sim.faults import FaultPlan, FaultRule
from tokrate.sim.model import TierTiming
from tokrate.sim.prometheus_page import serve_metrics
from tokrate.sim.request_plan import RequestPlan
from tokrate.sim.scheduler import BatchEngine, FixedEngine, InjectedDisconnect, SimRequest
from tokrate.sim.structured import Answer, plan_answer
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


class _ClientGone(Exception):
    """The client disconnected before its request body was complete."""


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
    prefix_cache: bool = False
    request_metrics: bool = False
    #: The prefix cache is looked up but keeps nothing (SimConfig.prefix_cache_cold).
    prefix_cache_cold: bool = False

    @property
    def caches_prefixes(self) -> bool:
        """Whether prompts are looked up in a prefix cache (and usage reports it)."""
        return self.prefix_cache or self.prefix_cache_cold


class SimApp:
    """ASGI 3 callable. One instance serves one simulator (one event loop)."""

    def __init__(self, state: SimState) -> None:
        self.state = state
        self._engines: dict[str, BatchEngine | FixedEngine] = {}
        self._length_rng = {
            name: random.Random(f"length:{state.seed}:{name}") for name in state.timings
        }
        #: Right or wrong, for a request with tools or a JSON format but no reference.
        self._answer_rng = {
            name: random.Random(f"answer:{state.seed}:{name}") for name in state.timings
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
                timing,
                self.state.time_scale,
                prefix_cache=self.state.caches_prefixes,
                prefix_cache_blocks=0 if self.state.prefix_cache_cold else None,
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
        api = API_ROUTES.get(path)
        try:
            if path == "/health":
                _require_method(method, "GET")
                stats = {name: e.stats() for name, e in self._engines.items()}
                await _respond(send, 200, orjson.dumps({"status": "ok", "engines": stats}))
                return
            if path == "/metrics":
                return await serve_metrics(
                    send,
                    method,
                    self.state.timings,
                    self._engines,
                    self.state.caches_prefixes,
                )
            if api is not None:
                api.check_headers(scope["headers"], self._api_key)
                _require_method(method, "POST")
                body = await _read_body(receive)
                arrived = scope.get("extensions", {}).get(ARRIVAL_KEY)
                await self._completion(api, body, receive, send, scope["headers"], arrived)
                return
            if path.startswith("/v1/"):
                check_any_key(scope["headers"], self._api_key)
            if path == "/v1/models":
                _require_method(method, "GET")
                await _respond(send, 200, orjson.dumps({"object": "list", "data": self._models()}))
                return
            if path.startswith("/v1/models/"):
                _require_method(method, "GET")
                name = path[len("/v1/models/") :]
                found = [m for m in self._models() if m["id"] == name]
                if not found:
                    raise model_not_found(name)
                await _respond(send, 200, orjson.dumps(found[0]))
                return
            raise BadRequest(
                404, f"Unknown path {path!r}", "invalid_request_error", None, "unknown_url"
            )
        except BadRequest as err:
            body, headers = (api or API_ROUTES["/v1/chat/completions"]).error(
                err, self._next_id("req_")
            )
            await _respond(send, err.status, body, headers)

    # --- helpers -------------------------------------------------------------------

    def _models(self) -> list[dict[str, Any]]:
        return [
            {
                "id": name,
                "object": "model",
                "created": 0,
                "owned_by": "tokrate-sim",
                "max_model_len": t.tier.context_tokens,  # as vLLM says it (pre-flight reads it)
                "tokrate": t.describe(),
            }
            for name, t in self.state.timings.items()
        ]

    def _next_id(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}{self._id_prefix}{self._counter:08x}"

    async def _completion(
        self,
        api: Api,
        raw: bytes,
        receive: Receive,
        send: Send,
        headers: list[tuple[bytes, bytes]],
        arrived_ns: int | None = None,
    ) -> None:
        received_ns = perf_counter_ns()
        plan = api.plan(raw, self.state.timings, self._length_rng, self.state.caches_prefixes)
        fault = self.state.faults.draw(plan.model)
        rid = self._next_id(api.id_prefix)
        entry = _TruthEntry(self.state.truth, rid, plan.model, received_ns, fault, api.name)
        entry.arrived_ns = arrived_ns
        if self.state.truth is not None:
            entry.request = request_capture(raw, headers)  # the knobs that reached the wire
        try:
            await self._answer(api, plan, fault, entry, receive, send)
        finally:
            entry.write()

    async def _answer(
        self,
        api: Api,
        plan: RequestPlan,
        fault: FaultRule | None,
        entry: _TruthEntry,
        receive: Receive,
        send: Send,
    ) -> None:
        kind = fault.kind if fault else None
        if kind in ("http_500", "http_429", "http_503", "html_200"):
            assert fault is not None
            entry.answered_ns = perf_counter_ns()
            entry.write()  # before the answer, so a client that read it finds the line
            if kind == "html_200":
                await _respond(
                    send, 200, _HTML_ERROR, [(b"content-type", b"text/html; charset=utf-8")]
                )
            else:
                await _respond(send, *api.fault(fault, self._next_id("req_")))
            return
        if kind == "slow_first_byte":
            assert fault is not None
            await self._sleep(fault.param("seconds"))
        plan, answer, planned = self._planned_answer(plan)
        entry.answered_right = None if planned is None else planned.right
        wire = api.wire(entry.request_id, plan, int(time.time()))
        calls_tool = planned is not None and planned.call_name is not None
        if planned is not None and planned.call_name is not None:
            wire.start_call(planned.call_name, planned.call_arguments)
            entry.tool_call = {"name": planned.call_name, "arguments": planned.call_arguments}
        req = SimRequest(
            wire=wire,
            stream=plan.stream,
            input_tokens=plan.input_tokens,
            output_tokens=plan.output_tokens,
            reasoning_tokens=plan.reasoning_tokens,
            finish_reason=plan.finish_reason,
            fault=fault,
            send=send,
            block_keys=plan.block_keys,
            cache_limit_tokens=plan.cache_limit_tokens,
            answer=answer,
            calls_tool=calls_tool,
            received_ns=entry.received_ns,
            request_metrics=self.state.request_metrics,
            speculative=_speculative(self.state.timings.get(plan.model)),
        )
        entry.req = req
        # Logged before the final write, so a client that read the end finds the line.
        req.before_final = entry.write
        if plan.stream:
            await send({"type": "http.response.start", "status": 200, "headers": _SSE})
            opening = wire.opening()
            if opening:
                # Sent at once (chat's role chunk, response.created, message_start): the
                # first byte, never a token.
                req.first_write_ns = perf_counter_ns()
                await send({"type": "http.response.body", "body": opening, "more_body": True})
        engine = self.engine(plan.model)
        if isinstance(engine, FixedEngine):
            engine.submit(
                req, perf_counter_ns() if kind == "slow_first_byte" else entry.received_ns
            )
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
            entry.ended_ns = perf_counter_ns()
            return
        try:
            req.done.result()
        except ServerStopping:
            entry.ended_ns = perf_counter_ns()
            raise
        if not plan.stream:
            await self._send_whole(send, req, fault)

    def _planned_answer(
        self, plan: RequestPlan
    ) -> tuple[RequestPlan, tuple[bytes, ...] | None, Answer | None]:
        """The plan, the answer's tokens and what the answer is (:mod:`tokrate.sim.
        structured`) for a request with a reference answer, tools or a JSON format:
        the tier answers right with its task accuracy (the reference's draw, else one
        from the tier's own seeded stream); the answer comes after any reasoning, cut
        by the request's output limit and the context ("length"). Any other request:
        the plan, None, None (the filler text of the planned length)."""
        ref, shape = plan.reference, plan.shape
        tier = self.state.timings[plan.model].tier
        if ref is not None:
            right = answers_right(self.state.seed, tier, ref)
        elif shape.calls_tool or shape.wants_json:
            right = self._answer_rng[plan.model].random() < tier.accuracy
        else:
            return plan, None, None
        planned = plan_answer(shape, ref, right)
        if planned.call_name is not None:
            pieces, done = answer_pieces(planned.call_arguments), "tool_calls"
        elif planned.text is not None:
            pieces, done = answer_pieces(planned.text), "stop"
        else:
            return plan, None, planned
        wanted = plan.reasoning_tokens + len(pieces)
        cap = tier.context_tokens - plan.input_tokens
        limit = ref.max_tokens if ref is not None else plan.output_limit
        if limit is not None:
            cap = min(cap, limit)
        if wanted > cap:
            return (
                dataclasses.replace(plan, output_tokens=cap, finish_reason="length"),
                pieces,
                planned,
            )
        return dataclasses.replace(plan, output_tokens=wanted, finish_reason=done), pieces, planned

    async def _send_whole(self, send: Send, req: SimRequest, fault: FaultRule | None) -> None:
        # The answer the truth log records: a right answer's text where the tier answers
        # right, as its stream would carry it.
        body = req.wire.whole(req.finish_reason, req.usage(), req.answer_text())
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
        if req.before_final is not None:
            req.before_final()
        await _respond(send, 200, body)


class _TruthEntry:
    """The one truth-log line a request leaves, written once however it ends: before a
    stream's final chunk, or when the handler returns or raises."""

    def __init__(
        self,
        log: TruthLog | None,
        request_id: str,
        model: str,
        received_ns: int,
        fault: FaultRule | None,
        protocol: str,
    ) -> None:
        self.request_id = request_id
        self.received_ns = received_ns
        #: When the request's last byte reached the socket (tokrate.sim.arrival).
        self.arrived_ns: int | None = None
        self.req: SimRequest | None = None
        #: When an error answer (no tokens) was written.
        self.answered_ns: int | None = None
        #: When the request was cut short (client gone, server stopping).
        self.ended_ns: int | None = None
        self._log = log
        self._model = model
        self._fault = fault.kind if fault else None
        self._protocol = protocol
        self._written = False
        #: The request's knobs (tokrate.sim.capture), when a truth log is kept.
        self.request: dict[str, Any] | None = None
        #: Whether the tier answered the request's reference answer right (None: none).
        self.answered_right: bool | None = None
        #: The tool call it answered with (``{"name", "arguments"}``), or None.
        self.tool_call: dict[str, str] | None = None

    def write(self) -> None:
        if self._log is None or self._written:
            return
        self._written = True
        req = self.req
        if req is None:
            t = self.answered_ns if self.answered_ns is not None else perf_counter_ns()
            self._log.record(
                self.request_id,
                self._model,
                self.received_ns,
                t,
                [],
                t,
                0,
                self._fault,
                protocol=self._protocol,
                reasoning_tokens=0,
                request=self.request,
                arrived_ns=self.arrived_ns,
            )
            return
        done = self.ended_ns if self.ended_ns is not None else req.done_ns
        self._log.record(
            self.request_id,
            self._model,
            self.received_ns,
            req.first_write_ns,
            req.content_write_ns,
            done if done is not None else perf_counter_ns(),
            req.produced,
            self._fault,
            protocol=self._protocol,
            reasoning_tokens=req.usage().reasoning_tokens,
            input_tokens=req.input_tokens,
            cached_tokens=req.cached_tokens,
            engine=req.engine_stamps(),
            request=self.request,
            answered_right=self.answered_right,
            tool_call=self.tool_call,
            arrived_ns=self.arrived_ns,
        )


def _speculative(timing: TierTiming | None) -> dict[str, float] | None:
    """vLLM's ``speculative_decoding`` summary for a speculative tier (else None).
    ``draft_acceptance_rate`` is vLLM's: accepted / drafted tokens, (speedup - 1) /
    draft_tokens, the ratio of the /metrics counters too (the tier's
    ``speculative_acceptance`` is the chance of each drafted position given the
    ones before it)."""
    if timing is None or timing.tier.speculative_acceptance is None:
        return None
    tier = timing.tier
    return {
        "draft_acceptance_rate": (tier.speculative_speedup - 1.0) / tier.draft_tokens,
        "mean_acceptance_length": tier.speculative_speedup,
        "num_spec_tokens": tier.draft_tokens,
    }


def _require_method(method: str, allowed: str) -> None:
    if method != allowed:
        raise BadRequest(
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
            raise BadRequest(
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


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        msg = await receive()
        if msg["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif msg["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
