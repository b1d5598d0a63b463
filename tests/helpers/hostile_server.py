"""A raw asyncio HTTP/1.1 server on 127.0.0.1 (port 0) for client tests.

It speaks just enough of the OpenAI streaming protocol to be a well-behaved endpoint
(``ok`` mode) and can misbehave in every way issue 6 lists. It runs its own event loop
in a daemon thread, so a blocking test and an async client can both use it.

The mode and its options live in the URL, so one server serves every case:

    base = server.base_url("ok", tokens=5, itl_ms=10)   # http://127.0.0.1:P/m/ok/tokens=5,itl_ms=10/v1

Every content write is logged with ``time.perf_counter_ns()`` (the same clock the client
stamps with) in ``server.truth[response_id]``, so tests compare against the server's
own write times instead of nominal delays.

Modes: ok (option ``empty``: every content delta is "", the usage still counts the
tokens; option ``close_next``: the next request on the same connection is dropped
unread and the connection reset, as by a server whose keep-alive timeout fired as it
came; option ``hold=N``: the first N content chunks are produced at the ITL pace but
written together with the Nth, a server that really bunches the start of its answer;
option ``ids``: GET /models lists these ``:``-separated ids at once, where without it
the request gets the ok stream, which the pre-flight reads as no list and probes),
status (code, body), redirect (a 301 whose Location is ``to``, default
https://elsewhere.example/v1), gzip_stream (a well-formed stream sent with
Content-Encoding: gzip), html200, big_line (mb), big_header (mb), endless, slow_bytes,
bad_utf8, not_json, no_choices, bad_usage (value; ``literal=1`` writes it unquoted:
true, NaN, Infinity), no_headers, disconnect (after),
json200, models500 (GET /models answers 500 and resets the next request sent on that
connection, as transformers serve's dropped connection does; anything else is ``ok``),
models_huge / models_drip / models_odd (GET /models endless at full speed, endless one
byte per 0.2 s, or a list of non-models; anything else is ``ok``), probe_drip /
probe_endless / probe_gzip / probe_429 (GET /models answers 404, so the pre-flight's
one-token probe decides; that non-streamed request is answered 200 one byte a second,
200 with an endless body at full speed, 200 with a gzip body of ``mb`` MB (default 256)
of zeros, about 1/1000 of that on the wire, or 429; streamed requests are ``ok``), llama (llama-server's shapes:
/models listing ``ids`` (``:``-separated, default ``m``), each with ``meta.n_ctx``
(option ``n_ctx``) and, as options, ``meta.n_params``,
``meta.size``, ``meta.ftype`` (any JSON value), GET /props with ``model_ftype``
(``props_ftype``), answers as ``answer_model`` (default a
.gguf path), usage with ``prompt_tokens_details.cached_tokens`` (``cached``) and a
``timings`` object in the usage chunk).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import ssl
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson


@dataclass
class Truth:
    """Server-side facts of one response: perf_counter_ns of each content write."""

    received_ns: int
    content_write_ns: list[int] = field(default_factory=list)
    done_ns: int | None = None
    output_tokens: int = 0


class _Writer:
    def __init__(self, w: asyncio.StreamWriter, framing: str) -> None:
        self.w = w
        self.framing = framing

    async def head(self, status: int, ctype: str, extra: str = "") -> None:
        reason = {
            200: "OK",
            400: "Bad Request",
            429: "Too Many Requests",
            301: "Moved Permanently",
        }.get(status, "Status")
        if "Content-Length" in extra:
            self.framing = "length"
        framing = "Transfer-Encoding: chunked\r\n" if self.framing == "chunked" else ""
        if self.framing == "close":
            framing = "Connection: close\r\n"
        self.w.write(
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\n{framing}{extra}\r\n".encode()
        )

    def body(self, data: bytes) -> None:
        if self.framing == "chunked":
            self.w.write(b"%x\r\n%s\r\n" % (len(data), data))
        else:
            self.w.write(data)

    async def end(self) -> None:
        if self.framing == "chunked":
            self.w.write(b"0\r\n\r\n")
        await self.w.drain()


async def read_request(r: asyncio.StreamReader) -> tuple[str, str, dict[str, str], bytes, int]:
    """(method, target, headers by lower-case name, body, perf_counter_ns when the head
    arrived) of the next request on ``r``; raises IncompleteReadError at EOF."""
    head = await r.readuntil(b"\r\n\r\n")
    received = time.perf_counter_ns()
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    body = await r.readexactly(int(headers.get("content-length", "0")))
    return method, target, headers, body, received


class HostileServer:
    """Context manager: ``with HostileServer() as s: s.base_url("ok")``."""

    def __init__(self, *, ssl_context: ssl.SSLContext | None = None) -> None:
        self.ssl_context = ssl_context
        self.truth: dict[str, Truth] = {}
        self.requests: list[dict[str, Any]] = []
        self.connections = 0
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._ready = threading.Event()
        self._counter = 0
        self._writers: set[asyncio.StreamWriter] = set()

    def base_url(self, mode: str, **opts: Any) -> str:
        scheme = "https" if self.ssl_context else "http"
        host = "localhost" if self.ssl_context else "127.0.0.1"
        spec = ",".join(f"{k}={v}" for k, v in opts.items()) or "-"
        return f"{scheme}://{host}:{self.port}/m/{mode}/{spec}/v1"

    def __enter__(self) -> HostileServer:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("hostile server did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        loop = self._loop
        assert loop is not None and self._thread is not None
        loop.call_soon_threadsafe(self._stop_event.set)
        self._thread.join(10)

    def _run(self) -> None:
        self._loop = loop = asyncio.new_event_loop()
        self._stop_event = asyncio.Event()

        async def main() -> None:
            self._server = await asyncio.start_server(
                self._handle, "127.0.0.1", 0, ssl=self.ssl_context, limit=1 << 20
            )
            self.port = self._server.sockets[0].getsockname()[1]
            self._ready.set()
            await self._stop_event.wait()
            self._server.close()
            # Close every connection so each handler ends by itself (cancelling stream
            # handler tasks makes asyncio log spurious errors).
            # Repeated: on a busy machine a connection accepted during the first pass
            # registers its writer only after it, and would be left open.
            for _ in range(3):
                for writer in list(self._writers):
                    writer.transport.abort()
                tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
                if not tasks:
                    break
                await asyncio.wait(tasks, timeout=5)
            await self._server.wait_closed()
            for _ in range(5):  # let aborted transports finish closing before the loop ends
                await asyncio.sleep(0.01)

        with contextlib.suppress(Exception):
            loop.run_until_complete(main())
        loop.close()
        # A connection accepted in the shutdown's last instant (a client's preconnect
        # racing the teardown) never reached a handler, so nothing above closed its
        # server-side socket: it is this helper's own, so collect it here, quietly,
        # rather than let it be reported against a later test.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()

    async def _handle(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.add(w)
        reset_next = False
        try:
            while True:
                _method, path, headers, body, received = await read_request(r)
                if reset_next:  # the connection is gone, the client not told
                    w.transport.abort()
                    break
                req = orjson.loads(body) if body else {}
                self.requests.append({"path": path, "headers": headers, "body": req})
                parts = path.split("/")
                mode, spec = parts[2], parts[3]
                opts: dict[str, str] = {}
                if spec != "-":
                    opts = dict(kv.split("=", 1) for kv in spec.split(","))
                framing = opts.get("framing", "chunked")
                out = _Writer(w, framing)
                if mode == "big_header" and not path.endswith("/models"):
                    await _big_header(opts, out)
                    break
                if path.endswith("/models") and mode in _ENDLESS_LISTS:
                    await _endless_models(mode, out)
                    break
                if mode in ("redirect", "gzip_stream"):
                    await _odd_answer(mode, opts, out, f"resp-odd-{len(self.requests)}")
                    continue
                if mode in _PROBE_MODES and not req.get("stream"):
                    await _hostile_probe(mode, opts, out, models=path.endswith("/models"))
                    break
                listed = mode in ("models500", "llama") or (mode == "ok" and "ids" in opts)
                if (path.endswith("/models") and listed) or (
                    path.endswith("/props") and mode == "llama"
                ):
                    keep = await _models_page(mode, opts, out, props=path.endswith("/props"))
                    reset_next = mode == "models500"
                else:
                    keep = await self._respond(mode, opts, req, path, out, received)
                    # close_next: the next request on this connection meets a server that
                    # closed it as the request came (a keep-alive timeout's race).
                    reset_next = bool(opts.get("close_next"))
                if not keep or framing == "close":
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            with contextlib.suppress(Exception):
                w.close()
                await w.wait_closed()
            self._writers.discard(w)

    async def _respond(
        self, mode: str, o: dict[str, str], req: dict[str, Any], path: str, out: _Writer, rx: int
    ) -> bool:
        """Serve one request; False closes the connection afterwards."""
        self._counter += 1
        rid = f"resp-{self._counter}"
        legacy = path.endswith("/completions") and not path.endswith("/chat/completions")
        sse = "text/event-stream"
        if mode == "echo_secrets":
            return await self._echo_secrets(req, path, out, rid)
        if mode == "status":
            code = int(o.get("code", "500"))
            body = o.get("body", "boom").replace("_", " ").encode()
            msg = orjson.dumps({"error": {"message": body.decode(), "type": "x"}})
            await out.head(code, "application/json", f"Content-Length: {len(msg)}\r\n")
            out.w.write(msg)
            await out.w.drain()
            return True
        if mode == "ok" and o.get("reject_usage") and "stream_options" in req:
            msg = b'{"error":{"message":"Unrecognized field stream_options","type":"invalid"}}'
            await out.head(400, "application/json", f"Content-Length: {len(msg)}\r\n")
            out.w.write(msg)
            await out.w.drain()
            return True
        if mode == "no_headers":
            # asyncio offers no event for "the peer closed"; polling the transport is it.
            while not out.w.transport.is_closing():  # noqa: ASYNC110
                await asyncio.sleep(0.02)
            return False
        if mode in ("html200", "json200"):
            page = b"<html><body><h1>Gateway says hi</h1></body></html>"
            ctype = "text/html"
            if mode == "json200":
                page, ctype = b'{"error": "not streaming"}', "application/json"
            await out.head(200, ctype, f"Content-Length: {len(page)}\r\n")
            out.w.write(page)
            await out.w.drain()
            return True
        out.framing = "close" if mode in ("big_line", "slow_bytes") else out.framing
        await out.head(200, sse)
        await out.w.drain()
        if mode == "big_line":
            piece = b"a" * 65536
            out.body(b"data: ")
            for _ in range(int(float(o.get("mb", "50")) * 16)):
                if out.w.transport.is_closing():
                    return False
                out.body(piece)
                await out.w.drain()
            return False
        if mode == "slow_bytes":
            for byte in b"data: " + b'{"choices":[]}' * 100:
                if out.w.transport.is_closing():
                    return False
                out.body(bytes([byte]))
                await out.w.drain()
                await asyncio.sleep(float(o.get("gap_s", "1")))
            return False
        simple = {
            "bad_utf8": b'data: {"choices":[{"index":0,"delta":{"content":"\xff\xfe"}}]}\n\n',
            "not_json": b"data: hello world\n\n",
            "no_choices": b'data: {"id":"x","object":"chat.completion.chunk"}\n\n',
        }
        if mode in simple:
            out.body(simple[mode])
            await out.end()
            return False
        return await self._stream(mode, o, req, out, rx, rid, legacy)

    async def _echo_secrets(self, req: dict[str, Any], path: str, out: _Writer, rid: str) -> bool:
        """A server that repeats everything it was sent: the model list for GET /models,
        a normal one-token answer (the readiness check), else one content chunk and then
        an in-stream error event quoting every request header value (the key among them)
        wrapped in terminal control sequences."""
        if path.endswith("/models"):
            msg = orjson.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]})
            await out.head(200, "application/json", f"Content-Length: {len(msg)}\r\n")
            out.w.write(msg)
            await out.w.drain()
            return True
        headers = self.requests[-1]["headers"]
        # The secrets first: the client keeps only the start of a long error message.
        order = sorted(headers, key=lambda k: k not in ("authorization", "x-pass"))
        seen = " | ".join(f"{k}={headers[k]}" for k in order)
        events = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": "hi"}}]}]
        if req.get("max_tokens") != 1:
            events.append({"error": {"message": f"\x1b[2J\x1b]0;pwned\x07denied: {seen}"}})
        else:
            events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
        await out.head(200, "text/event-stream")
        for ev in events:
            out.body(b"data: " + orjson.dumps({"id": rid, "model": "m", **ev}) + b"\n\n")
        if req.get("max_tokens") == 1:
            out.body(b"data: [DONE]\n\n")
        await out.end()
        return True

    async def _stream(
        self,
        mode: str,
        o: dict[str, str],
        req: dict[str, Any],
        out: _Writer,
        rx: int,
        rid: str,
        legacy: bool,
    ) -> bool:
        truth = self.truth[rid] = Truth(received_ns=rx)
        n = int(o.get("tokens", req.get("max_tokens") or 8))
        per_chunk = int(o.get("per_chunk", "1"))
        reasoning = int(o.get("reasoning", "0"))
        ttft = float(o.get("ttft_ms", "0")) / 1000
        itl = float(o.get("itl_ms", "0")) / 1000
        nl = b"\r\n" if o.get("crlf") else b"\n"
        sep = b"data:" if o.get("nospace") else b"data: "
        include_usage = bool((req.get("stream_options") or {}).get("include_usage"))

        model = o.get("answer_model") or _default_model(mode, req)

        def event(obj: dict[str, Any]) -> bytes:
            return sep + orjson.dumps({"id": rid, "model": model, **obj}) + nl + nl

        def delta(**d: Any) -> dict[str, Any]:
            if legacy:
                return {"choices": [{"index": 0, "text": d.get("content", "")}]}
            return {"choices": [{"index": 0, "delta": d, "finish_reason": None}]}

        if not legacy:
            out.body(event(delta(role="assistant", content="")))
        if o.get("comments"):
            out.body(b": keep-alive" + nl)
        if ttft:
            await out.w.drain()
            await asyncio.sleep(ttft)
        sent = 0
        total = 10**9 if mode == "endless" else n
        hold = int(o.get("hold", "0"))
        held: list[bytes] = []
        i = 0
        while sent < total:
            if out.w.transport.is_closing():  # the client gave up: stop, don't spin
                return False
            if i > 0 and itl:
                await asyncio.sleep(itl)
            k = 1 if i < reasoning else min(per_chunk, total - sent)
            d = (
                delta(reasoning_content=f"think{i} ")
                if i < reasoning
                else delta(content="" if o.get("empty") else "tok " * k)
            )
            sent += k
            # The first `hold` chunks are produced now but written with the last of them.
            held.append(event(d))
            _write_held(out, held, truth, now=i >= hold - 1 or sent >= total)
            i += 1
            if mode == "disconnect" and i >= int(o.get("after", "2")):
                await out.w.drain()
                out.w.transport.abort()
                return False
            if itl or i % 64 == 0:
                await out.w.drain()
        finish: dict[str, Any] = {"index": 0, "finish_reason": "length"}
        finish.update({"text": ""} if legacy else {"delta": {}})
        out.body(event({"choices": [finish]}))
        if include_usage or mode == "bad_usage":
            out.body(_literal(mode, o, event(_usage_chunk(mode, o, sent, reasoning))))
        if o.get("no_done"):
            await out.end()
            truth.output_tokens = sent
            return False
        out.body(b"data: [DONE]" + nl + nl)
        truth.done_ns = time.perf_counter_ns()
        truth.output_tokens = sent
        tail = float(o.get("tail_ms", "0")) / 1000
        if tail:
            # [DONE] in one read, the chunked body's terminator in a later one (as
            # llama-server sends them): the connection is still busy in between.
            await out.w.drain()
            await asyncio.sleep(tail)
        await out.end()
        return True


async def _odd_answer(mode: str, o: dict[str, str], out: _Writer, rid: str) -> bool:
    """The ``redirect`` and ``gzip_stream`` answers."""
    if mode == "redirect":
        to = o.get("to", "https://elsewhere.example/v1/chat/completions")
        msg = b"<html>Moved</html>"
        extra = f"Location: {to}\r\nContent-Length: {len(msg)}\r\n"
        await out.head(301, "text/html", extra)
        out.w.write(msg)
        await out.w.drain()
        return True
    import gzip

    events = [b"data: " + orjson.dumps(_gzip_chunk(rid, i)) + b"\n\n" for i in range(4)]
    packed = gzip.compress(b"".join(events) + b"data: [DONE]\n\n")
    extra = f"Content-Encoding: gzip\r\nContent-Length: {len(packed)}\r\n"
    await out.head(200, "text/event-stream", extra)
    out.w.write(packed)
    await out.w.drain()
    return True


def _literal(mode: str, o: dict[str, str], chunk: bytes) -> bytes:
    """bad_usage with ``literal``: the value as written, not as a JSON string (true,
    NaN, Infinity)."""
    if mode != "bad_usage" or not o.get("literal"):
        return chunk
    return chunk.replace(b'"' + o["value"].encode() + b'"', o["value"].encode())


def _gzip_chunk(rid: str, i: int) -> dict[str, Any]:
    finish = "length" if i == 3 else None
    choice = {"index": 0, "delta": {"content": f"tok{i} "}, "finish_reason": finish}
    return {"id": rid, "object": "chat.completion.chunk", "model": "m", "choices": [choice]}


def _write_held(out: _Writer, held: list[bytes], truth: Truth, *, now: bool) -> None:
    """When ``now``: write the chunks produced so far in one write, each logged at it."""
    if not now:
        return
    out.body(b"".join(held))
    truth.content_write_ns.extend([time.perf_counter_ns()] * len(held))
    held.clear()


def _default_model(mode: str, req: dict[str, Any]) -> Any:
    return "/models/rand-3m.gguf" if mode == "llama" else req.get("model")


def _raw(value: str) -> Any:
    """An option as JSON when it parses (``n_params=-5``, ``ftype=true``), else text."""
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        return value


async def _big_header(o: dict[str, str], out: _Writer) -> bool:
    """The ``big_header`` mode: one header line of ``mb`` MB (default 50), sent until the
    client hangs up."""
    out.w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nX-Pad: ")
    piece = b"a" * 65536
    for _ in range(int(float(o.get("mb", "50")) * 16)):
        if out.w.transport.is_closing():
            return False
        out.w.write(piece)
        await out.w.drain()
    out.w.write(b"\r\n\r\n")
    await out.w.drain()
    return False


#: GET /models answers that never end or make no sense (anything else is ``ok``):
#: ``models_huge`` an endless list at full speed, ``models_drip`` a list that grows by one
#: byte every 0.2 s, ``models_odd`` a list whose entries are no models.
_ENDLESS_LISTS = ("models_huge", "models_drip", "models_odd")


#: Answers to the pre-flight's non-streamed one-token probe (module doc).
_PROBE_MODES = ("probe_drip", "probe_endless", "probe_gzip", "probe_429")
_BOMBS: dict[int, bytes] = {}


def _gzip_bomb(mb: int) -> bytes:
    """``mb`` MiB of zeros, gzip-compressed (~1 KiB on the wire per MiB), made once."""
    if mb not in _BOMBS:
        import zlib

        packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        zeros = bytes(1 << 20)
        _BOMBS[mb] = b"".join(packer.compress(zeros) for _ in range(mb)) + packer.flush()
    return _BOMBS[mb]


async def _hostile_probe(mode: str, o: dict[str, str], out: _Writer, *, models: bool) -> None:
    """The ``probe_*`` answers (until the client hangs up, or 5 minutes)."""
    if models or mode == "probe_429":
        code = 404 if models else 429
        msg = b'{"error": {"message": "not here", "type": "x"}}'
        if code == 429:
            msg = b'{"error": {"message": "Rate limit reached", "type": "rate_limit"}}'
        await out.head(code, "application/json", f"Content-Length: {len(msg)}\r\n")
        out.w.write(msg)
        await out.w.drain()
        return
    if mode == "probe_gzip":
        bomb = _gzip_bomb(int(o.get("mb", "256")))
        extra = f"Content-Encoding: gzip\r\nContent-Length: {len(bomb)}\r\n"
        await out.head(200, "application/json", extra)
        out.w.write(bomb)
        await out.w.drain()
        return
    await out.head(200, "application/json")
    out.body(b'{"choices": [{"message": {"content": "')
    block = b"a" * 65536
    end = time.monotonic() + 300
    while time.monotonic() < end and not out.w.transport.is_closing():
        if mode == "probe_endless":
            out.body(block)
        else:
            out.body(b"a")
            await asyncio.sleep(1.0)
        await out.w.drain()


async def _endless_models(mode: str, out: _Writer) -> None:
    """The ``models_*`` GET /models answers (until the client hangs up, or 5 minutes)."""
    if mode == "models_odd":
        msg = b'{"object": "list", "data": [{"id": 5}, null, "x", {"id": {"a": 1}}]}'
        await out.head(200, "application/json", f"Content-Length: {len(msg)}\r\n")
        out.w.write(msg)
        await out.w.drain()
        return
    await out.head(200, "application/json")
    out.body(b'{"object": "list", "data": [')
    entry = b'{"id": "model-%d", "object": "model"}, '
    block = b"".join(entry % i for i in range(2000))  # ~80 KB
    end = time.monotonic() + 300
    while time.monotonic() < end:
        if mode == "models_huge":
            out.body(block)
        else:
            out.body(b" ")
            await asyncio.sleep(0.2)
        await out.w.drain()


async def _models_page(mode: str, o: dict[str, str], out: _Writer, *, props: bool) -> bool:
    """GET /models of the ``models500``, ``llama`` and ``ok`` (with ``ids``) modes
    (models500: the caller resets the next request on this connection, as transformers
    serve's dropped one does; ok: a plain OpenAI list), and the llama mode's GET /props
    (``props_ftype``: its ``model_ftype``)."""
    if mode == "models500":
        msg = b'{"error": "huggingface_hub.errors.CacheNotFound"}'
        await out.head(500, "application/json", f"Content-Length: {len(msg)}\r\n")
        out.w.write(msg)
        await out.w.drain()
        return True
    if props:
        doc = {"total_slots": 4}
        if "props_ftype" in o:
            doc["model_ftype"] = _raw(o["props_ftype"])
        msg = orjson.dumps(doc)
        await out.head(200, "application/json", f"Content-Length: {len(msg)}\r\n")
        out.w.write(msg)
        await out.w.drain()
        return True
    if mode == "ok":
        listed = [{"id": i, "object": "model"} for i in o["ids"].split(":")]
        msg = orjson.dumps({"object": "list", "data": listed})
        await out.head(200, "application/json", f"Content-Length: {len(msg)}\r\n")
        out.w.write(msg)
        await out.w.drain()
        return True
    meta: dict[str, Any] = {"n_ctx": int(o.get("n_ctx", "2048")), "n_vocab": 512}
    # llama-server's own size facts, as options (any JSON value, to send bad ones too).
    for key in ("n_params", "size", "ftype"):
        if key in o:
            meta[key] = _raw(o[key])
    models = [{"id": i, "object": "model", "meta": meta} for i in o.get("ids", "m").split(":")]
    msg = orjson.dumps({"object": "list", "data": models})
    await out.head(200, "application/json", f"Content-Length: {len(msg)}\r\n")
    out.w.write(msg)
    await out.w.drain()
    return True


def _usage_chunk(mode: str, o: dict[str, str], sent: int, reasoning: int) -> dict[str, Any]:
    chunk: dict[str, Any] = {"choices": [], "usage": _usage(mode, o, sent, reasoning)}
    if mode == "llama":
        chunk["timings"] = _timings(o, sent)
    return chunk


def _usage(mode: str, o: dict[str, str], sent: int, reasoning: int) -> dict[str, Any]:
    value: Any = sent
    if mode == "bad_usage":
        raw = o.get("value", "-5")
        value = int(raw) if raw.lstrip("-").isdigit() else raw
    usage = {"prompt_tokens": 11, "completion_tokens": value}
    usage["total_tokens"] = 11 + (value if isinstance(value, int) else 0)
    if reasoning:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    if "cached" in o:
        usage["prompt_tokens_details"] = {"cached_tokens": int(o["cached"])}
    return usage


def _timings(o: dict[str, str], sent: int) -> dict[str, Any]:
    """llama-server's timing object (numbers made up, shapes as it sends them)."""
    predicted_ms = 2.5 * max(0, sent - 1)
    return {
        "cache_n": int(o.get("cached", "0")),
        "prompt_n": 11 - int(o.get("cached", "0")),
        "prompt_ms": 3.25,
        "predicted_n": sent,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": 2.5,
        "predicted_per_second": 400.0,
    }


@contextlib.contextmanager
def hostile_server(*, ssl_context: ssl.SSLContext | None = None) -> Iterator[HostileServer]:
    with HostileServer(ssl_context=ssl_context) as server:
        yield server
