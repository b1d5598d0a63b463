"""The request record: one immutable row of raw facts per request, and its schema.

Times are seconds (float64) measured on the worker's monotonic clock
(``time.perf_counter_ns``) relative to ``t0_ns``, when the request's last byte left the
client (``t0_source``: the kernel's transmit stamp, or the moment the write returned;
records before schema 10: a reading taken just before the request was sent, its
connection's set-up after it). ``started_at`` is the wall clock (Unix seconds) at t0, kept only for
timelines and for aligning workers on different machines; no latency is ever derived
from it. Unknown values are ``None``, never 0.

A records.jsonl line is :func:`tokrate.runfolder.jsondoc.to_json` of a record (its
fields in order, ``extra`` as an object of its own), read back by
:func:`record_from_json`: a key an older schema lacks is its field's default, a key a
newer tokrate wrote lands in ``extra``.

Schema history (bump RECORD_SCHEMA_VERSION and add a line for every change; readers
keep loading every version listed here):

    1: first version.
    2: ``connect_s`` (seconds of TCP (+TLS) set-up of a new connection, 0.0 on a
       reused one, None when unknown); v1 records load with connect_s None.
    3: ``response_model`` (the model name the response carried), ``cached_tokens``
       (prompt tokens the server served from its prompt cache), ``server_timings``
       (the server's own timing object, e.g. llama.cpp ``timings``), ``stamp_source``
       ("user": stamps taken in the event loop; "kernel": the socket's receive
       stamps), ``session_id`` / ``turn`` (multi-turn workloads); tokens_source
       "tokenizer" and error class "context_length" are new values. v1/v2 records load
       with these null ("user" for stamp_source).
    4: ``answer`` (the answer's text, at most MAX_ANSWER_CHARS characters, redacted;
       only for prompts with an ``expect``: docs/quality.md) and the check's verdict
       ``check_passed`` / ``check_score`` / ``check_error`` (null in records.jsonl;
       records.parquet has them after the checks ran). Older records load with all four
       null.
    5: ``request_id`` (the request id tokrate sent, ``X-Request-ID`` by default),
       ``cached_tokens_source`` (the response field ``cached_tokens`` was read from),
       ``cache_write_tokens`` (prompt tokens the server wrote to its cache: Anthropic
       ``cache_creation_input_tokens``). Older records load with these null.
    6: ``server_timings_source`` (the response key ``server_timings`` came under:
       "timings" llama.cpp, "metrics" vLLM, "stats" NVIDIA NIM); ``server_timings`` may
       hold objects one level down (vLLM ``speculative_decoding``). Older records load
       with it null (their timings are llama.cpp's).
    7: ``loop_lag_ms``: how far behind the measuring event loop was when the request's
       first content was read (ms, 0.0 on time; tokrate.load.worker.looplag ``lag_at``), null
       without content. A stream bunched while it was late is the client's doing
       (tokrate.analysis.buffering ``client_held``). Older records load with it null.
    8: ``media_parts`` (image, sound and file parts of the request's messages) and
       ``media_bytes`` (the bytes those parts add to the request body, as sent: base64
       text for inline data). Older records load with both null.
    9: ``tool_calls`` (the answer's tool calls: ``{"index", "name", "arguments"}`` each,
       arguments as the text the server streamed, at most MAX_ANSWER_CHARS; null when
       the answer called none; a JSON string in records.parquet), ``first_tool_call_s``
       (t0 -> the first tool-call delta) and ``tool_call_tokens`` (output tokens of the
       calls). Older records load with all three null.
    10: ``t0_source`` ("kernel": t0 is the kernel's transmit stamp of the request's last
       byte; "user": the moment the write returned), and t0 is now when the request
       left, after its connection's set-up (``connect_s`` is no longer inside TTFT);
       ``send_queue_s`` (t0 minus the moment the request was due: its schedule in open
       loop, its slot freeing in closed loop) and ``ttft_from_due_s`` (send_queue_s +
       ttft_s). Older records load with all three null.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Literal

from tokrate.runfolder.jsondoc import EXTRA_INSIDE, from_json

# The error classes are the vocabulary of a record's error_class and of the config's
# [client.retry] on: defined with the settings, which the record format sits above.
from tokrate.spec.types import ERROR_CLASSES

__all__ = [
    "ADDED_COLUMNS",
    "ADDED_DEFAULTS",
    "ANSWER_CUT",
    "MAX_ANSWER_CHARS",
    "MAX_TOOL_CALLS",
    "RECORD_COLUMN_TYPES",
    "RECORD_SCHEMA_HISTORY",
    "RECORD_SCHEMA_VERSION",
    "STAMP_SOURCES",
    "STATUSES",
    "TOKENS_SOURCES",
    "TOOL_CALLS_CUT",
    "RequestRecord",
    "record_from_json",
]

RECORD_SCHEMA_VERSION: Final = 10
RECORD_SCHEMA_HISTORY: Final[dict[int, str]] = {
    1: "first version",
    2: "connect_s: TCP (+TLS) set-up seconds of the request's connection (0.0 reused)",
    3: "response_model, cached_tokens, server_timings, stamp_source, session_id, turn",
    4: "answer (checked prompts only), check_passed, check_score, check_error",
    5: "request_id, cached_tokens_source, cache_write_tokens",
    6: "server_timings_source (timings, metrics, stats)",
    7: "loop_lag_ms: how late the measuring event loop was at the first content read",
    8: "media_parts, media_bytes: the request's image, sound and file parts",
    9: "tool_calls, first_tool_call_s, tool_call_tokens: the answer's tool calls",
    10: "t0_source (t0 when the request left), send_queue_s, ttft_from_due_s",
}
#: Most characters of an answer a record keeps for its check.
MAX_ANSWER_CHARS: Final = 8192
#: Most tool calls a record keeps of one answer.
MAX_TOOL_CALLS: Final = 64
#: ``extra`` keys saying a record kept less than the answer: its text past
#: MAX_ANSWER_CHARS (the value: the answer's length in characters), or its tool calls
#: past their bounds (True). A check does not judge what was cut off.
ANSWER_CUT: Final = "answer_chars"
TOOL_CALLS_CUT: Final = "tool_calls_cut"
#: Columns added after version 1, with the version that added them: a frame from an
#: older writer gets them as nulls (see :func:`upgrade_frame`).
ADDED_COLUMNS: Final[dict[str, int]] = {
    "connect_s": 2,
    "response_model": 3,
    "cached_tokens": 3,
    "server_timings": 3,
    "stamp_source": 3,
    "session_id": 3,
    "turn": 3,
    "answer": 4,
    "check_passed": 4,
    "check_score": 4,
    "check_error": 4,
    "request_id": 5,
    "cached_tokens_source": 5,
    "cache_write_tokens": 5,
    "server_timings_source": 6,
    "loop_lag_ms": 7,
    "media_parts": 8,
    "media_bytes": 8,
    "tool_calls": 9,
    "first_tool_call_s": 9,
    "tool_call_tokens": 9,
    "t0_source": 10,
    "send_queue_s": 10,
    "ttft_from_due_s": 10,
}
#: What an older writer's records mean for an added column (absent: null).
ADDED_DEFAULTS: Final[dict[str, object]] = {"stamp_source": "user"}

Status = Literal["ok", "error", "cancelled"]
STATUSES: Final = ("ok", "error", "cancelled")
TOKENS_SOURCES: Final = ("usage", "chunks", "tokenizer")
STAMP_SOURCES: Final = ("user", "kernel")


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request's measured facts. Frozen: derive, never mutate.

    Invariants (checked in ``__post_init__``): ``status`` is one of STATUSES;
    ``status == "ok"`` implies ``error_class is None``; ``error_class`` is one of
    ERROR_CLASSES when set; every offset in ``chunk_offsets_s`` is >= 0 and the list is
    non-decreasing; ``connect_s`` is None or >= 0.

    ``connect_s`` is the TCP (+TLS) set-up of the connection this request opened
    (seconds; before t0, so inside ``send_queue_s`` and ``ttft_from_due_s``, not TTFT;
    records before schema 10 (``t0_source`` None) have it inside TTFT), 0.0 when it
    reused a kept-alive connection, None when the client could not tell (or the
    connection never came up: error_class "connect"). ``send_queue_s`` is None where
    nothing said when the request was due (a bare client call) or for older records.
    """

    run_id: str
    endpoint: str
    model: str
    scenario: str
    prompt_id: str
    task: str
    request_index: int
    started_at: float
    t0_ns: int
    status: Status
    scheduled_s: float | None = None
    send_delay_s: float | None = None
    first_byte_s: float | None = None
    ttft_s: float | None = None
    first_answer_s: float | None = None
    e2e_s: float | None = None
    tpot_s: float | None = None
    chunk_offsets_s: tuple[float, ...] = ()
    input_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None
    tokens_source: str | None = None
    finish_reason: str | None = None
    error_class: str | None = None
    error_message: str | None = None
    http_status: int | None = None
    bytes_received: int = 0
    warmup: bool = False
    worker: str = "local"
    node_id: str = ""
    response_id: str | None = None
    api: str = "chat"
    client: str = "fast"
    concurrency: int | None = None
    rate_rps: float | None = None
    attempt: int = 1
    content_chunks: int = 0
    connect_s: float | None = None
    response_model: str | None = None
    cached_tokens: int | None = None
    server_timings: dict[str, Any] | None = field(default=None, hash=False)
    stamp_source: str = "user"
    session_id: str | None = None
    turn: int | None = None
    #: The answer's text (bounded, redacted), kept only for a prompt with an expect.
    answer: str | None = None
    #: The check's verdict (filled after the load; docs/quality.md): passed, score in
    #: [0, 1], or the check's own error (then both None).
    check_passed: bool | None = None
    check_score: float | None = None
    check_error: str | None = None
    request_id: str | None = None
    cached_tokens_source: str | None = None
    cache_write_tokens: int | None = None
    server_timings_source: str | None = None
    #: How far behind the worker's event loop was when the first content was read
    #: (ms; 0.0 on time; None without content or where nothing measured it).
    loop_lag_ms: float | None = None
    #: Image, sound and file parts of the request's messages, and the bytes they add
    #: to its body as sent (None: written before tokrate counted them).
    media_parts: int | None = None
    media_bytes: int | None = None
    #: The answer's tool calls, ``{"index": i, "name": ..., "arguments": TEXT}`` each in
    #: the order they came (None: it called none), when the first tool-call delta came
    #: (seconds after t0) and the calls' output tokens.
    tool_calls: tuple[dict[str, Any], ...] | None = field(default=None, hash=False)
    first_tool_call_s: float | None = None
    tool_call_tokens: int | None = None
    #: "kernel" | "user": where t0 came from (None: written before schema 10).
    t0_source: str | None = None
    send_queue_s: float | None = None
    ttft_from_due_s: float | None = None
    #: What a newer tokrate wrote that this one has no field for (read back from its
    #: records.jsonl keys), and what the client noted (ANSWER_CUT, TOOL_CALLS_CUT).
    extra: dict[str, Any] = field(
        default_factory=dict, compare=False, hash=False, metadata=EXTRA_INSIDE
    )

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"record status must be one of {STATUSES}, got {self.status!r}")
        if self.status == "ok" and self.error_class is not None:
            raise ValueError("an ok record cannot carry an error_class")
        if self.error_class is not None and self.error_class not in ERROR_CLASSES:
            raise ValueError(f"unknown error_class {self.error_class!r}")
        if self.tokens_source is not None and self.tokens_source not in TOKENS_SOURCES:
            raise ValueError(f"unknown tokens_source {self.tokens_source!r}")
        if self.stamp_source not in STAMP_SOURCES:
            raise ValueError(f"unknown stamp_source {self.stamp_source!r}")
        if self.t0_source is not None and self.t0_source not in STAMP_SOURCES:
            raise ValueError(f"unknown t0_source {self.t0_source!r}")
        if self.send_queue_s is not None and not self.send_queue_s >= 0:
            raise ValueError(f"send_queue_s must be >= 0 or None, got {self.send_queue_s!r}")
        if self.connect_s is not None and not self.connect_s >= 0:
            raise ValueError(f"connect_s must be >= 0 or None, got {self.connect_s!r}")
        previous = 0.0
        for offset in self.chunk_offsets_s:
            if offset < previous:
                raise ValueError("chunk_offsets_s must be non-negative and non-decreasing")
            previous = offset


def record_from_json(data: Any, where: str = "records.jsonl") -> RequestRecord:
    """One records.jsonl line's object as a record. Raises RunFolderError (one line
    naming ``where`` and the key) for a mistyped value or a broken invariant."""
    return from_json(RequestRecord, data, where)


#: Column types of records.parquet. ``extra`` is stored as a JSON string.
#: Column -> polars dtype name, in file order. The polars objects are in
#: :mod:`tokrate.runfolder.records_frame` (:data:`RECORD_POLARS_SCHEMA`), so that the
#: measuring process writes records without importing polars (its memory stays the load's).
RECORD_COLUMN_TYPES: Final[dict[str, str]] = {
    "run_id": "String",
    "endpoint": "String",
    "model": "String",
    "scenario": "String",
    "prompt_id": "String",
    "task": "String",
    "request_index": "Int64",
    "started_at": "Float64",
    "t0_ns": "Int64",
    "status": "String",
    "scheduled_s": "Float64",
    "send_delay_s": "Float64",
    "first_byte_s": "Float64",
    "ttft_s": "Float64",
    "first_answer_s": "Float64",
    "e2e_s": "Float64",
    "tpot_s": "Float64",
    "chunk_offsets_s": "List[Float64]",
    "input_tokens": "Int64",
    "output_tokens": "Int64",
    "reasoning_tokens": "Int64",
    "tokens_source": "String",
    "finish_reason": "String",
    "error_class": "String",
    "error_message": "String",
    "http_status": "Int64",
    "bytes_received": "Int64",
    "warmup": "Boolean",
    "worker": "String",
    "node_id": "String",
    "response_id": "String",
    "api": "String",
    "client": "String",
    "concurrency": "Int64",
    "rate_rps": "Float64",
    "attempt": "Int64",
    "content_chunks": "Int64",
    "connect_s": "Float64",
    "response_model": "String",
    "cached_tokens": "Int64",
    "server_timings": "String",
    "stamp_source": "String",
    "session_id": "String",
    "turn": "Int64",
    "answer": "String",
    "check_passed": "Boolean",
    "check_score": "Float64",
    "check_error": "String",
    "request_id": "String",
    "cached_tokens_source": "String",
    "cache_write_tokens": "Int64",
    "server_timings_source": "String",
    "loop_lag_ms": "Float64",
    "media_parts": "Int64",
    "media_bytes": "Int64",
    "tool_calls": "String",
    "first_tool_call_s": "Float64",
    "tool_call_tokens": "Int64",
    "t0_source": "String",
    "send_queue_s": "Float64",
    "ttft_from_due_s": "Float64",
    "extra": "String",
}
