"""Events a worker emits while it measures (engine -> backend -> driver).

Every event is a small frozen, picklable dataclass: the process and Ray backends send
them over pipes. Consumers (the store, progress) receive them in the driver thread in
the order each worker emitted them. Times: ``started_at`` is wall-clock Unix seconds;
``t0_ns`` is the worker's ``time.perf_counter_ns`` reading (only comparable with
other readings of the same worker).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tokrate.runfolder.records import RequestRecord

__all__ = [
    "Emit",
    "Event",
    "LoopLag",
    "Preconnected",
    "RequestFinished",
    "RequestStarted",
    "StreamProgress",
    "WorkerDone",
    "WorkerWarning",
]


@dataclass(frozen=True, slots=True)
class RequestStarted:
    """A request is about to be sent (emitted just before t0). ``request_index`` is the
    planned request's index within its scenario; ``target_index`` indexes the task's
    targets. ``t0_ns`` is the worker's monotonic reading at send (None if unknown)."""

    worker_id: str
    scenario: str
    request_index: int
    target_index: int
    started_at: float
    t0_ns: int | None = None


@dataclass(frozen=True, slots=True)
class RequestFinished:
    """One attempt of a request ended (ok, error or cancelled); ``record`` is its final
    record. ``retry_in_s``: the sender sends the request again after this back-off
    (seconds), so this attempt is not the request's last; None when it is."""

    record: RequestRecord
    retry_in_s: float | None = None


@dataclass(frozen=True, slots=True)
class WorkerWarning:
    """Something a user must know about the measurement (one line, ends with what to do).

    ``kind`` groups warnings that say the same thing (``"loop_lag"``,
    ``"open_loop_cap"``, ``"client"``), so repeats collapse to one line with a count.
    """

    worker_id: str
    message: str
    kind: str = ""


@dataclass(frozen=True, slots=True)
class StreamProgress:
    """A worker's running totals for its shard of ``scenario``, emitted a few times a
    second (never per chunk). Tuples are indexed by target index: ``tokens`` = output
    tokens of finished requests plus content chunks received so far by requests still
    in flight (so the count rises as chunks arrive); ``in_flight`` = requests in flight.
    """

    worker_id: str
    scenario: str
    tokens: tuple[int, ...]
    in_flight: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Preconnected:
    """Connections a worker opened to ``endpoint`` before the measured window of
    ``scenario``: the set-up time of each in seconds (None: that one failed)."""

    worker_id: str
    scenario: str
    endpoint: str
    connect_s: tuple[float | None, ...]


@dataclass(frozen=True, slots=True)
class LoopLag:
    """Event-loop lag of one worker over ``scenario``: overshoot of a periodic sleep, in
    milliseconds, over ``samples`` samples. ``exceeded`` is True when the documented
    threshold (tokrate.load.worker.looplag) was crossed."""

    worker_id: str
    max_ms: float
    p99_ms: float
    samples: int
    exceeded: bool = False
    scenario: str = ""


@dataclass(frozen=True, slots=True)
class WorkerDone:
    """The worker finished its shard of ``scenario`` (emitted last, exactly once)."""

    worker_id: str
    scenario: str


Event = (
    RequestStarted
    | RequestFinished
    | WorkerWarning
    | LoopLag
    | WorkerDone
    | StreamProgress
    | Preconnected
)

#: How a worker hands an event to its backend (and the backend to the driver).
Emit = Callable[[Event], None]
