"""CPU per chunk of the client's hot path, in-process (issue 39): ``StreamState.feed``
on one-chunk reads of a plain Chat Completions answer, of Chat Completions tool-call
deltas, and of the Responses API's and Anthropic's tool-call argument deltas; no
network, no event loop, so it measures the parsing and bookkeeping every chunk costs.

Each kind is fed ``--chunks`` reads, ``--repeats`` times; the table gives the median and
the best of the repeats in ns per chunk. Compare two commits by running it with each on
``PYTHONPATH`` on a quiet machine (no other heavy job running):

    python benchmarks/chunk_cost.py [--chunks 20000] [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import orjson

from tokrate.client.accumulate import StreamState


def _sse(obj: dict[str, Any], *, typed: bool) -> bytes:
    head = f"event: {obj['type']}\n".encode() if typed else b""
    return head + b"data: " + orjson.dumps(obj) + b"\n\n"


def _chat(delta: dict[str, Any]) -> bytes:
    chunk = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
    }
    return _sse(chunk, typed=False)


def _streams(n: int) -> dict[str, tuple[str, list[bytes]]]:
    name = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": ""},
    }
    piece = {"index": 0, "function": {"arguments": "abcd"}}
    added = {
        "type": "response.output_item.added",
        "output_index": 0,
        "item": {"type": "function_call", "name": "get_weather", "arguments": ""},
    }
    delta = {"type": "response.function_call_arguments.delta", "output_index": 0, "delta": "abcd"}
    start = {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "tool_use", "id": "t", "name": "get_weather", "input": {}},
    }
    partial = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "input_json_delta", "partial_json": "abcd"},
    }
    return {
        "chat answer": ("chat", [_chat({"content": "tok "})] * n),
        "chat tool call": (
            "chat",
            [_chat({"tool_calls": [name]})] + [_chat({"tool_calls": [piece]})] * (n - 1),
        ),
        "responses tool call": (
            "responses",
            [_sse(added, typed=True)] + [_sse(delta, typed=True)] * (n - 1),
        ),
        "anthropic tool call": (
            "anthropic",
            [_sse(start, typed=True)] + [_sse(partial, typed=True)] * (n - 1),
        ),
    }


def _ns_per_chunk(api: str, reads: list[bytes]) -> float:
    state = StreamState(api=api, max_bytes=1 << 40, max_chunks=len(reads) + 1)
    t = time.perf_counter_ns()
    for i, read in enumerate(reads):
        state.feed(read, i)
    return (time.perf_counter_ns() - t) / len(reads)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chunks", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args()
    print("| chunks | ns / chunk, median | ns / chunk, best |")
    print("|---|---|---|")
    for label, (api, reads) in _streams(a.chunks).items():
        runs = [_ns_per_chunk(api, reads) for _ in range(a.repeats)]
        print(f"| {label} | {statistics.median(runs):,.0f} | {min(runs):,.0f} |")


if __name__ == "__main__":
    main()
