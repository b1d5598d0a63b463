"""The hot path shared by every client: body bytes (already stamped) -> facts.

A transport calls :meth:`StreamState.feed` with each read and the
``perf_counter_ns()`` stamp it took the moment the read arrived; SSE decoding, JSON
parsing (orjson) and chunk classification all happen after the stamp, so parsing cost
never lands in a timestamp. Every event of one read shares that read's stamp (they
arrived together). Failures inside the stream (bad framing, bad JSON, an in-band error
object) are recorded, never raised: feed() returns True when the stream is finished.
"""

from __future__ import annotations

import json
import re
from array import array
from collections.abc import Callable
from typing import Any, Final

import orjson

from tokrate.client.chunks import (
    ChunkError,
    ChunkFacts,
    classify_chunk,
    clean_model,
    plain_answer,
)
from tokrate.client.events_anthropic import classify_anthropic_event
from tokrate.client.events_common import in_band_error_class, merge_usage
from tokrate.client.events_responses import classify_responses_event
from tokrate.client.failures import (
    encoded_stream_message,
    http_error_message,
    is_context_overflow,
    is_usage_rejection,
    snippet,
    status_class,
)
from tokrate.client.fallbacks import is_max_tokens_rejection
from tokrate.client.result import StreamResult
from tokrate.client.sse import SSEDecoder, SSEProtocolError
from tokrate.runfolder.records import MAX_ANSWER_CHARS, MAX_TOOL_CALLS

__all__ = [
    "ERROR_BODY_LIMIT",
    "MAX_TOOL_ARGUMENT_CHARS",
    "MAX_TOOL_NAME_CHARS",
    "MAX_RESPONSE_BYTES",
    "MAX_RESPONSE_CHUNKS",
    "MAX_TOKENS_NOTE",
    "REJECTED_NOTE",
    "ResponseLimitExceeded",
    "StreamState",
    "needs_error_body",
]

_DONE = b"[DONE]"
#: Answer text whose JSON is itself between two quotes: printable ASCII but for the
#: quote and the backslash (the per-token path recognises chunks by it).
_PLAIN_TEXT: Final = re.compile(rb"[ !#-\[\]-~]+")
#: Chunks a stream may try to learn its plain answer shape from (a server whose
#: chunks all differ around the text, a changing ``created``, learns none).
_TEMPLATE_TRIES: Final = 3
#: Note on a result whose server rejected ``max_tokens`` (triggers the one resend with
#: ``max_completion_tokens``).
MAX_TOKENS_NOTE: Final = "server rejected max_tokens"


def _classify_chat(obj: object, event_name: str | None = None) -> ChunkFacts:
    return classify_chunk(obj)


def _chat_error_class(obj: object, code: int | None) -> str:
    """The class of a chat ``{"error": ...}`` chunk: its HTTP-like ``code``, else its
    code/type words as for the typed protocols (``server_error`` is ``http_5xx`` in
    every protocol), else ``protocol``."""
    if code is not None and code >= 400:
        return status_class(code)
    err = obj.get("error") if isinstance(obj, dict) else None
    if isinstance(err, dict):
        return in_band_error_class(err.get("code"), err.get("type"))
    return "protocol"


#: The event classifier of each protocol (chat and completions share one).
_CLASSIFIERS: Final[dict[str, Callable[[object, str | None], ChunkFacts]]] = {
    "chat": _classify_chat,
    "completions": _classify_chat,
    "responses": classify_responses_event,
    "anthropic": classify_anthropic_event,
}
#: Bytes of a non-2xx (or non-stream 200) body kept for the error message.
ERROR_BODY_LIMIT = 8192
#: Note on a result whose server rejected ``stream_options`` (triggers the one retry).
REJECTED_NOTE = "server rejected stream_options"
#: Defaults of ``[client] max_response_chunks`` / ``max_response_bytes``: well past any
#: real answer (a request naming N max tokens is also held to 4 x N + 256 chunks), low
#: enough that one endless stream cannot exhaust memory: each chunk keeps an 8-byte stamp
#: here while the stream runs (1.6 MB at the cap), a float offset in its record after.
MAX_RESPONSE_CHUNKS = 200_000
MAX_RESPONSE_BYTES = 256 * 1024 * 1024


#: Characters of a call's name and of its arguments text kept (with MAX_TOOL_CALLS,
#: the record's bound): well past any real call (a record keeps an answer's text to the
#: same bound).
MAX_TOOL_NAME_CHARS: Final = 256
MAX_TOOL_ARGUMENT_CHARS: Final = MAX_ANSWER_CHARS


def lenient_json(payload: bytes | str) -> Any:
    """``payload`` parsed as the openai SDK parses it (the standard library's JSON: it
    takes ``NaN`` and ``Infinity``), None when even that fails. Only for data orjson
    refused, so every client judges such a chunk alike (usage: tokrate.client.chunks)."""
    try:
        return json.loads(payload)
    except (ValueError, RecursionError):
        return None


class ResponseLimitExceeded(Exception):
    """Raised by a transport that counts bytes outside :meth:`StreamState.feed` (the
    SDK path) to stop the read; the failure is already recorded on the state."""


def needs_error_body(status: int, content_type: str) -> bool:
    """True when the response is not an event stream: a non-2xx status, or a 200 that
    is an HTML page or a JSON document (read its body for the error message)."""
    ctype = content_type.lower()
    return status >= 300 or "text/html" in ctype or "application/json" in ctype


class StreamState:
    """Mutable per-request accumulator; :meth:`result` freezes it into a StreamResult.

    ``chunk_ns`` gets one stamp per content-bearing chunk. ``end_ns`` is set at [DONE]
    (or the typed protocols' terminal event), at a failure, or by :meth:`finish`
    (connection end). ``api`` picks the event classifier; usage of the typed
    protocols arrives in parts and is merged.
    """

    __slots__ = (  # noqa: RUF023 - appended fields stay at the end
        "answer_chunks",
        "answer_parts",
        "bytes_received",
        "chunk_ns",
        "chunks_seen",
        "connect_ns",
        "decoder",
        "done",
        "end_ns",
        "error_class",
        "error_message",
        "finish_reason",
        "finished",
        "first_answer_ns",
        "first_byte_ns",
        "http_status",
        "max_bytes",
        "max_chunks",
        "notes",
        "reasoning_chunks",
        "response_id",
        "response_model",
        "retry_after_s",
        "server_timings",
        "server_timings_source",
        "tool_chunks",
        "usage",
        # Appended (merge-friendly): the protocol and its classifier.
        "api",
        "classify",
        "fast_chat",
        "chunk_limit_source",
        "last_line_ns",
        # Tool calls of the answer (None until the first), and the first delta's stamp.
        "tool_calls",
        "first_tool_ns",
        "tool_calls_cut",
        # The learnt shape of a plain answer chunk (see _learn_plain), and tries left.
        "plain_template",
        "template_tries",
        # The one-event read of that shape, while the decoder holds nothing (see feed).
        "plain_read",
    )

    def __init__(
        self,
        *,
        max_chunks: int = MAX_RESPONSE_CHUNKS,
        max_bytes: int = MAX_RESPONSE_BYTES,
        keep_text: bool = False,
        api: str = "chat",
        chunk_limit_source: str = "[client] max_response_chunks",
    ) -> None:
        self.api = api
        self.chunk_limit_source = chunk_limit_source
        #: When the last read that ended a line came (an event, a comment, a keep-alive):
        #: the fast client measures idle gaps from it, so a server that drips bytes and
        #: never finishes a line is idle however often a byte arrives.
        self.last_line_ns: int | None = None
        self.classify = _CLASSIFIERS.get(api, _classify_chat)
        #: Chat or completions: plain answer chunks take feed()'s shortcut.
        self.fast_chat = self.classify is _classify_chat
        self.decoder = SSEDecoder()
        #: The answer's text pieces, kept only when asked (multi-turn sessions send the
        #: real answer back); None otherwise, so ordinary requests pay nothing.
        self.answer_parts: list[str] | None = [] if keep_text else None
        self.max_chunks = max_chunks
        self.max_bytes = max_bytes
        #: Every parsed chunk, content-bearing or not (an endless stream of empty
        #: deltas must hit the limit too).
        self.chunks_seen = 0
        # 8 bytes a stamp (a list of ints is ~36): per-stream memory at the chunk cap.
        self.chunk_ns: array[int] = array("q")
        self.first_byte_ns: int | None = None
        self.first_answer_ns: int | None = None
        self.end_ns: int | None = None
        self.answer_chunks = 0
        self.reasoning_chunks = 0
        self.tool_chunks = 0
        self.usage: dict[str, int] | None = None
        self.finish_reason: str | None = None
        self.response_id: str | None = None
        self.done = False
        self.finished = False
        self.http_status: int | None = None
        self.error_class: str | None = None
        self.error_message: str | None = None
        self.bytes_received = 0
        self.notes: list[str] = []
        self.retry_after_s: float | None = None
        #: Set-up of the connection this request opened (ns), 0 when it reused one,
        #: None while unknown; the transport sets it.
        self.connect_ns: int | None = None
        #: The first ``model`` a chunk carried, and the last timing object sent.
        self.response_model: str | None = None
        self.server_timings: dict[str, Any] | None = None
        self.server_timings_source: str | None = None
        #: The answer's tool calls by their protocol key, in order of appearance:
        #: ``[name or None, argument pieces, characters kept]``; None until a tool-call
        #: chunk comes, so ordinary streams pay nothing.
        self.tool_calls: dict[int, list[Any]] | None = None
        #: When the first content-bearing tool-call delta arrived.
        self.first_tool_ns: int | None = None
        #: True when the calls kept are not all the answer made: a call past
        #: MAX_TOOL_CALLS, or arguments past MAX_TOOL_ARGUMENT_CHARS (a check must not
        #: judge what was cut off).
        self.tool_calls_cut = False
        #: ``(prefix, suffix, len(prefix), len(suffix))`` of this stream's plain answer
        #: chunks once learnt (:meth:`_learn_plain`); None until then.
        self.plain_template: tuple[bytes, bytes, int, int] | None = None
        self.template_tries = 0
        #: ``(head, tail, start, after, longest)`` of a read that is exactly one such
        #: chunk's event (``data: `` + prefix, suffix + blank line, the text's place, the
        #: decoder's line and event limits): set after a read that left the decoder
        #: holding nothing once the shape is learnt, so feed() takes it without the
        #: decoder. None otherwise.
        self.plain_read: tuple[bytes, bytes, int, int, int] | None = None

    def fail(self, error_class: str, message: str, now_ns: int) -> None:
        """Record the first failure (later ones are consequences) and finish."""
        if self.error_class is None and not self.finished:
            self.error_class = error_class
            self.error_message = message
        if self.end_ns is None:
            self.end_ns = now_ns
        self.finished = True

    def fail_http(
        self,
        status: int,
        reason: str,
        content_type: str,
        body: bytes,
        now: int,
        retry_after: str | None = None,
        location: str | None = None,
    ) -> None:
        """Record a response that is not an event stream (see :func:`needs_error_body`):
        ``http_4xx``/``http_429``/``http_5xx`` by status, or ``protocol`` for a 200 page
        or a redirect (which names its ``location``). Notes :data:`REJECTED_NOTE` when
        a 400 names stream_options."""
        self.http_status = status
        self.bytes_received += len(body)
        if retry_after is not None:
            self.retry_after_s = parse_retry_after(retry_after)
        if status >= 300:
            cls = "context_length" if is_context_overflow(status, body) else status_class(status)
            self.fail(cls, http_error_message(status, reason, body, location), now)
        else:
            text = http_error_message(status, reason, body).split(": ", 1)[1]
            self.fail(
                "protocol", f"expected text/event-stream, got {content_type or '?'}: {text}", now
            )
        if is_usage_rejection(status, body):
            self.notes.append(REJECTED_NOTE)
        if is_max_tokens_rejection(status, body):
            self.notes.append(MAX_TOKENS_NOTE)

    def refuse_encoding(self, encoding: str | None, now_ns: int) -> bool:
        """Fail a stream that came with a Content-Encoding (``protocol``, naming it:
        :func:`tokrate.client.failures.encoded_stream_message`); True when it did."""
        message = encoded_stream_message(encoding) if encoding else None
        if message is None:
            return False
        self.fail("protocol", message, now_ns)
        return True

    def finish(self, now_ns: int) -> None:
        """The body ended (message complete or connection end) at ``now_ns``.

        A stream without [DONE] is still ok when a finish_reason came; without either
        it is ``truncated``.
        """
        if self.finished:
            return
        self.finished = True
        if self.end_ns is None:
            self.end_ns = now_ns
        if not self.done and self.finish_reason is None and self.error_class is None:
            self.error_class = "truncated"
            self.error_message = (
                f"stream ended before [DONE] or a finish_reason "
                f"after {len(self.chunk_ns)} content chunks"
            )

    def count_bytes(self, n: int, now_ns: int) -> bool:
        """Add ``n`` body bytes read at ``now_ns``; True (the stream failed as
        ``response_limit``) once the total passes ``max_bytes``."""
        self.bytes_received += n
        if self.first_byte_ns is None:
            self.first_byte_ns = now_ns
        if self.bytes_received > self.max_bytes:
            self.fail(
                "response_limit",
                f"response exceeded {self.max_bytes} bytes ([client] max_response_bytes)",
                now_ns,
            )
            return True
        return False

    def feed(self, data: bytes, now_ns: int) -> bool:
        """Consume one read stamped ``now_ns``; True once the stream is finished.

        The per-token read, one plain answer chunk's whole event of the learnt shape
        with nothing held in the decoder (``plain_read``), is counted here at once:
        what the decoder and :meth:`_feed_payloads` record for it (its bytes, its line,
        one answer chunk and its stamp), the caps checked as they check them."""
        lane = self.plain_read
        if lane is not None:
            head, tail, start, after, longest = lane
            n = len(data)
            if (
                n <= longest
                and data.startswith(head)
                and data.endswith(tail)
                and _PLAIN_TEXT.fullmatch(data, start, n - after) is not None
                and not self.finished
                and self.chunks_seen < self.max_chunks
                and self.bytes_received + n <= self.max_bytes
            ):
                self.bytes_received += n
                self.last_line_ns = now_ns
                self.chunks_seen += 1
                self.answer_chunks += 1
                self.chunk_ns.append(now_ns)
                if self.answer_parts is not None:
                    self.answer_parts.append(data[start : n - after].decode("ascii"))
                return False
        finished = self._feed_read(data, now_ns)
        template = self.plain_template
        if template is not None and not finished:
            if not self.decoder.holds_nothing():
                self.plain_read = None
            elif lane is None:
                prefix, suffix, start, after = template
                self.plain_read = (
                    b"data: " + prefix,
                    suffix + b"\n\n",
                    start + 6,
                    after + 2,
                    self.decoder.longest_read,
                )
        return finished

    def _feed_read(self, data: bytes, now_ns: int) -> bool:
        """:meth:`feed` of any read: through the decoder."""
        if self.finished:
            return True
        # count_bytes, inline (once per read).
        self.bytes_received += len(data)
        if self.first_byte_ns is None:
            self.first_byte_ns = now_ns
        if self.bytes_received > self.max_bytes:
            self.count_bytes(0, now_ns)  # records the response_limit failure
            return True
        if 10 in data or 13 in data:  # one memchr each
            self.last_line_ns = now_ns
        payloads = self.decoder.data_payloads(data)
        if payloads is not None:
            return self._feed_payloads(payloads, now_ns)
        try:
            events = self.decoder.decode(data)
        except SSEProtocolError as exc:
            self.fail("protocol", str(exc), now_ns)
            return True
        for payload, name in events:
            if name is None:
                if self._feed_payloads([payload], now_ns):
                    return True
            elif self._feed_payload(payload, now_ns, name):
                return True
        return False

    def _feed_payloads(self, payloads: list[bytes], now_ns: int) -> bool:
        """The ``data`` of unnamed events read together at ``now_ns`` (the per-token
        path); True once the stream is finished."""
        template = self.plain_template
        if template is None:
            for i, payload in enumerate(payloads):
                if self._feed_payload(payload, now_ns, None):
                    return True
                if self.plain_template is not None:
                    return self._feed_payloads(payloads[i + 1 :], now_ns)
            return False
        # A plain answer chunk of the shape learnt (see _learn_plain): no JSON parse.
        # Counted locally and added before any other chunk is fed (its stamp is the
        # same: every event of a read shares it), so the chunk cap is checked as ever.
        prefix, suffix, start, after = template
        plain = _PLAIN_TEXT.fullmatch
        parts = self.answer_parts
        room = self.max_chunks - self.chunks_seen
        counted = 0
        for payload in payloads:
            if (
                counted < room
                and payload.startswith(prefix)
                and payload.endswith(suffix)
                and plain(payload, start, len(payload) - after) is not None
            ):
                counted += 1
                if parts is not None:
                    parts.append(payload[start : len(payload) - after].decode("ascii"))
                continue
            self._count_plain(counted, now_ns)
            counted = 0
            if self._feed_payload(payload, now_ns, None):
                return True
            room = self.max_chunks - self.chunks_seen
        self._count_plain(counted, now_ns)
        return False

    def _count_plain(self, count: int, now_ns: int) -> None:
        """``count`` plain answer chunks read at ``now_ns`` (what _feed_payload records
        for each, the first answer's stamp being set already)."""
        if count:
            self.chunks_seen += count
            self.answer_chunks += count
            self.chunk_ns.fromlist([now_ns] * count)

    def _feed_payload(self, payload: bytes, now_ns: int, name: str | None) -> bool:
        """One event's ``data`` (``name``: its SSE ``event:``) read at ``now_ns``; True
        once the stream is finished."""
        if payload == _DONE:
            self.done = True
            self.end_ns = now_ns
            self.finished = True
            return True
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            # NaN, Infinity: parsed as the openai SDK parses them, so every
            # client judges them by the one usage rule (tokrate.client.chunks).
            obj = lenient_json(payload)
            if obj is None:
                self.fail("protocol", f"data is not JSON: {snippet(payload, 80)}", now_ns)
                return True
        if (
            self.fast_chat
            and self.chunks_seen < self.max_chunks
            and self.response_model is not None
            and self.response_id
        ):
            content = plain_answer(obj)
            if content is not None:
                # What feed_chunk does with such a chunk once the response's id and
                # model are known (the first chunks take the full path).
                self.chunks_seen += 1
                self.chunk_ns.append(now_ns)
                if self.answer_parts is not None:
                    self.answer_parts.append(content if isinstance(content, str) else "")
                if self.first_answer_ns is None:
                    self.first_answer_ns = now_ns
                self.answer_chunks += 1
                if self.plain_template is None and self.template_tries < _TEMPLATE_TRIES:
                    self._learn_plain(payload, content)
                return False
        return self.feed_chunk(obj, now_ns, name)

    def _learn_plain(self, payload: bytes, content: object) -> None:
        """Learn the bytes around a plain answer chunk's text, so the next chunks of the
        same shape are recognised without parsing them.

        Sound by construction: the text is plain printable ASCII (no quote, backslash
        or control character: its JSON is the text between two quotes, one way only)
        and found exactly once in the payload; a probe with another text in its place
        must parse to a plain answer chunk of that text (so the place is the answer's,
        the last of any duplicate keys). Then for every such text put in its place the
        bytes are valid JSON that plain_answer finds to be a plain answer of exactly
        that text, which is all the per-token path records."""
        self.template_tries += 1
        if not isinstance(content, str) or not content.isascii():
            return
        text = content.encode("ascii")
        if _PLAIN_TEXT.fullmatch(text) is None:
            return
        quoted = b'"' + text + b'"'
        at = payload.find(quoted)
        if at < 0 or payload.find(quoted, at + 1) >= 0:
            return
        prefix, suffix = payload[: at + 1], payload[at + 1 + len(text) :]
        probe = "Q" if content != "Q" else "R"
        try:
            if plain_answer(orjson.loads(prefix + probe.encode() + suffix)) != probe:
                return
        except orjson.JSONDecodeError:
            return
        self.plain_template = (prefix, suffix, len(prefix), len(suffix))

    def feed_chunk(self, obj: object, now_ns: int, event_name: str | None = None) -> bool:
        """Consume one parsed chunk (``event_name``: its SSE ``event:``) that arrived at
        ``now_ns``; True when it ended the stream (the typed protocols' terminal event,
        an in-band error, a malformed chunk or one past ``max_chunks``, all
        recorded)."""
        self.chunks_seen += 1
        if self.chunks_seen > self.max_chunks:
            self.fail(
                "response_limit",
                f"response exceeded {self.max_chunks} chunks ({self.chunk_limit_source})",
                now_ns,
            )
            return True
        try:
            facts = self.classify(obj, event_name)
        except ChunkError as exc:
            self.fail("protocol", str(exc), now_ns)
            return True
        if facts.error is not None:
            self._fail_in_band(facts, obj, now_ns)
            return True
        if facts.tool_parts is not None:
            self._keep_tool_parts(facts.tool_parts)
        if facts.answer or facts.reasoning or facts.tool_call:
            self.chunk_ns.append(now_ns)
            if facts.tool_call and self.first_tool_ns is None:
                self.first_tool_ns = now_ns
            if facts.answer and self.answer_parts is not None:
                self.answer_parts.append(_answer_text(obj))
            if facts.answer or facts.tool_call:
                if self.first_answer_ns is None:
                    self.first_answer_ns = now_ns
                if facts.answer:
                    self.answer_chunks += 1
                else:
                    self.tool_chunks += 1
            if facts.reasoning:
                self.reasoning_chunks += 1
        if facts.finish_reason is not None:
            self.finish_reason = facts.finish_reason
        if facts.usage is not None:
            self.usage = merge_usage(self.usage, facts.usage)
        self._note_response(facts, obj)
        if facts.end_of_stream:
            self.done = True
            self.end_ns = now_ns
            self.finished = True
            return True
        return False

    def _keep_tool_parts(self, parts: list[tuple[int, str | None, str]]) -> None:
        """Add a chunk's tool-call pieces to their calls: the first name a call gets,
        its arguments text up to MAX_TOOL_ARGUMENT_CHARS; at most MAX_TOOL_CALLS calls
        (a stream of endless new calls cannot grow memory without bound)."""
        calls = self.tool_calls
        if calls is None:
            calls = self.tool_calls = {}
        for key, name, text in parts:
            call = calls.get(key)
            if call is None:
                if len(calls) >= MAX_TOOL_CALLS:
                    self.tool_calls_cut = True
                    continue
                call = calls[key] = [None, [], 0]
            if name is not None and call[0] is None:
                call[0] = name[:MAX_TOOL_NAME_CHARS]
            if text:
                piece = text[: MAX_TOOL_ARGUMENT_CHARS - call[2]]
                if len(piece) < len(text):
                    self.tool_calls_cut = True
                if piece:
                    call[1].append(piece)
                    call[2] += len(piece)

    def kept_tool_calls(self) -> tuple[tuple[str, str], ...]:
        """``(name, arguments text)`` of each tool call, in the order they appeared
        ("" for a name that never came)."""
        if not self.tool_calls:
            return ()
        return tuple((c[0] or "", "".join(c[1])) for c in self.tool_calls.values())

    def _fail_in_band(self, facts: ChunkFacts, obj: object, now_ns: int) -> None:
        """An error chunk or event inside a 200 stream: classed by its code/type words
        (a context overflow by its wording), with any usage it carried kept."""
        assert facts.error is not None
        if facts.usage is not None:
            self.usage = merge_usage(self.usage, facts.usage)
        cls = facts.error_class or _chat_error_class(obj, facts.error_code)
        if is_context_overflow(facts.error_code or 400, facts.error, kind=facts.error_kind):
            cls = "context_length"
        self.fail(cls, f"error in stream: {facts.error}", now_ns)

    def _note_response(self, facts: ChunkFacts, obj: object) -> None:
        """What identifies the response: its id and model (first seen), the server's
        timing object (last seen)."""
        if self.response_id is None and facts.response_id is not None:
            self.response_id = facts.response_id
        if self.response_model is None:
            model = facts.model or (obj.get("model") if isinstance(obj, dict) else None)
            if isinstance(model, str):
                self.response_model = clean_model(model)
        if facts.timings is not None:
            self.server_timings = facts.timings
            self.server_timings_source = facts.timings_source

    def result(
        self,
        *,
        client: str,
        api: str,
        endpoint: str,
        model: str,
        t0_ns: int,
        started_at: float,
        usage_rejected: bool = False,
        attempt: int = 1,
        stamp_source: str = "user",
        t0_source: str = "user",
    ) -> StreamResult:
        """Freeze into a StreamResult (call after finish() or fail()).

        ``t0_ns`` is never after the response's first stamp: a user stamp taken after
        the write can come later than the kernel's stamp of a quick answer when the
        process waited for a CPU in between (``started_at`` moves with it)."""
        earliest = min(
            (ns for ns in (self.first_byte_ns, self.end_ns) if ns is not None),
            default=t0_ns,
        )
        if self.chunk_ns:
            earliest = min(earliest, self.chunk_ns[0])
        if earliest < t0_ns:
            started_at -= (t0_ns - earliest) / 1e9
            t0_ns = earliest
        return StreamResult(
            client=client,
            api=api,
            endpoint=endpoint,
            model=model,
            t0_ns=t0_ns,
            started_at=started_at,
            first_byte_ns=self.first_byte_ns,
            chunk_ns=array("q", self.chunk_ns),  # a copy: the state may still grow
            first_answer_ns=self.first_answer_ns,
            end_ns=self.end_ns,
            answer_chunks=self.answer_chunks,
            reasoning_chunks=self.reasoning_chunks,
            tool_chunks=self.tool_chunks,
            # Usage without the output count (a typed stream cut after its first part)
            # says nothing about the output: the chunks count then.
            usage=self.usage if self.usage and "completion_tokens" in self.usage else None,
            finish_reason=self.finish_reason,
            response_id=self.response_id,
            done=self.done,
            http_status=self.http_status,
            error_class=self.error_class,
            error_message=self.error_message,
            bytes_received=self.bytes_received,
            usage_rejected=usage_rejected,
            attempt=attempt,
            notes=tuple(self.notes),
            retry_after_s=self.retry_after_s,
            connect_ns=self.connect_ns,
            answer_text=None if self.answer_parts is None else "".join(self.answer_parts),
            response_model=self.response_model,
            server_timings=self.server_timings,
            server_timings_source=self.server_timings_source,
            stamp_source=stamp_source,
            tool_calls=self.kept_tool_calls(),
            tool_calls_cut=self.tool_calls_cut,
            first_tool_ns=self.first_tool_ns,
            t0_source=t0_source,
        )


def _answer_text(obj: object) -> str:
    """The answer text of an already classified answer chunk: chat ``delta.content``
    or completions ``text`` of every choice, a Responses ``response.output_text.delta``
    event's ``delta``, an Anthropic ``content_block_delta``'s ``text_delta`` text."""
    if not isinstance(obj, dict):
        return ""
    kind = obj.get("type")
    if kind == "response.output_text.delta":
        delta = obj.get("delta")
        return delta if isinstance(delta, str) else ""
    if kind == "content_block_delta":
        block = obj.get("delta")
        text = block.get("text") if isinstance(block, dict) else None
        return text if isinstance(text, str) else ""
    choices = obj.get("choices")
    parts = []
    for choice in choices if isinstance(choices, list) else ():
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
        if isinstance(text, str):
            parts.append(text)
    return "".join(parts)


def parse_retry_after(value: str) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delta-seconds or an HTTP-date
    (RFC 9110 10.2.3); None when it is neither (the header is advisory)."""
    import email.utils
    import math
    import time

    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - time.time()
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)
