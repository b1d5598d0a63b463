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
  (coordinated omission). In-flight requests are bounded only by a safety cap
  (:data:`OPEN_LOOP_CAP`, default 10,000); when the cap holds a send back, a
  WorkerWarning says so and the delay lands in ``send_delay_s`` (never a silent cap).

Before the measured window (``start_ns``) the worker opens the connections the load
will use (``[client] preconnect``, default on: closed loop one per stream; open loop
one per request/s of rate, at least one, at most :data:`PRECONNECT_OPEN_LOOP_MAX`) and
emits their set-up times (Preconnected), so TTFT carries no handshake. Every request
emits RequestStarted just before it is sent and RequestFinished with its record the
moment it ends; failures are data on the record, never exceptions. Every
:data:`PROGRESS_INTERVAL_S` the worker emits StreamProgress (tokens so far per target,
counting content chunks of requests still streaming). A server
that rejects ``stream_options.include_usage`` is asked without it for the rest of the
worker. The retry policy (``spec.client.retry``, off by default) re-sends failed
requests of the listed error classes; every attempt is its own record (``attempt``).

Stop: when ``stop`` (a threading.Event) is set, no new request is scheduled; requests
in flight get :data:`STOP_GRACE_S` seconds (WorkerTask.grace_s) to finish, then are
cancelled and recorded with status "cancelled" (error_class "cancelled").
"""

from __future__ import annotations

import gc
import math
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import anyio.abc

from tokrate.errors import unwrap_tokrate_error
from tokrate.events import (
    LoopLag,
    Preconnected,
    RequestFinished,
    RequestStarted,
    StreamProgress,
    WorkerDone,
    WorkerWarning,
)
from tokrate.records import RequestRecord
from tokrate.spec import EndpointSpec, ModelSpec, RunSpec

__all__ = [
    "OPEN_LOOP_CAP",
    "PRECONNECT_OPEN_LOOP_MAX",
    "PROGRESS_INTERVAL_S",
    "STOP_GRACE_S",
    "Target",
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

Emit = Callable[[Any], None]


@dataclass(frozen=True, slots=True)
class Target:
    """One endpoint x model, resolved: ``endpoint.base_url`` is the real URL (for the
    embedded simulator, the one it bound). ``simulated`` marks simulator targets."""

    endpoint: EndpointSpec
    model: ModelSpec
    simulated: bool = False

    @property
    def base_url(self) -> str:
        return self.endpoint.base_url

    @property
    def label(self) -> str:
        """``endpoint/model``, the name progress and warnings use."""
        return f"{self.endpoint.name}/{self.model.name}"


@dataclass(frozen=True, slots=True)
class WorkerTask:
    """Everything one worker needs for one shard; picklable (sent to processes/Ray).

    ``scenario`` is a ``tokrate.plan.ScenarioPlan`` (a shard of it). ``api_keys`` maps
    endpoint name -> key; it is hidden from repr and never written anywhere.
    ``grace_s`` is the stop grace period; ``open_loop_cap`` the open-loop safety cap.
    """

    run_id: str
    worker_id: str
    scenario: Any
    spec: RunSpec
    targets: tuple[Target, ...]
    prompts: tuple[Any, ...]
    api_keys: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    node_id: str = ""
    grace_s: float = STOP_GRACE_S
    open_loop_cap: int = OPEN_LOOP_CAP


def _scenario_attr(scenario: Any, name: str, default: Any = None) -> Any:
    return getattr(scenario, name, default)


def run_worker(task: WorkerTask, emit: Emit, stop: threading.Event) -> None:
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
        import uvloop  # noqa: F401  (only probing availability)

        options: dict[str, Any] = {"use_uvloop": True}
    except ImportError:  # pragma: no cover - uvloop is a core dependency on Linux
        options = {}
    try:
        anyio.run(worker.main, backend="asyncio", backend_options=options)
    except BaseExceptionGroup as group:
        surfaced = unwrap_tokrate_error(group)
        if surfaced is group:
            raise
        raise surfaced from None


class _Worker:
    """State of one run_worker call (one event loop, one thread)."""

    def __init__(self, task: WorkerTask, emit: Emit, stop: threading.Event) -> None:
        self.task = task
        self.emit = emit
        self.stop = stop
        self.spec = task.spec
        self.scenario = task.scenario
        self.scenario_name = str(_scenario_attr(task.scenario, "name", "s0"))
        sc = task.scenario
        # Records carry the scenario's level (per target, unsharded), so every shard's
        # records group together; the shard's own share drives the load loops.
        self.concurrency: int | None = _scenario_attr(sc, "level_concurrency") or _scenario_attr(
            sc, "concurrency"
        )
        rate = _scenario_attr(sc, "rate_rps")
        self.open_loop = rate is not None or _scenario_attr(sc, "mode") == "open"
        self.rate_rps: float | None = (
            None if rate is None else rate * int(_scenario_attr(sc, "shard_count", 1))
        )
        self.warmup_s = float(_scenario_attr(sc, "warmup_s", 0.0) or 0.0)
        duration = _scenario_attr(task.scenario, "duration_s", task.spec.load.duration_s)
        self.duration_s: float | None = duration
        self.node_id = task.node_id or socket.gethostname()
        # Endpoints whose server rejected stream_options; remembered for the worker.
        self.usage_rejected: set[str] = set()
        self.stopping = anyio.Event()
        self.in_flight: dict[int, anyio.CancelScope] = {}
        self.start_ns = 0
        self.cap_warned = False
        self.client: Any = None
        n_targets = len(task.targets)
        # Progress: output tokens of finished requests per target, and the live
        # StreamState of every request in flight (its chunk count grows as it streams).
        self.done_tokens = [0] * n_targets
        self.live: dict[int, tuple[int, Any]] = {}

    # --- lifecycle -------------------------------------------------------------

    async def main(self) -> None:
        from tokrate.client import open_client
        from tokrate.looplag import LagMonitor

        pool = self._pool_size()
        self.client = open_client(
            self.spec.client.kind, pool_size=pool, timeouts=self.spec.client.timeouts
        )
        monitor = LagMonitor()
        try:
            if self.spec.client.preconnect:
                await self._preconnect()
            async with anyio.create_task_group() as outer:
                outer.start_soon(self._watch_stop)
                outer.start_soon(monitor.run)
                outer.start_soon(self._report_progress)
                async with anyio.create_task_group() as tg:
                    self.start_ns = time.perf_counter_ns()
                    if self.open_loop:
                        await self._open_loop(tg)
                    else:
                        await self._closed_loop(tg)
                outer.cancel_scope.cancel()
            self._emit_progress()
        finally:
            with anyio.CancelScope(shield=True):
                await self.client.aclose()
        for notice in getattr(self.client, "notices", ()):
            self.emit(
                WorkerWarning(
                    worker_id=self.task.worker_id,
                    message=f"scenario {self.scenario_name}: {notice}",
                    kind="client",
                )
            )
        lag = monitor.summary()
        self.emit(
            LoopLag(
                worker_id=self.task.worker_id,
                max_ms=lag.max_ms,
                p99_ms=lag.p99_ms,
                samples=lag.samples,
                exceeded=lag.exceeded,
            )
        )
        if lag.exceeded:
            where = f"scenario {self.scenario_name}, worker {self.task.worker_id}"
            self.emit(
                WorkerWarning(
                    worker_id=self.task.worker_id,
                    message=f"{where}: {lag.message()}",
                    kind="loop_lag",
                )
            )
        self.emit(WorkerDone(worker_id=self.task.worker_id, scenario=self.scenario_name))

    # --- before the window: connections ------------------------------------------

    def _preconnect_counts(self) -> dict[str, tuple[Target, int]]:
        """Connections to open per endpoint (by base URL): what the load will hold."""
        targets = tuple(_scenario_attr(self.scenario, "target_indices", ()) or ())
        out: dict[str, tuple[Target, int]] = {}
        for index in targets:
            target = self.task.targets[index]
            if self.open_loop:
                # The in-flight count a rate implies is unknown before the first
                # answers; one connection per request/s of this shard's rate.
                want = max(1, math.ceil(float(_scenario_attr(self.scenario, "rate_rps") or 0)))
            else:
                want = int(_scenario_attr(self.scenario, "concurrency", 0) or 0)
            first, n = out.get(target.base_url, (target, 0))
            out[target.base_url] = (first, n + want)
        if self.open_loop:
            out = {
                url: (t, max(1, min(n, PRECONNECT_OPEN_LOOP_MAX))) for url, (t, n) in out.items()
            }
        return {url: (t, n) for url, (t, n) in out.items() if n > 0}

    async def _preconnect(self) -> None:
        """Open the connections the load will use, before the measured window, and
        emit their set-up times. Endpoints that share an origin share a pool, so
        their counts add up; the pool keeps at most ``pool_size``."""
        for url, (target, n) in self._preconnect_counts().items():
            if self.stop.is_set():
                return
            took = await self.client.preconnect(f"{url.rstrip('/')}/models", n)
            self.emit(
                Preconnected(
                    worker_id=self.task.worker_id,
                    scenario=self.scenario_name,
                    endpoint=target.endpoint.name,
                    connect_s=tuple(None if ns is None else ns / 1e9 for ns in took),
                )
            )

    # --- progress ------------------------------------------------------------------

    async def _report_progress(self) -> None:
        while True:
            await anyio.sleep(PROGRESS_INTERVAL_S)
            self._emit_progress()

    def _emit_progress(self) -> None:
        tokens = list(self.done_tokens)
        in_flight = [0] * len(tokens)
        for target_index, state in self.live.values():
            in_flight[target_index] += 1
            if state is not None:
                tokens[target_index] += len(state.chunk_ns)
        self.emit(
            StreamProgress(
                worker_id=self.task.worker_id,
                scenario=self.scenario_name,
                tokens=tuple(tokens),
                in_flight=tuple(in_flight),
            )
        )

    def _streams(self) -> int:
        """Closed loop: requests in flight in this shard (level x targets)."""
        streams = _scenario_attr(self.scenario, "streams")
        if streams is None:
            streams = _scenario_attr(self.scenario, "concurrency")
        return int(streams or 0)

    def _pool_size(self) -> int:
        if self.open_loop:
            # Connections for the in-flight requests a rate implies; beyond this the
            # client opens more with a notice, never caps below the load.
            return max(1, min(self.task.open_loop_cap, 1024))
        return max(1, self._streams())

    async def _watch_stop(self) -> None:
        """Bridge the cross-thread stop flag into the loop; then enforce the grace."""
        while not self.stop.is_set():
            await anyio.sleep(_STOP_POLL_S)
        self.stopping.set()
        await anyio.sleep(self.task.grace_s)
        for scope in list(self.in_flight.values()):
            scope.cancel()

    def _expired(self) -> bool:
        if self.stopping.is_set():
            return True
        if self.duration_s is None:
            return False
        return (time.perf_counter_ns() - self.start_ns) / 1e9 >= self.duration_s

    # --- load loops --------------------------------------------------------------

    async def _closed_loop(self, tg: anyio.abc.TaskGroup) -> None:
        """``concurrency`` streams per target over that target's own requests, in
        every targets mode: a slow target never holds a fast one's slots, so no target
        ever has more than ``concurrency`` requests in flight. Streams start
        interleaved across targets (slot 0 of every target, then slot 1, ...)."""
        sc = self.scenario
        targets = tuple(_scenario_attr(sc, "target_indices", ()) or ())
        per_target = int(_scenario_attr(sc, "concurrency", 0) or 0)
        planned: dict[int, Iterator[Any]] = {t: iter(sc.requests(target=t)) for t in targets}
        for _ in range(per_target):
            for t in targets:
                tg.start_soon(self._stream, planned[t])

    async def _stream(self, planned: Iterator[Any]) -> None:
        # next() on the shared iterator is synchronous, so the N streams of one event
        # loop never race on it.
        for pr in planned:
            if self._expired():
                return
            await self._request(pr, scheduled_s=None, deadline_ns=None)

    async def _open_loop(self, tg: anyio.abc.TaskGroup) -> None:
        # A semaphore, not a CapacityLimiter: the token is taken by the scheduler and
        # given back by the request task (limiters are per-borrower).
        cap = anyio.Semaphore(self.task.open_loop_cap)
        for pr in self.scenario.requests():
            scheduled = float(pr.scheduled_s or 0.0)
            deadline_ns = self.start_ns + int(scheduled * 1e9)
            if self.duration_s is not None and scheduled >= self.duration_s:
                return
            while True:
                wait_s = (deadline_ns - time.perf_counter_ns()) / 1e9
                if self.stopping.is_set():
                    return
                if wait_s <= 0:
                    break
                with anyio.move_on_after(wait_s):
                    await self.stopping.wait()
            if cap.value < 1 and not self.cap_warned:
                self.cap_warned = True
                self.emit(
                    WorkerWarning(
                        worker_id=self.task.worker_id,
                        message=(
                            f"scenario {self.scenario_name}: {self.task.open_loop_cap} requests"
                            " in flight (the open-loop safety cap); later sends wait and their"
                            " send_delay_s shows it. Lower the rate or use --workers."
                        ),
                        kind="open_loop_cap",
                    )
                )
            await cap.acquire()
            if self.stopping.is_set():
                cap.release()
                return
            tg.start_soon(self._open_request, pr, scheduled, deadline_ns, cap)

    async def _open_request(
        self, pr: Any, scheduled: float, deadline_ns: int, cap: anyio.Semaphore
    ) -> None:
        try:
            await self._request(pr, scheduled_s=scheduled, deadline_ns=deadline_ns)
        finally:
            cap.release()

    # --- one planned request (with its retries) ----------------------------------

    async def _request(
        self, pr: Any, *, scheduled_s: float | None, deadline_ns: int | None
    ) -> None:
        from tokrate.client.request import build_request, new_unique_prefix

        task = self.task
        target = task.targets[pr.target_index]
        prompt = task.prompts[pr.prompt_index]
        retry = self.spec.client.retry
        endpoint = target.endpoint
        attempt = 1
        while True:
            include_usage = (
                self.spec.client.include_usage and endpoint.name not in self.usage_rejected
            )
            req = build_request(
                endpoint,
                target.model,
                prompt,
                self.spec.client,
                include_usage=include_usage,
                max_tokens=self.spec.prompts.max_tokens,
                ignore_eos=self.spec.load.ignore_eos,
                unique_prefix=new_unique_prefix() if self.spec.client.unique_prompts else None,
                api_key=task.api_keys.get(endpoint.name),
            )
            self.emit(
                RequestStarted(
                    worker_id=task.worker_id,
                    scenario=self.scenario_name,
                    request_index=pr.index,
                    target_index=pr.target_index,
                    started_at=time.time(),
                    t0_ns=time.perf_counter_ns(),
                )
            )
            record = await self._send(req, pr, prompt, target, attempt, scheduled_s, deadline_ns)
            self.emit(RequestFinished(record=record))
            if (
                record.status != "error"
                or attempt >= retry.max_attempts
                or record.error_class not in retry.on
                or self.stopping.is_set()
            ):
                return
            attempt += 1
            await self._backoff(record, retry.backoff_s, retry.honour_retry_after)
            if self.stopping.is_set():
                return

    async def _backoff(self, record: RequestRecord, backoff_s: float, honour: bool) -> None:
        wait_s = backoff_s
        retry_after = record.extra.get("retry_after_s") if honour else None
        if isinstance(retry_after, int | float) and math.isfinite(retry_after):
            wait_s = max(wait_s, float(retry_after))
        with anyio.move_on_after(wait_s):
            await self.stopping.wait()

    async def _send(
        self,
        req: Any,
        pr: Any,
        prompt: Any,
        target: Target,
        attempt: int,
        scheduled_s: float | None,
        deadline_ns: int | None,
    ) -> RequestRecord:
        from tokrate.client.result import StreamResult, build_record

        result: Any = None
        partial: list[Any] = []
        started_at = time.time()
        t0_ns = time.perf_counter_ns()
        key = id(partial)
        self.live[key] = (pr.target_index, None)

        def watch(state: Any) -> None:
            self.live[key] = (pr.target_index, state)

        with anyio.CancelScope() as scope:
            self.in_flight[id(scope)] = scope
            try:
                result = await self.client.stream(req, on_partial=partial.append, watch=watch)
            finally:
                self.in_flight.pop(id(scope), None)
                del self.live[key]
        if result is None and partial:
            # Cancelled after the grace period: the client handed over what it had
            # measured (first byte, chunks) with error_class "cancelled".
            result = partial[-1]
        if result is None:
            # Cancelled before the client saw anything: only the engine's own stamps.
            result = StreamResult(
                client=self.spec.client.kind,
                api=req.api,
                endpoint=req.endpoint,
                model=req.model,
                t0_ns=t0_ns,
                started_at=started_at,
                end_ns=time.perf_counter_ns(),
                error_class="cancelled",
                error_message=f"cancelled after the {self.task.grace_s:g} s stop grace period",
            )
        if result.usage_rejected:
            self.usage_rejected.add(target.endpoint.name)
        usage = result.usage
        self.done_tokens[pr.target_index] += (
            usage["completion_tokens"] if usage is not None else len(result.chunk_ns)
        )
        send_delay_s = None
        if deadline_ns is not None:
            send_delay_s = max(0.0, (result.t0_ns - deadline_ns) / 1e9)
        return build_record(
            result,
            run_id=self.task.run_id,
            scenario=self.scenario_name,
            prompt_id=str(getattr(prompt, "id", "")),
            task=str(getattr(prompt, "task", "")),
            request_index=int(pr.index),
            scheduled_s=scheduled_s,
            send_delay_s=send_delay_s,
            warmup=bool(getattr(pr, "warmup", False))
            or (self.warmup_s > 0 and (result.t0_ns - self.start_ns) / 1e9 < self.warmup_s),
            worker=self.task.worker_id,
            node_id=self.node_id,
            concurrency=self.concurrency,
            rate_rps=self.rate_rps,
            # The engine's own attempt count: a client-internal resend without
            # stream_options is the same attempt (extra.usage_rejected says so).
            attempt=attempt,
            input_tokens=getattr(prompt, "input_tokens_est", None),
        )
