"""Tool calls kept per record (docs/run-folder.md ``tool_calls``): each protocol's stream
of tool-call deltas, read at every split of its bytes, gives the same calls (index in
order of appearance, name, arguments text), the time of the first tool-call delta and
the calls' output tokens; bounded; through records.jsonl and records.parquet unchanged."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from tokrate.client.accumulate import MAX_TOOL_ARGUMENT_CHARS, StreamState
from tokrate.client.result import RecordContext, build_record
from tokrate.runfolder.jsondoc import to_json
from tokrate.runfolder.records import (
    MAX_TOOL_CALLS,
    TOOL_CALLS_CUT,
    RequestRecord,
    record_from_json,
)
from tokrate.runfolder.records_frame import frame_to_records, records_to_frame


def _sse(events: list[dict[str, Any]], *, typed: bool, done: bool) -> bytes:
    out = b""
    for e in events:
        head = f"event: {e['type']}\n".encode() if typed else b""
        out += head + b"data: " + orjson.dumps(e) + b"\n\n"
    return out + (b"data: [DONE]\n\n" if done else b"")


def _chat_chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "c1",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _call(
    index: int, name: str | None = None, args: str = "", id_: str | None = None
) -> dict[str, Any]:
    entry: dict[str, Any] = {"index": index, "function": {"arguments": args}}
    if name is not None:
        entry["id"] = id_ or f"call_{index}"
        entry["type"] = "function"
        entry["function"]["name"] = name
    return entry


CHAT = _sse(
    [
        _chat_chunk({"role": "assistant", "content": None}),
        _chat_chunk({"tool_calls": [_call(0, "get_weather")]}),
        _chat_chunk({"tool_calls": [_call(0, args='{"city"')]}),
        _chat_chunk({"tool_calls": [_call(0, args=': "Paris"}')]}),
        _chat_chunk({"tool_calls": [_call(1, "get_time", '{"tz": ')]}),
        _chat_chunk({"tool_calls": [_call(1, args='"CET"}')]}),
        _chat_chunk({}, "tool_calls"),
        {
            "id": "c1",
            "model": "m",
            "choices": [],
            "usage": {"prompt_tokens": 40, "completion_tokens": 17},
        },
    ],
    typed=False,
    done=True,
)
RESPONSES = _sse(
    [
        {"type": "response.created", "response": {"id": "resp_1", "model": "m"}},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_1",
                "name": "get_weather",
                "arguments": "",
            },
        },
        {"type": "response.function_call_arguments.delta", "output_index": 0, "delta": '{"city"'},
        {
            "type": "response.function_call_arguments.delta",
            "output_index": 0,
            "delta": ': "Paris"}',
        },
        {
            "type": "response.function_call_arguments.done",
            "output_index": 0,
            "arguments": '{"city": "Paris"}',
        },
        {
            "type": "response.output_item.added",
            "output_index": 1,
            "item": {"type": "function_call", "name": "get_time", "arguments": ""},
        },
        {"type": "response.function_call_arguments.delta", "output_index": 1, "delta": '{"tz": '},
        {"type": "response.function_call_arguments.delta", "output_index": 1, "delta": '"CET"}'},
        {
            "type": "response.completed",
            "response": {
                "id": "resp_1",
                "output": [{"type": "function_call"}],
                "usage": {"input_tokens": 40, "output_tokens": 17},
            },
        },
    ],
    typed=True,
    done=False,
)
ANTHROPIC = _sse(
    [
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "model": "m",
                "usage": {"input_tokens": 40, "output_tokens": 1},
            },
        },
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "get_weather",
                "input": {},
            },
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": '{"city"'},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": ': "Paris"}'},
        },
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": "toolu_2", "name": "get_time", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": '{"tz": '},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": '"CET"}'},
        },
        {"type": "content_block_stop", "index": 1},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use"},
            "usage": {"output_tokens": 17},
        },
        {"type": "message_stop"},
    ],
    typed=True,
    done=False,
)
STREAMS = {"chat": CHAT, "responses": RESPONSES, "anthropic": ANTHROPIC}
CALLS = (("get_weather", '{"city": "Paris"}'), ("get_time", '{"tz": "CET"}'))


def _fed(api: str, reads: list[bytes]) -> StreamState:
    state = StreamState(api=api)
    for i, read in enumerate(reads):
        if state.feed(read, 1_000 + i):
            break
    state.finish(10_000)
    return state


@pytest.mark.parametrize("api", sorted(STREAMS))
def test_each_protocol_keeps_every_call_at_every_split(api: str) -> None:
    data = STREAMS[api]
    for cut in range(1, len(data)):
        state = _fed(api, [data[:cut], data[cut:]])
        assert state.kept_tool_calls() == CALLS, cut
        assert state.error_class is None and state.finish_reason == "tool_calls"


@pytest.mark.parametrize("api", sorted(STREAMS))
def test_the_record_keeps_calls_first_delta_and_tokens(api: str) -> None:
    data = STREAMS[api]
    # One read per event, so every event has its own stamp.
    events = [e + b"\n\n" for e in data.split(b"\n\n") if e]
    state = _fed(api, events)
    result = state.result(client="fast", api=api, endpoint="e", model="m", t0_ns=0, started_at=0.0)
    record = build_record(result, RecordContext("r", "s", "p", "t", 0))
    assert record.tool_calls == (
        {"index": 0, "name": "get_weather", "arguments": '{"city": "Paris"}'},
        {"index": 1, "name": "get_time", "arguments": '{"tz": "CET"}'},
    )
    # The first tool-call delta: chat's name chunk (content-bearing there), the first
    # arguments delta in the typed protocols (the item/block start is lifecycle).
    first = {"chat": 1, "responses": 2, "anthropic": 2}[api]
    assert record.first_tool_call_s == (1_000 + first) / 1e9
    assert record.ttft_s == record.first_tool_call_s
    # Nothing but the calls was output: the usage's count is theirs.
    assert record.tool_call_tokens == 17
    assert record.status == "ok" and record.finish_reason == "tool_calls"


def test_without_usage_the_calls_count_their_deltas() -> None:
    stream = [e + b"\n\n" for e in CHAT.split(b"\n\n") if e and b'"usage"' not in e]
    state = _fed("chat", stream)
    result = state.result(client="fast", api="chat", endpoint="e", model="m", t0_ns=0, started_at=0)
    record = build_record(result, RecordContext("r", "s", "p", "t", 0))
    assert record.tool_call_tokens == 5 == record.output_tokens
    assert record.tokens_source == "chunks"


def test_an_answer_without_calls_keeps_none() -> None:
    data = _sse(
        [_chat_chunk({"content": "Paris"}), _chat_chunk({}, "stop")], typed=False, done=True
    )
    state = _fed("chat", [data])
    result = state.result(client="fast", api="chat", endpoint="e", model="m", t0_ns=0, started_at=0)
    record = build_record(result, RecordContext("r", "s", "p", "t", 0))
    assert (record.tool_calls, record.first_tool_call_s, record.tool_call_tokens) == (None,) * 3


def test_calls_are_bounded_in_number_and_size() -> None:
    many = [
        _chat_chunk({"tool_calls": [_call(i, f"f{i}", "x" * 10)]})
        for i in range(MAX_TOOL_CALLS + 5)
    ]
    huge = [_chat_chunk({"tool_calls": [_call(0, args="y" * 4096)]}) for _ in range(5)]
    state = _fed("chat", [_sse(many + huge, typed=False, done=True)])
    calls = state.kept_tool_calls()
    assert len(calls) == MAX_TOOL_CALLS
    assert len(calls[0][1]) == MAX_TOOL_ARGUMENT_CHARS
    # The record says it kept less than the answer called, so no check judges the rest.
    result = state.result(client="fast", api="chat", endpoint="e", model="m", t0_ns=0, started_at=0)
    record = build_record(result, RecordContext("r", "s", "p", "t", 0))
    assert record.extra[TOOL_CALLS_CUT] is True


@pytest.mark.parametrize(
    "chunks",
    [
        # Arguments exactly at the bound, in two pieces: nothing was cut.
        [_call(0, "f", "a" * (MAX_TOOL_ARGUMENT_CHARS - 1)), _call(0, args="b")],
        # MAX_TOOL_CALLS calls: all kept.
        [_call(i, f"f{i}", "{}") for i in range(MAX_TOOL_CALLS)],
    ],
)
def test_calls_at_their_bounds_are_not_cut(chunks: list[dict[str, Any]]) -> None:
    feed = [_chat_chunk({"tool_calls": [c]}) for c in chunks]
    state = _fed("chat", [_sse(feed, typed=False, done=True)])
    result = state.result(client="fast", api="chat", endpoint="e", model="m", t0_ns=0, started_at=0)
    record = build_record(result, RecordContext("r", "s", "p", "t", 0))
    assert TOOL_CALLS_CUT not in record.extra


def test_a_legacy_function_call_is_call_zero() -> None:
    chunks = [
        _chat_chunk({"function_call": {"name": "lookup", "arguments": ""}}),
        _chat_chunk({"function_call": {"arguments": '{"q": 1}'}}),
        _chat_chunk({}, "function_call"),
    ]
    state = _fed("chat", [_sse(chunks, typed=False, done=True)])
    assert state.kept_tool_calls() == (("lookup", '{"q": 1}'),)


def test_tool_calls_survive_records_jsonl_and_parquet() -> None:
    calls = ({"index": 0, "name": "get_weather", "arguments": '{"city": "Paris"}'},)
    record = RequestRecord(
        run_id="r",
        endpoint="e",
        model="m",
        scenario="s",
        prompt_id="p",
        task="t",
        request_index=0,
        started_at=0.0,
        t0_ns=0,
        status="ok",
        tool_calls=calls,
        first_tool_call_s=0.25,
        tool_call_tokens=9,
    )
    line = json.loads(orjson.dumps(to_json(record)))
    assert record_from_json(line) == record
    row = records_to_frame([record]).to_dicts()[0]
    assert json.loads(row["tool_calls"]) == list(calls)
    assert frame_to_records(records_to_frame([record]))[0].tool_calls == calls
