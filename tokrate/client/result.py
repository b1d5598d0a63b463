"""Raw facts of one streamed request, and the one place records are derived from them.

:class:`StreamResult` holds only what was observed (``perf_counter_ns`` stamps, counts,
the server's usage, the failure if any). :func:`build_record` turns it into a
:class:`~tokrate.runfolder.records.RequestRecord`, computing every derived field exactly as
docs/run-folder.md and docs/definitions.md define it:

- ``ttft_s`` = first content-bearing chunk arrival - t0
- ``first_answer_s`` = first answer (non-reasoning) chunk arrival - t0
- ``first_byte_s`` = first response body byte - t0
- ``e2e_s`` = [DONE] (or connection end, or the moment of failure) - t0
- ``output_tokens`` = usage.completion_tokens when sent (``tokens_source="usage"``),
  else the number of content-bearing chunks (``"chunks"``)
- ``tpot_s`` = (e2e - ttft) / (output_tokens - 1) for ok records with >= 2 tokens
- ``chunk_offsets_s`` = every content-bearing chunk arrival - t0 (ITL = diffs)
- ``connect_s`` = the request's connection set-up (ns / 1e9): 0.0 reused, None unknown
- ``response_model`` = the first ``model`` a chunk carried, raw (None: none did)
- ``cached_tokens`` = usage.prompt_tokens_details.cached_tokens, else the server
  timings' ``cache_n`` (llama.cpp), else None
- ``cached_tokens_source`` = the response field that count came from
- ``cache_write_tokens`` = usage's cache writes (Anthropic ``cache_creation_input_tokens``)
- ``request_id`` = the id the request was sent with (RecordContext)
- ``server_timings`` = the last timing object the server sent (llama.cpp ``timings``,
  vLLM ``metrics``, NIM ``stats``), ``server_timings_source`` the key it came under
- ``stamp_source`` = "kernel" | "user": where the stamps of the response came from
- ``media_parts`` / ``media_bytes`` = the prompt's image, sound and file parts and the
  bytes they add to the request body (RecordContext)
- ``tool_calls`` = the answer's tool calls (index in order of appearance, name,
  arguments text), None when it called none; ``first_tool_call_s`` = first
  content-bearing tool-call delta - t0; ``tool_call_tokens`` (:func:`tool_call_tokens`)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from tokrate.runfolder.records import TOOL_CALLS_CUT, RequestRecord

if TYPE_CHECKING:
    from tokrate.inputs.tokencount import TokenCounter

__all__ = [
    "NS_PER_S",
    "RecordContext",
    "StreamResult",
    "build_record",
    "cached_prompt_tokens",
    "cached_tokens_source",
    "tool_call_tokens",
]

NS_PER_S: Final = 1_000_000_000


@dataclass(frozen=True, slots=True)
class StreamResult:
    """What one request did, as raw facts. Stamps are ``time.perf_counter_ns()``
    readings (None when the moment never came); ``started_at`` is Unix seconds at t0.
    ``t0_ns`` is when the request's last byte left (``t0_source``: "kernel", the
    kernel's transmit stamp; "user", the moment the write returned, or for a request
    never written the moment before its connection was taken).

    ``error_class`` is None for a stream that ended with [DONE] or a finish_reason;
    otherwise one of :data:`tokrate.runfolder.records.ERROR_CLASSES` with a one-line
    ``error_message`` (never containing the API key). ``usage_rejected`` is True when a
    400 naming stream_options made the client retry once without it (``attempt`` 2).
    ``chunk_ns`` has one stamp per content-bearing chunk, non-decreasing.
    """

    client: str
    api: str
    endpoint: str
    model: str
    t0_ns: int
    started_at: float
    first_byte_ns: int | None = None
    #: A tuple, or the client's compact ``array("q")`` (8 bytes a stamp).
    chunk_ns: Sequence[int] = ()
    first_answer_ns: int | None = None
    end_ns: int | None = None
    answer_chunks: int = 0
    reasoning_chunks: int = 0
    tool_chunks: int = 0
    usage: dict[str, int] | None = None
    finish_reason: str | None = None
    response_id: str | None = None
    done: bool = False
    http_status: int | None = None
    error_class: str | None = None
    error_message: str | None = None
    bytes_received: int = 0
    usage_rejected: bool = False
    attempt: int = 1
    notes: tuple[str, ...] = ()
    #: Seconds from a 429/503 ``Retry-After`` header (None when absent or unparsable).
    retry_after_s: float | None = None
    #: DNS + TCP (+ TLS) set-up of the connection this request opened, in ns (inside
    #: the TTFT: t0 comes first); 0 when it reused a kept-alive connection; None when
    #: unknown or when no connection came up.
    connect_ns: int | None = None
    #: The answer's text, kept only for requests that asked (``PreparedRequest.keep_text``:
    #: session turns); None otherwise.
    answer_text: str | None = None
    #: The first ``model`` a chunk carried (raw; None when no chunk did).
    response_model: str | None = None
    #: The server's own timing object (llama.cpp ``timings``), numbers only.
    server_timings: dict[str, Any] | None = None
    #: The response key the timing object came from: "timings" (llama.cpp),
    #: "metrics" (vLLM), "stats" (NVIDIA NIM).
    server_timings_source: str | None = None
    #: "kernel" when every read of the response carried the kernel's receive stamp
    #: (the fast client with kernel stamps), else "user".
    stamp_source: str = "user"
    #: ``(name, arguments text)`` of each tool call of the answer, in order (bounded:
    #: :data:`tokrate.runfolder.records.MAX_TOOL_CALLS`).
    tool_calls: tuple[tuple[str, str], ...] = ()
    #: True when ``tool_calls`` is not all the answer called (bounds reached).
    tool_calls_cut: bool = False
    #: When the first content-bearing tool-call delta arrived.
    first_tool_ns: int | None = None
    #: "kernel" when t0 is the kernel's transmit stamp of the request's last byte.
    t0_source: str = "user"

    @property
    def content_chunks(self) -> int:
        """Content-bearing chunks (answer, reasoning or tool-call delta)."""
        return len(self.chunk_ns)

    @property
    def ok(self) -> bool:
        return self.error_class is None


def _offset(ns: int | None, t0: int) -> float | None:
    return None if ns is None else (ns - t0) / NS_PER_S


@dataclass(frozen=True, slots=True)
class RecordContext:
    """What the engine knows of a request that the stream does not: which run,
    scenario, prompt and planned request it was, its schedule (open loop), whether it
    was warm-up, where it ran, the load level, the engine's attempt number (a
    client-internal resend without stream_options is the same attempt) and an input
    token estimate used only when the server sent no usage; for a session turn, the
    session and turn."""

    run_id: str
    scenario: str
    prompt_id: str
    task: str
    request_index: int
    scheduled_s: float | None = None
    send_delay_s: float | None = None
    warmup: bool = False
    worker: str = "local"
    node_id: str = ""
    concurrency: int | None = None
    rate_rps: float | None = None
    attempt: int | None = None
    input_tokens: int | None = None
    #: Multi-turn sessions: the session this request belongs to and its turn (1-based).
    session_id: str | None = None
    turn: int | None = None
    #: The model's tokenizer (``[[model]] tokenizer``): without usage, the answer's
    #: text is counted with it (``tokens_source = "tokenizer"``) instead of its chunks.
    token_counter: TokenCounter | None = None
    #: The id the request was sent with (``[client] request_id_header``).
    request_id: str | None = None
    #: When the request was due (perf_counter ns): its schedule (open loop), the moment
    #: its stream's slot freed (closed loop); None where nothing says (a bare client).
    due_ns: int | None = None
    #: How late the measuring event loop was at the first content read (ms; the
    #: worker's lag monitor), None where nothing measured it.
    loop_lag_ms: float | None = None
    #: The prompt's image, sound and file parts, and the bytes they add to the body.
    media_parts: int | None = None
    media_bytes: int | None = None


#: Where each protocol's usage reports cached prompt tokens (record
#: ``cached_tokens_source``).
_CACHED_FIELD: Final = {
    "chat": "prompt_tokens_details.cached_tokens",
    "completions": "prompt_tokens_details.cached_tokens",
    "responses": "input_tokens_details.cached_tokens",
    "anthropic": "cache_read_input_tokens",
}


def cached_tokens_source(
    api: str, usage: dict[str, int] | None, timings: dict[str, Any] | None
) -> str | None:
    """The response field :func:`cached_prompt_tokens` read (None: none reported)."""
    if usage is not None and "cached_tokens" in usage:
        return _CACHED_FIELD.get(api, "usage")
    if cached_prompt_tokens(None, timings) is not None:
        return "timings.cache_n"
    return None


def cached_prompt_tokens(
    usage: dict[str, int] | None, timings: dict[str, Any] | None
) -> int | None:
    """Prompt tokens the server served from its cache: usage's count, else llama.cpp's
    ``timings.cache_n`` (a non-negative whole number), else None."""
    if usage is not None and "cached_tokens" in usage:
        return usage["cached_tokens"]
    cache_n = (timings or {}).get("cache_n")
    if cache_n is not None and cache_n >= 0 and float(cache_n).is_integer():
        return int(cache_n)
    return None


def tool_call_tokens(result: StreamResult, counter: TokenCounter | None = None) -> int | None:
    """Output tokens of the answer's tool calls (None without calls): the usage's
    output count when nothing else was output (no answer text, and reasoning either
    absent or counted apart), else the model tokenizer's count of each call's name and
    arguments (``[[model]] tokenizer``), else the number of tool-call deltas."""
    if not result.tool_calls:
        return None
    usage = result.usage
    if usage is not None and result.answer_chunks == 0:
        reasoning = usage.get("reasoning_tokens")
        if reasoning is not None or not result.reasoning_chunks:
            return max(0, usage["completion_tokens"] - (reasoning or 0))
    if counter is not None:
        return sum(counter.count(name) + counter.count(args) for name, args in result.tool_calls)
    return result.tool_chunks


def build_record(result: StreamResult, context: RecordContext) -> RequestRecord:
    """The record of one request (see the module docstring for every formula).

    Raises:
        ValueError: from RequestRecord's invariants (a bug, never bad input).
    """
    c = context
    input_tokens = c.input_tokens
    t0 = result.t0_ns
    if result.error_class is None:
        status = "ok"
    elif result.error_class == "cancelled":
        status = "cancelled"
    else:
        status = "error"
    # A list comprehension, not a generator: half the cost per token.
    offsets = tuple([(ns - t0) / NS_PER_S for ns in result.chunk_ns])
    ttft = offsets[0] if offsets else None
    # The client's own queueing before the request left, and TTFT as the user who was
    # due an answer then sees it (coordinated omission stays visible beside TTFT).
    send_queue = None if c.due_ns is None else max(0, t0 - c.due_ns) / NS_PER_S
    ttft_from_due = None if send_queue is None or ttft is None else send_queue + ttft
    e2e = _offset(result.end_ns, t0)
    usage = result.usage
    if usage is not None:
        output_tokens: int | None = usage["completion_tokens"]
        source: str | None = "usage"
        reasoning = usage.get("reasoning_tokens")
        in_tokens = usage.get("prompt_tokens", input_tokens)
    elif (
        c.token_counter is not None
        and result.answer_text is not None
        and not (result.reasoning_chunks)
    ):
        # Reasoning text is not kept, so a reasoning answer stays a chunk count; the
        # tool calls' names and arguments are output too.
        output_tokens = c.token_counter.count(result.answer_text)
        output_tokens += tool_call_tokens(result, c.token_counter) or 0
        source = "tokenizer"
        reasoning = None
        in_tokens = input_tokens
    else:
        output_tokens = len(offsets)
        source = "chunks"
        reasoning = result.reasoning_chunks if result.reasoning_chunks else None
        in_tokens = input_tokens
    tpot = None
    if (
        status == "ok"
        and ttft is not None
        and e2e is not None
        and output_tokens is not None
        and output_tokens >= 2
    ):
        tpot = (e2e - ttft) / (output_tokens - 1)
    notes: dict[str, Any] = {}
    if result.usage_rejected:
        notes["usage_rejected"] = True
    if result.reasoning_chunks:
        notes["reasoning_chunks"] = result.reasoning_chunks
    if result.tool_chunks:
        notes["tool_chunks"] = result.tool_chunks
    if result.tool_calls_cut:
        notes[TOOL_CALLS_CUT] = True
    if result.notes:
        notes["notes"] = list(result.notes)
    if result.retry_after_s is not None:
        notes["retry_after_s"] = result.retry_after_s
    return RequestRecord(
        run_id=c.run_id,
        endpoint=result.endpoint,
        model=result.model,
        scenario=c.scenario,
        prompt_id=c.prompt_id,
        task=c.task,
        request_index=c.request_index,
        started_at=result.started_at,
        t0_ns=t0,
        status=status,  # type: ignore[arg-type]
        scheduled_s=c.scheduled_s,
        send_delay_s=c.send_delay_s,
        first_byte_s=_offset(result.first_byte_ns, t0),
        ttft_s=ttft,
        first_answer_s=_offset(result.first_answer_ns, t0),
        e2e_s=e2e,
        tpot_s=tpot,
        chunk_offsets_s=offsets,
        input_tokens=in_tokens,
        output_tokens=output_tokens,
        reasoning_tokens=reasoning,
        tokens_source=source,
        finish_reason=result.finish_reason,
        error_class=result.error_class,
        error_message=result.error_message,
        http_status=result.http_status,
        bytes_received=result.bytes_received,
        warmup=c.warmup,
        worker=c.worker,
        node_id=c.node_id,
        response_id=result.response_id,
        api=result.api,
        client=result.client,
        concurrency=c.concurrency,
        rate_rps=c.rate_rps,
        attempt=result.attempt if c.attempt is None else c.attempt,
        content_chunks=len(offsets),
        # A connection that never came up has no set-up time, whatever a transport saw.
        connect_s=None
        if result.connect_ns is None or result.error_class == "connect"
        else result.connect_ns / NS_PER_S,
        response_model=result.response_model,
        cached_tokens=cached_prompt_tokens(usage, result.server_timings),
        cached_tokens_source=cached_tokens_source(result.api, usage, result.server_timings),
        cache_write_tokens=None if usage is None else usage.get("cache_write_tokens"),
        request_id=c.request_id,
        server_timings=result.server_timings,
        server_timings_source=result.server_timings_source,
        extra=notes,
        session_id=c.session_id,
        turn=c.turn,
        stamp_source=result.stamp_source,
        media_parts=c.media_parts,
        media_bytes=c.media_bytes,
        tool_calls=tuple(
            {"index": i, "name": name, "arguments": args}
            for i, (name, args) in enumerate(result.tool_calls)
        )
        or None,
        first_tool_call_s=_offset(result.first_tool_ns, t0),
        tool_call_tokens=tool_call_tokens(result, c.token_counter),
        loop_lag_ms=c.loop_lag_ms,
        t0_source=result.t0_source,
        send_queue_s=send_queue,
        ttft_from_due_s=ttft_from_due,
    )
