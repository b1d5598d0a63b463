"""The measurement engine: one shard of one scenario, in its own event loop.

:func:`run_worker` is the one function every backend runs per shard (a thread for the
in-process backend, a spawned process for ``--workers N``, a Ray actor). It owns an
event loop (uvloop where installed, else the stock asyncio loop), one connection pool
sized to the load, and an anyio task group that owns every request task:

- closed loop (``concurrency`` N, per target): every target gets its own N stream
  tasks, each pulling that target's next planned request from the shard's lazy
  iterator the moment its previous request ends, in every targets mode. So a slow
  target never takes a fast one's slots and "c=1" is single-stream for every model:
  no target ever has more than N requests in flight. No task list is built up front,
  so memory is bounded by N x targets, not by the plan's length.
- open loop (``rate_rps``): requests are sent at absolute deadlines
  ``scenario start + scheduled_s`` (never "sleep the gap after the previous send", which
  drifts). Each record keeps ``scheduled_s`` and ``send_delay_s`` (actual t0 minus the
  deadline, >= 0), so a client that falls behind shows it instead of hiding the queue
  (coordinated omission). In-flight requests are bounded only by a cap
  (``[load] max_in_flight``, default :data:`OPEN_LOOP_CAP` = 10,000, per worker); when
  the cap holds a send back, a
  WorkerWarning says so and the delay lands in ``send_delay_s`` (never a silent cap).

Before the measured window (``start_ns``) the worker opens the connections the load
will use (``[client] preconnect``, default on: closed loop one per stream; open loop
one per request/s of rate, at least one, at most :data:`PRECONNECT_OPEN_LOOP_MAX`) and
emits their set-up times (Preconnected), so TTFT carries no handshake. Each planned
request is sent, retried and recorded by :class:`tokrate.load.worker.sender.Sender`. Every
:data:`PROGRESS_INTERVAL_S` the worker emits StreamProgress (tokens so far per target,
counting content chunks of requests still streaming).

Stop (a :class:`tokrate.load.worker.stopping.Stop`): once set, no new request is scheduled;
requests in flight get :data:`STOP_GRACE_S` seconds (WorkerTask.grace_s) to finish,
or less when the stop is aborted, then are cancelled and recorded with status
"cancelled" (error_class "cancelled").
"""

from __future__ import annotations

import gc
import math
import socket
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final

import anyio
import anyio.abc

from tokrate.client.base import StreamClient
from tokrate.client.factory import open_client
from tokrate.client.result import RecordContext
from tokrate.errors import unwrap_tokrate_error
from tokrate.inputs.prompt_base import Prompt
from tokrate.inputs.targets import Target
from tokrate.load.plan import PlannedRequest, ScenarioPlan
from tokrate.load.worker.events import (
    Emit,
    LoopLag,
    Preconnected,
    StreamProgress,
    WorkerDone,
    WorkerWarning,
)
from tokrate.load.worker.looplag import LagMonitor
from tokrate.load.worker.pacing import Pacer
from tokrate.load.worker.sender import Sender
from tokrate.load.worker.settings import WorkerSettings
from tokrate.load.worker.stopping import Stop

__all__ = [
    "OPEN_LOOP_CAP",
    "PRECONNECT_OPEN_LOOP_MAX",
    "PROGRESS_INTERVAL_S",
    "STOP_GRACE_S",
    "WorkerTask",
    "run_worker",
]

#: Seconds in-flight requests may still finish after a stop (Ctrl-C) before cancel.
STOP_GRACE_S: Final = 5.0
#: Safety cap on in-flight requests in open-loop mode (reported when it binds).
OPEN_LOOP_CAP: Final = 10_000
#: How often the engine polls the cross-thread stop flag (seconds).
_STOP_POLL_S: Final = 0.05
#: Seconds between StreamProgress events of a worker.
PROGRESS_INTERVAL_S: Final = 0.25
#: Most connections an open-loop scenario opens ahead per endpoint origin.
PRECONNECT_OPEN_LOOP_MAX: Final = 256


@dataclass(frozen=True, slots=True)
class WorkerTask:
    """Everything one worker needs for one shard; picklable (sent to processes/Ray).

    ``scenario`` is a shard of one scenario; ``targets`` and ``prompts`` are the run's
    (the plan's indices point into them). ``api_keys`` maps endpoint name -> key; it
    is hidden from repr and never written anywhere. ``grace_s`` is the stop grace
    period; ``open_loop_cap`` the open-loop safety cap.
    """

    run_id: str
    worker_id: str
    scenario: ScenarioPlan
    settings: WorkerSettings
    targets: tuple[Target, ...]
    prompts: tuple[Prompt, ...]
    api_keys: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    node_id: str = ""
    grace_s: float = STOP_GRACE_S
    open_loop_cap: int = OPEN_LOOP_CAP


def run_worker(task: WorkerTask, emit: Emit, stop: Stop) -> None:
    """Run one shard to its end (blocking); see the module docstring.

    Calls ``emit(event)`` from this thread for every event, WorkerDone last. Never
    raises for request failures; raises only for bugs or a TokrateError from building
    requests (e.g. a reserved extra_body key).
    """
    worker = _Worker(task, emit, stop)
    # A full collection walks every object of the process (tens of ms with polars and
    # the plan loaded) and stops this loop meanwhile: every chunk read during it is
    # stamped that much late. Collect once now, before the window, and move what
    # survives out of the collector's sight, so later collections only walk objects
    # the measurement itself creates.
    gc.collect()
    gc.freeze()
    try:
        anyio.run(worker.main, backend="asyncio", backend_options={"use_uvloop": True})
    except BaseExceptionGroup as group:
        surfaced = unwrap_tokrate_error(group)
        if surfaced is group:
            raise
        raise surfaced from None


class _Worker:
    """State of one run_worker call (one event loop, one thread)."""

    def __init__(self, task: WorkerTask, emit: Emit, stop: Stop) -> None:
        self.task = task
        self.emit = emit
        self.stop = stop
        sc = task.scenario
        self.scenario = sc
        self.open_loop = sc.mode == "open"
        self.start_ns = 0
        self.stopping = anyio.Event()
        self.cap_warned = False
        # Records carry the scenario's level (per target, unsharded), so every shard's
        # records group together; the shard's own share drives the load loops.
        self.context = RecordContext(
            run_id=task.run_id,
            scenario=sc.name,
            prompt_id="",
            task="",
            request_index=0,
            worker=task.worker_id,
            node_id=task.node_id or socket.gethostname(),
            concurrency=sc.level_concurrency or sc.concurrency,
            rate_rps=None if sc.rate_rps is None else sc.rate_rps * sc.shard_count,
        )
        #: How late this worker's loop wakes up; the sender asks it, per record, how
        #: late the loop was at the first content read.
        self.monitor = LagMonitor()
        #: Bounds the request work one turn of the loop runs (tokrate.load.worker.pacing).
        self.pacer = Pacer()
        self.sender = Sender(
            settings=task.settings,
            targets=task.targets,
            prompts=task.prompts,
            api_keys=dict(task.api_keys),
            emit=emit,
            lag_at=self.monitor.lag_at,
            pacer=self.pacer,
        )

    # --- lifecycle -------------------------------------------------------------

    async def main(self) -> None:
        s = self.task.settings
        client = open_client(
            s.client_kind,
            pool_size=self._pool_size(),
            timeouts=s.timeouts,
            kernel_stamps=s.kernel_stamps,
        )
        monitor = self.monitor
        try:
            if s.preconnect:
                await self._preconnect(client)
            async with anyio.create_task_group() as outer:
                outer.start_soon(self._watch_stop)
                outer.start_soon(monitor.run)
                outer.start_soon(self._report_progress)
                async with anyio.create_task_group() as tg:
                    self.start_ns = time.perf_counter_ns()
                    if self.open_loop:
                        await self._open_loop(tg, client)
                    else:
                        self._closed_loop(tg, client)
                outer.cancel_scope.cancel()
            self._emit_progress()
        finally:
            with anyio.CancelScope(shield=True):
                await client.aclose()
        self._finish(client, monitor)

    def _finish(self, client: StreamClient, monitor: LagMonitor) -> None:
        worker, name = self.task.worker_id, self.scenario.name
        for notice in client.notices:
            self.emit(WorkerWarning(worker, f"scenario {name}: {notice}", kind="client"))
        lag = monitor.summary()
        self.emit(LoopLag(worker, lag.max_ms, lag.p99_ms, lag.samples, lag.exceeded, name))
        if lag.exceeded:
            where = f"scenario {name}, worker {worker}"
            self.emit(WorkerWarning(worker, f"{where}: {lag.message()}", kind="loop_lag"))
        self.emit(WorkerDone(worker_id=worker, scenario=name))

    # --- before the window: connections ------------------------------------------

    def _preconnect_counts(self) -> dict[str, tuple[Target, int]]:
        """Connections to open per endpoint (by base URL): what the load will hold."""
        sc = self.scenario
        out: dict[str, tuple[Target, int]] = {}
        for index in sc.target_indices:
            target = self.task.targets[index]
            # Open loop: the in-flight count a rate implies is unknown before the first
            # answers; one connection per request/s of this shard's rate.
            want = max(1, math.ceil(sc.rate_rps or 0)) if self.open_loop else sc.streams_per_target
            first, n = out.get(target.base_url, (target, 0))
            out[target.base_url] = (first, n + want)
        if self.open_loop:
            out = {
                url: (t, max(1, min(n, PRECONNECT_OPEN_LOOP_MAX))) for url, (t, n) in out.items()
            }
        return {url: (t, n) for url, (t, n) in out.items() if n > 0}

    async def _preconnect(self, client: StreamClient) -> None:
        """Open the connections the load will use, before the measured window, and
        emit their set-up times. Endpoints that share an origin share a pool, so
        their counts add up; the pool keeps at most ``pool_size``."""
        for url, (target, n) in self._preconnect_counts().items():
            if self.stop.is_set():
                return
            took = await client.preconnect(f"{url.rstrip('/')}/models", n)
            self.emit(
                Preconnected(
                    worker_id=self.task.worker_id,
                    scenario=self.scenario.name,
                    endpoint=target.endpoint.name,
                    connect_s=tuple(None if ns is None else ns / 1e9 for ns in took),
                )
            )

    # --- progress and stop ---------------------------------------------------------

    async def _report_progress(self) -> None:
        while True:
            await anyio.sleep(PROGRESS_INTERVAL_S)
            self._emit_progress()

    def _emit_progress(self) -> None:
        tokens, in_flight = self.sender.progress()
        self.emit(
            StreamProgress(
                worker_id=self.task.worker_id,
                scenario=self.scenario.name,
                tokens=tuple(tokens),
                in_flight=tuple(in_flight),
            )
        )

    def _pool_size(self) -> int:
        if self.open_loop:
            # Connections for the in-flight requests a rate implies; beyond this the
            # client opens more with a notice, never caps below the load.
            return max(1, min(self.task.open_loop_cap, 1024))
        sc = self.scenario
        return max(1, sc.streams_per_target * len(sc.target_indices))

    async def _watch_stop(self) -> None:
        """Bridge the cross-thread stop into the loop; then enforce the grace period
        (cut short by an abort)."""
        # Polled: Stop is a threading.Event set from another thread (or process), which
        # no anyio.Event can wait on without a thread of its own per shard.
        while not self.stop.is_set():  # noqa: ASYNC110
            await anyio.sleep(_STOP_POLL_S)
        self.stopping.set()
        deadline = time.monotonic() + self.task.grace_s
        while time.monotonic() < deadline and not self.stop.aborted:  # noqa: ASYNC110
            await anyio.sleep(min(_STOP_POLL_S, max(0.0, deadline - time.monotonic())))
        self.sender.cancel_all()

    def _expired(self) -> bool:
        if self.stopping.is_set():
            return True
        duration = self.scenario.duration_s
        if duration is None:
            return False
        return (time.perf_counter_ns() - self.start_ns) / 1e9 >= duration

    def _is_warmup(self, t0_ns: int) -> bool:
        """Closed loop: a request sent inside the warm-up seconds is warm-up."""
        warmup_s = self.scenario.warmup_s
        return warmup_s > 0 and (t0_ns - self.start_ns) / 1e9 < warmup_s

    async def _send(
        self, client: StreamClient, pr: PlannedRequest, due_ns: int, deadline_ns: int | None
    ) -> int:
        """Send one planned request, due at ``due_ns``; returns when it ended."""
        return await self.sender.send(
            client,
            pr,
            self.context,
            stopping=self.stopping,
            due_ns=due_ns,
            deadline_ns=deadline_ns,
            is_warmup=self._is_warmup,
            grace_s=self.task.grace_s,
            ends_ns=None
            if self.scenario.duration_s is None
            else self.start_ns + int(self.scenario.duration_s * 1e9),
        )

    # --- load loops --------------------------------------------------------------

    def _closed_loop(self, tg: anyio.abc.TaskGroup, client: StreamClient) -> None:
        """``concurrency`` streams per target over that target's own requests, in
        every targets mode: a slow target never holds a fast one's slots, so no target
        ever has more than ``concurrency`` requests in flight. Streams start
        interleaved across targets (slot 0 of every target, then slot 1, ...)."""
        sc = self.scenario
        planned: dict[int, Iterator[PlannedRequest]] = {
            t: iter(sc.requests(target=t)) for t in sc.target_indices
        }
        for _ in range(sc.streams_per_target):
            for t in sc.target_indices:
                tg.start_soon(self._stream, client, planned[t])

    async def _stream(self, client: StreamClient, planned: Iterator[PlannedRequest]) -> None:
        # next() on the shared iterator is synchronous, so the N streams of one event
        # loop never race on it. A stream's first request is due when the window
        # opens; each next one when the previous one ended (its slot freed).
        due_ns = self.start_ns
        for pr in planned:
            if self._expired():
                return
            due_ns = await self._send(client, pr, due_ns, None)

    async def _open_loop(self, tg: anyio.abc.TaskGroup, client: StreamClient) -> None:
        # A semaphore, not a CapacityLimiter: the token is taken by the scheduler and
        # given back by the request task (limiters are per-borrower).
        cap = anyio.Semaphore(self.task.open_loop_cap)
        duration = self.scenario.duration_s
        for pr in self.scenario.requests():
            scheduled = float(pr.scheduled_s or 0.0)
            deadline_ns = self.start_ns + int(scheduled * 1e9)
            if duration is not None and scheduled >= duration:
                return
            if not await self._until(deadline_ns):
                return
            if cap.value < 1 and not self.cap_warned:
                self.cap_warned = True
                self.emit(
                    WorkerWarning(
                        worker_id=self.task.worker_id,
                        message=(
                            f"scenario {self.scenario.name}: {self.task.open_loop_cap} "
                            "requests in flight (load.max_in_flight, the open-loop cap); later sends "
                            "wait and their send_delay_s shows it. Lower the rate or use "
                            "--workers."
                        ),
                        kind="open_loop_cap",
                    )
                )
            await cap.acquire()
            if self.stopping.is_set():
                cap.release()
                return
            tg.start_soon(self._open_request, client, pr, deadline_ns, cap)

    async def _until(self, deadline_ns: int) -> bool:
        """Sleep until ``deadline_ns`` (absolute, no drift); False when stopping."""
        while True:
            if self.stopping.is_set():
                return False
            wait_s = (deadline_ns - time.perf_counter_ns()) / 1e9
            if wait_s <= 0:
                return True
            with anyio.move_on_after(wait_s):
                await self.stopping.wait()

    async def _open_request(
        self, client: StreamClient, pr: PlannedRequest, deadline_ns: int, cap: anyio.Semaphore
    ) -> None:
        try:
            await self._send(client, pr, deadline_ns, deadline_ns)
        finally:
            cap.release()
