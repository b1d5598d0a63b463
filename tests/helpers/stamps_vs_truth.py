"""A client's stamps against the simulator's truth log, on an idle or a busy machine.

The simulator stamps each content chunk just before it writes it (``content_write_ns``,
CLOCK_MONOTONIC, the clock of every client stamp), so a client's stamp of chunk i can be
judged against the write it stands for. Which write that is depends on the stamp:

- A kernel stamp (the fast client, ``stamp_source`` "kernel") is the arrival of the
  newest segment of its read (tokrate.client.kernel_stamps). A read that comes late,
  because the client's process waited for a CPU, takes every segment that queued
  meanwhile, and all of their chunks share that one stamp: each stands for the write of
  the LAST chunk read with it. Judged so, a kernel stamp is exact on a busy machine too.
- A user stamp (httpx, openai; fast without kernel stamps) is taken per chunk as the
  client parses it: it stands for its own chunk's write, and it is late by however long
  the client's process waited for a CPU meanwhile. That wait is not the client's
  measurement error, and the kernel counts it (``helpers.cpu_waits``): an error judged
  net of it keeps the idle bound's full power on an idle machine (the wait is ~0) and
  holds on a busy one.
"""

from __future__ import annotations

from collections.abc import Sequence

from helpers.cpu_waits import CpuWaits
from tokrate.client.result import StreamResult

__all__ = ["first_write", "net_of_waits", "stands_for", "write_lags"]


def stands_for(result: StreamResult, writes: Sequence[int]) -> list[int]:
    """Per content chunk of ``result``, the simulator's write its stamp stands for
    (module docstring): with kernel stamps, that of the newest chunk read with it."""
    if result.stamp_source != "kernel":
        return list(writes)
    stamps = result.chunk_ns
    out = list(writes)
    for i in range(len(stamps) - 2, -1, -1):
        if stamps[i] == stamps[i + 1]:
            out[i] = out[i + 1]
    return out


def first_write(result: StreamResult, writes: Sequence[int]) -> int:
    """The write the first content stamp stands for."""
    return stands_for(result, writes)[0]


def write_lags(result: StreamResult, writes: Sequence[int]) -> list[int]:
    """Per content chunk: its stamp minus the write it stands for (ns; never below 0
    when both sides read one clock)."""
    return [
        stamp - wrote
        for stamp, wrote in zip(result.chunk_ns, stands_for(result, writes), strict=True)
    ]


def net_of_waits(error_ns: float, waits: CpuWaits, start_ns: int, end_ns: int) -> float:
    """A timing error moved toward 0 by the run-queue wait of the test's processes (the
    client's and the simulator's) between ``start_ns`` and ``end_ns``, never past 0:
    give the span that holds all of the error, so a wait larger than it explains it
    all, and one request's wait never hides another's error."""
    waited = waits.within(start_ns, end_ns)
    if error_ns >= 0:
        return max(0.0, error_ns - waited)
    return min(0.0, error_ns + waited)
