"""Read an SSE stream with plain httpx, stamping each event when its last byte arrived.

A test-side reader (not tokrate's client): ``perf_counter_ns`` is taken as each raw
chunk arrives, before parsing, so the stamps compare with the simulator's truth log
(same CLOCK_MONOTONIC). Strict: every event must be ``event:``/``data:`` lines only,
and where an ``event:`` line is present its name must equal the payload's ``type``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Any

import httpx

__all__ = ["SseEvent", "StampedStream", "is_token_event", "stream_stamped"]


@dataclass(frozen=True, slots=True)
class SseEvent:
    stamp_ns: int
    name: str | None
    data: Any  # parsed JSON, or the string "[DONE]"


@dataclass(frozen=True, slots=True)
class StampedStream:
    t0_ns: int
    status: int
    headers: httpx.Headers
    events: list[SseEvent]


def _parse(raw: bytes, stamp_ns: int) -> SseEvent:
    name: str | None = None
    data: str | None = None
    for line in raw.decode("utf-8").split("\n"):
        key, _, value = line.partition(": ")
        if key == "event":
            name = value
        elif key == "data":
            assert data is None, f"two data lines in one event: {raw!r}"
            data = value
        else:
            raise AssertionError(f"unexpected SSE line {line!r}")
    assert data is not None, raw
    obj = data if data == "[DONE]" else json.loads(data)
    if name is not None:
        assert isinstance(obj, dict) and obj.get("type") == name, (name, obj)
    return SseEvent(stamp_ns, name, obj)


def stream_stamped(
    client: httpx.Client, url: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> StampedStream:
    """POST ``body`` and read the whole stream (a non-SSE answer: ``events`` empty)."""
    t0 = perf_counter_ns()
    with client.stream("POST", url, json=body, headers=headers) as resp:
        if not resp.headers.get("content-type", "").startswith("text/event-stream"):
            resp.read()
            return StampedStream(t0, resp.status_code, resp.headers, [])
        events: list[SseEvent] = []
        buf = b""
        for chunk in resp.iter_raw():
            now = perf_counter_ns()
            buf += chunk
            while b"\n\n" in buf:
                raw, buf = buf.split(b"\n\n", 1)
                events.append(_parse(raw, now))
        assert buf == b"", f"stream ended inside an event: {buf!r}"
        return StampedStream(t0, resp.status_code, resp.headers, events)


def is_token_event(event: SseEvent) -> bool:
    """Whether the event carries output tokens (reasoning or answer), in any protocol."""
    d = event.data
    if not isinstance(d, dict):
        return False
    kind = d.get("type")
    if kind in (
        "response.output_text.delta",
        "response.reasoning_summary_text.delta",
        "response.reasoning_text.delta",
    ):
        return True
    if kind == "content_block_delta":
        return bool(d["delta"]["type"] in ("text_delta", "thinking_delta"))
    choices = d.get("choices")
    if kind is None and choices:
        delta = choices[0].get("delta")
        if delta is None:  # legacy completions
            return bool(choices[0].get("text"))
        return bool(delta.get("content") or delta.get("reasoning_content"))
    return False
