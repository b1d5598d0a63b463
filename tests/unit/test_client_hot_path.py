"""The per-token shortcuts of the client (issues 18 and 42: its CPU) give exactly what
the general paths give: the SSE decoder's one-whole-event read and many-whole-events
read, and StreamState's plain answer chunk (:func:`tokrate.client.chunks.plain_answer`)."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tokrate.client.accumulate import StreamState
from tokrate.client.chunks import classify_chunk, plain_answer
from tokrate.client.sse import SSEDecoder, SSEEvent, SSEProtocolError

_EVENT_PARTS = st.sampled_from(
    [b"data: ", b"data:", b"event: e", b"event:", b":c", b"\n", b"\r", b"x", b" ", b"{}"]
)
#: Reads that often are one whole one-line event, and sometimes almost one.
_reads = st.lists(
    st.one_of(
        st.binary(max_size=30).map(lambda b: b"data: " + b + b"\n\n"),
        st.lists(_EVENT_PARTS, max_size=6).map(b"".join),
    ),
    max_size=12,
)


def _decode(reads: list[bytes], **limits: int) -> object:
    dec = SSEDecoder(**limits)
    out: list[SSEEvent] = []
    try:
        for read in reads:
            out += dec.decode(read)
    except SSEProtocolError:
        return "protocol-error"
    return out


@settings(max_examples=400, deadline=None)
@given(reads=_reads, max_line=st.integers(min_value=1, max_value=40))
def test_one_event_reads_decode_as_byte_by_byte(reads: list[bytes], max_line: int) -> None:
    """A read of one byte never takes the shortcut: the same events (or error) either
    way, at every line and event limit near the reads' sizes."""
    limits = {"max_line_bytes": max_line, "max_event_bytes": max_line + 3}
    whole = _decode(reads, **limits)
    by_byte = _decode([bytes([c]) for read in reads for c in read], **limits)
    assert whole == by_byte
    if isinstance(whole, list):
        assert all(type(e) is SSEEvent for e in whole)


#: Reads of several whole one-line events, and sometimes almost that (a comment, an
#: event name, a CR, a data line without its space, a line end inside an event).
_many = st.lists(
    st.one_of(
        st.binary(max_size=12).map(lambda b: b"data: " + b + b"\n\n"),
        st.sampled_from([b":c\n", b"event: e\n", b"\r", b"data:x\n\n", b"\n", b"data: "]),
    ),
    min_size=1,
    max_size=8,
).map(b"".join)


@settings(max_examples=600, deadline=None)
@given(
    reads=st.lists(_many, max_size=4),
    max_line=st.integers(min_value=1, max_value=120),
    max_event=st.integers(min_value=1, max_value=120),
)
def test_many_event_reads_decode_as_byte_by_byte(
    reads: list[bytes], max_line: int, max_event: int
) -> None:
    """A read of several whole events is split at once; the same events (or error) as
    byte by byte, at every line and event limit near the reads' sizes."""
    limits = {"max_line_bytes": max_line, "max_event_bytes": max_event}
    whole = _decode(reads, **limits)
    by_byte = _decode([bytes([c]) for read in reads for c in read], **limits)
    assert whole == by_byte
    if isinstance(whole, list):
        assert all(type(e) is SSEEvent for e in whole)


def test_crlf_split_around_an_empty_read_is_one_line_end() -> None:
    """Found by the property above: an empty read between the CR and the LF of one CRLF
    cleared the held CR, so the LF read as a second (blank) line and dispatched an event
    that byte-by-byte decoding never sees."""
    reads = [b"data: \r", b"", b"\n"]
    assert _decode(reads, max_line_bytes=6, max_event_bytes=9) == []
    assert _decode([*reads, b"\n"]) == [SSEEvent(b"")]


def test_limit_edges_of_the_shortcut() -> None:
    read = b"data: abcd\n\n"  # line of 10 bytes, event data of 4 (+1)
    assert _decode([read], max_line_bytes=10, max_event_bytes=5) == [SSEEvent(b"abcd")]
    assert _decode([read], max_line_bytes=9) == "protocol-error"
    assert _decode([read], max_event_bytes=4) == "protocol-error"
    assert _decode([b"event:\n", read]) == [SSEEvent(b"abcd", "")]


_DELTAS = st.fixed_dictionaries(
    {},
    optional={
        "content": st.sampled_from(["", "x", None, 0, 1, ["y"]]),
        "reasoning_content": st.sampled_from(["", "r", None]),
        "reasoning": st.sampled_from(["", "r"]),
        "tool_calls": st.sampled_from([[], [{"index": 0}], None]),
        "function_call": st.sampled_from([{}, {"name": "f"}]),
        "role": st.just("assistant"),
    },
)
_CHOICES = st.fixed_dictionaries(
    {},
    optional={
        "delta": _DELTAS | st.sampled_from([None, "x"]),
        "text": st.sampled_from(["", "t"]),
        "finish_reason": st.sampled_from([None, "stop"]),
    },
)
_CHUNKS = st.fixed_dictionaries(
    {},
    optional={
        "id": st.sampled_from(["c1", "", None]),
        "model": st.sampled_from(["m", "", None]),
        "choices": st.lists(_CHOICES, max_size=2),
        "usage": st.sampled_from([None, {"completion_tokens": 2}]),
        "error": st.sampled_from([None, {"message": "boom"}]),
        "timings": st.sampled_from([None, {"predicted_n": 2}]),
    },
)


def _run(chunks: list[dict[str, Any]], *, shortcut: bool, keep_text: bool) -> object:
    state = StreamState(keep_text=keep_text, max_chunks=6)
    state.fast_chat = shortcut
    for i, chunk in enumerate(chunks):
        if state.feed(b"data: " + orjson.dumps(chunk) + b"\n\n", 1000 + i):
            break
    state.finish(9999)
    result = state.result(
        client="fast", api="chat", endpoint="e", model="m", t0_ns=0, started_at=0.0
    )
    return result, state.chunks_seen


_HEAD = {"id": "c1", "model": "m", "choices": [{"delta": {"role": "assistant"}}]}
_PLAIN = {"id": "c1", "choices": [{"delta": {"content": "x"}, "finish_reason": None}]}


@settings(max_examples=400, deadline=None)
@given(
    head=st.sampled_from([[], [_HEAD]]),
    chunks=st.lists(_CHUNKS | st.just(_PLAIN), max_size=9),
    keep_text=st.booleans(),
)
def test_plain_answer_shortcut_records_what_the_classifier_does(
    head: list[dict[str, Any]], chunks: list[dict[str, Any]], keep_text: bool
) -> None:
    """Past the first chunks (id and model known) plain answers take the shortcut; the
    record, the chunk count and the max_chunks limit come out the same."""
    stream = head + chunks
    fast = _run(stream, shortcut=True, keep_text=keep_text)
    assert fast == _run(stream, shortcut=False, keep_text=keep_text)


@settings(max_examples=400, deadline=None)
@given(chunk=_CHUNKS)
def test_plain_answer_is_an_answer_and_nothing_else(chunk: dict[str, Any]) -> None:
    if plain_answer(chunk) is None:
        return
    facts = classify_chunk(chunk)
    assert facts.kind == "content" and not facts.reasoning and not facts.tool_call
    assert facts.usage is None and facts.finish_reason is None and facts.timings is None


def test_a_stream_at_the_chunk_cap_holds_a_few_megabytes() -> None:
    """Per-stream memory at the default chunk cap (200,000): the accumulator keeps one
    8-byte stamp per content chunk while the stream runs, 1.6 MB at the cap (a list of
    ints kept ~36 bytes a stamp: an endless stream cost 90-135 MB at the old 1,000,000
    cap). Measured with tracemalloc over the real StreamState fed real SSE reads."""
    import tracemalloc

    from tokrate.client.accumulate import MAX_RESPONSE_CHUNKS, StreamState

    state = StreamState()
    head = b'data: {"id":"r","model":"m","choices":[{"index":0,"delta":{"content":"x"}}]}\n\n'
    state.feed(head, 1)
    tracemalloc.start()
    try:
        for i in range(MAX_RESPONSE_CHUNKS + 10):
            if state.feed(head, 2 + i):
                break
        held, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert state.error_class == "response_limit", state.error_message
    assert len(state.chunk_ns) == MAX_RESPONSE_CHUNKS
    assert held < 3 * 2**20, f"{held / 2**20:.1f} MiB held at the cap"


#: Bytes around an answer's text: the simulator's chunk, duplicate keys (the last one
#: is the answer), a chunk that is not a plain answer, a changing ``created``.
_SHAPES = [
    (
        b'{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m",'
        b'"choices":[{"index":0,"delta":{"content":"',
        b'"},"logprobs":null,"finish_reason":null}]}',
    ),
    (b'{"id":"c1","model":"m","choices":[{"delta":{"content":"Q","content":"', b'"}}]}'),
    (b'{"id":"c1","model":"m","choices":[{"delta":{"content":"', b'","content":"z"}}]}'),
    (b'{"id":"c1","model":"m","choices":[{"delta":{"content":"', b'"},"finish_reason":"s"}]}'),
    (b'{"id":"c1","created":2,"model":"m","choices":[{"delta":{"content":"', b'"}}]}'),
]
_MIDDLES = st.one_of(
    st.sampled_from([b"x", b"Q", b"R", b"ab", b'"', b"\\", b"\\n", b"\xc3\xa9", b"\x00", b""]),
    st.text(max_size=5).map(lambda t: orjson.dumps(t)[1:-1]),
    st.binary(max_size=5),
)


def _feed_reads(
    reads: list[bytes],
    *,
    learn: bool,
    keep_text: bool,
    max_chunks: int = 12,
    max_bytes: int = 1 << 20,
) -> object:
    state = StreamState(keep_text=keep_text, max_chunks=max_chunks, max_bytes=max_bytes)
    if not learn:
        state.template_tries = 10**6
    for i, read in enumerate(reads):
        if state.feed(read, 1000 + i):
            break
    state.finish(9999)
    result = state.result(
        client="fast", api="chat", endpoint="e", model="m", t0_ns=0, started_at=0.0
    )
    return result, state.chunks_seen


@settings(max_examples=500, deadline=None)
@given(
    events=st.lists(st.tuples(st.integers(0, len(_SHAPES) - 1), _MIDDLES), max_size=14),
    cuts=st.lists(st.integers(1, 4), max_size=14),
    keep_text=st.booleans(),
)
def test_learnt_chunk_shape_records_what_parsing_does(
    events: list[tuple[int, bytes]], cuts: list[int], keep_text: bool
) -> None:
    """Plain answer chunks recognised by the bytes around their text (no JSON parse)
    give the record, chunk count, cap and errors that parsing each chunk gives, for any
    text between those bytes (quotes, escapes, non-ASCII, control bytes, nothing), read
    one or several events at a time."""
    head = b'{"id":"c1","model":"m","choices":[{"delta":{"role":"assistant"}}]}'
    payloads = [head] + [_SHAPES[k][0] + middle + _SHAPES[k][1] for k, middle in events]
    sse = [b"data: " + p + b"\n\n" for p in payloads]
    reads, at = [], 0
    for n in [*cuts, len(sse)]:
        if at < len(sse):
            reads.append(b"".join(sse[at : at + n]))
            at += n
    learnt = _feed_reads(reads, learn=True, keep_text=keep_text)
    assert learnt == _feed_reads(reads, learn=False, keep_text=keep_text)


#: What may come between a stream's events: nothing, a comment, a keep-alive line, a
#: lone CR (the decoder then holds a line end), an event name, a stray LF.
_BETWEEN = st.sampled_from([b"", b"", b":c\n\n", b"\r", b"event: e\n", b"\n", b"data: ", b"da"])
_NO_CAP: dict[str, Any] = {"keep_text": False, "max_chunks": 16, "max_bytes": 10**6}
#: Mostly plain texts (so the shape is learnt and the lane taken), sometimes any.
_PLAIN_MOSTLY = st.one_of(
    st.from_regex(rb"[ !#-\[\]-~]{1,6}", fullmatch=True),
    st.from_regex(rb"[ !#-\[\]-~]{1,6}", fullmatch=True),
    _MIDDLES,
)


@settings(max_examples=600, deadline=None)
@given(
    events=st.lists(
        st.tuples(
            st.sampled_from([0, 0, 0, 4, 1, 2, 3]),
            _PLAIN_MOSTLY,
            _BETWEEN,
            st.sampled_from([0, 0, 0, 1, 2, 3]),
        ),
        min_size=3,
        max_size=16,
    ),
    keep_text=st.booleans(),
    max_chunks=st.integers(min_value=1, max_value=16),
    max_bytes=st.integers(min_value=100, max_value=2_500),
)
# A line held from the read before (the next read only looks like a whole event); the
# chunk cap and the byte cap reached by reads of the learnt shape.
@example(events=[(0, b"ab", b"", 0)] * 2 + [(0, b"ab", b"data: ", 0)], **_NO_CAP)
@example(events=[(0, b"ab", b"", 0)] * 6, keep_text=True, max_chunks=3, max_bytes=10**6)
@example(events=[(4, b"ab", b"", 0)] * 6, keep_text=False, max_chunks=16, max_bytes=300)
def test_one_event_reads_of_the_learnt_shape_record_what_parsing_does(
    events: list[tuple[int, bytes, bytes, int]], keep_text: bool, max_chunks: int, max_bytes: int
) -> None:
    """A read that is exactly one plain answer chunk's event of the learnt shape, with
    nothing held in the decoder, is counted without the decoder (``plain_read``): the
    same record, chunk count, caps and errors as parsing every chunk, whatever came
    before it (an event cut across reads, a comment, a lone CR, an event name, several
    events in one read) and at any byte cap."""
    head = b'{"id":"c1","model":"m","choices":[{"delta":{"role":"assistant"}}]}'
    reads = [b"data: " + head + b"\n\n"]
    for k, middle, between, how in events:
        event = b"data: " + _SHAPES[k][0] + middle + _SHAPES[k][1] + b"\n\n"
        if how == 0:  # a read of its own (the per-token read)
            reads += [between, event] if between else [event]
        elif how == 1:  # cut inside the event
            cut = len(event) // 2
            reads += [between + event[:cut], event[cut:]]
        elif how == 2:  # read together with what came before it
            reads[-1] += between + event
        else:  # its own read, what came between glued to its front
            reads.append(between + event)
    caps = {"keep_text": keep_text, "max_chunks": max_chunks, "max_bytes": max_bytes}
    assert _feed_reads(reads, learn=True, **caps) == _feed_reads(reads, learn=False, **caps)


def test_a_plain_stream_is_recognised_by_its_shape() -> None:
    """The simulator's stream learns its shape from its first plain answer chunk: the
    rest are recognised without a parse (what makes the test above meaningful)."""
    state = StreamState(keep_text=True)
    head = b'data: {"id":"c1","model":"m","choices":[{"delta":{"role":"assistant"}}]}\n\n'
    prefix, suffix = _SHAPES[0]
    body = b"".join(b"data: " + prefix + t + suffix + b"\n\n" for t in (b"a", b"b c", b"d"))
    assert not state.feed(head + body, 1)
    assert state.plain_template is not None and state.plain_template[:2] == _SHAPES[0]
    assert state.plain_read is not None  # the next one-event read takes the lane
    assert not state.feed(b"data: " + prefix + b"e" + suffix + b"\n\n", 2)
    assert state.answer_chunks == 4 and list(state.chunk_ns) == [1, 1, 1, 2]
    assert "".join(state.answer_parts or ()) == "ab cde"
    assert state.bytes_received == len(head + body) + len(prefix + b"e" + suffix) + 8
