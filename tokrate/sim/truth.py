"""The truth log: per finished request, when the server handed each write to the socket.

JSONL, one object per request (format fixed in docs/run-folder.md)::

    {"id", "model", "protocol", "arrived_ns", "received_ns", "first_write_ns",
     "content_write_ns": [...], "done_ns", "output_tokens", "reasoning_tokens", "fault",
     "input_tokens", "cached_tokens", "engine", "request", "answered_right", "tool_call"}

``arrived_ns`` is when the request reached the server: the kernel's receive stamp of its
last byte (:mod:`tokrate.sim.arrival`; the moment of that read where the kernel gives
none; null where the socket was not read with stamps); ``received_ns`` when the app
began handling it, after the server's own intake queue (uvicorn's loop reading the
sockets of a burst one after another). The server's own TTFT is counted from
``arrived_ns``: a request queued in the server's intake is the server's latency.

``protocol`` is the API the request came through (``chat``, ``completions``,
``responses``, ``messages``); ``content_write_ns`` has one stamp per token-bearing
event (reasoning or answer) in every protocol, the first ``reasoning_tokens`` of the
``output_tokens`` being reasoning. ``input_tokens`` is the prompt as the server
counted it (null for an answer that never reached the engine: an injected error
status); ``cached_tokens`` the part of it the prefix cache served (null with it off).
``engine`` is the engine's own stamps (``admitted_ns``, ``first_token_ns``,
``last_token_ns``: when the scheduler admitted the request into its batch and produced
its first and last token; null for an answer that never reached the engine), what the
``--request-metrics`` object is computed from.
``answered_right`` says whether the tier answered the request right (null: nothing to
be right about: no reference answer, tools or JSON format), ``tool_call`` the call it
answered with (``{"name", "arguments"}``; null: it answered in text).
``request`` is what reached the wire besides the
prompt: ``{"body": {non-prompt fields}, "headers": {lower-cased name: value}}``,
bounded, secret-named header values redacted (:mod:`tokrate.sim.capture`).

All ``*_ns`` are absolute ``time.perf_counter_ns()`` (CLOCK_MONOTONIC on Linux) taken
just before the write was handed to the transport. Lines are buffered in the process
and written in one ``write`` per finished request, then flushed, so a crash loses at
most the requests still in flight and the hot path does no I/O per chunk.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from tokrate.errors import OutputError
from tokrate.fileio import FileRefused, open_log

__all__ = ["TruthLog"]


class TruthLog:
    """Append-only JSONL writer; ``record`` is called from the server loop only.

    Raises OutputError (one line) when the file cannot be opened.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self._file: BinaryIO | None = open_log(self.path)
        except FileRefused as err:
            raise OutputError(f"{self.path}: truth log {err}") from None
        except OSError as err:
            raise OutputError(f"{self.path}: cannot open truth log ({err.strerror})") from None
        self._lock = threading.Lock()

    def record(
        self,
        request_id: str,
        model: str,
        received_ns: int,
        first_write_ns: int | None,
        content_write_ns: list[int],
        done_ns: int | None,
        output_tokens: int,
        fault: str | None,
        *,
        input_tokens: int | None = None,
        cached_tokens: int | None = None,
        engine: dict[str, int | None] | None = None,
        protocol: str,
        reasoning_tokens: int,
        request: dict[str, Any] | None = None,
        answered_right: bool | None = None,
        tool_call: dict[str, str] | None = None,
        arrived_ns: int | None = None,
    ) -> None:
        line = orjson.dumps(
            {
                "id": request_id,
                "model": model,
                "protocol": protocol,
                "arrived_ns": arrived_ns,
                "received_ns": received_ns,
                "first_write_ns": first_write_ns,
                "content_write_ns": content_write_ns,
                "done_ns": done_ns,
                "output_tokens": output_tokens,
                "reasoning_tokens": reasoning_tokens,
                "fault": fault,
                "input_tokens": input_tokens,
                "cached_tokens": cached_tokens,
                "engine": engine,
                "request": request,
                "answered_right": answered_right,
                "tool_call": tool_call,
            }
        )
        with self._lock:
            if self._file is not None:
                self._file.write(line + b"\n")
                self._file.flush()

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
