"""Per-worker bookkeeping shared by every backend: what started, what finished, and
what a lost worker takes with it.

A backend feeds every event of a worker through :meth:`WorkerLedger.observe` before
handing it to the driver. When the worker dies (process killed, actor or node lost),
:meth:`WorkerLedger.lost_events` turns its started-but-unfinished requests into
``worker_lost`` records and adds one :class:`~tokrate.load.worker.events.WorkerWarning` that says
how much of the scenario's planned load was lost. Records already delivered are never
touched: the ledger only adds.
"""

from __future__ import annotations

import importlib
import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tokrate.errors import unwrap_tokrate_error
from tokrate.load.plan import PlannedRequest, ScenarioPlan
from tokrate.load.worker.events import Emit, Event, RequestFinished, RequestStarted, WorkerWarning
from tokrate.load.worker.stopping import Stop
from tokrate.runfolder.records import RequestRecord

if TYPE_CHECKING:
    from tokrate.load.worker.engine import WorkerTask

__all__ = [
    "PLAN_COUNT_CAP",
    "WorkerEnd",
    "WorkerLedger",
    "driver_error",
    "planned_count",
    "resolve_worker_fn",
    "total_planned",
]

#: Longest shard we count when sizing a loss; a longer (or unbounded, duration-bound)
#: shard is reported as "unknown" rather than iterated for ever.
PLAN_COUNT_CAP = 200_000

#: ``run_worker(task, emit, stop)``: the one function every backend runs per shard.
WorkerFn = Callable[["WorkerTask", Emit, Stop], None]

DEFAULT_WORKER_FN = "tokrate.load.worker.engine:run_worker"


def resolve_worker_fn(ref: str) -> WorkerFn:
    """Import ``"module:function"``. Backends pass worker functions by name so a spawned
    process or a Ray actor imports the same code instead of unpickling a closure."""
    module_name, _, attr = ref.partition(":")
    fn: WorkerFn = getattr(importlib.import_module(module_name), attr)
    return fn


@dataclass(frozen=True, slots=True)
class WorkerEnd:
    """Transport marker: the worker function returned (``error`` None) or raised.

    ``error`` is the exception itself when it pickles, else a RuntimeError carrying its
    text; ``traceback`` is the formatted traceback from the worker's side.
    """

    worker_id: str
    error: BaseException | None = None
    traceback: str = ""


def driver_error(exc: BaseException) -> BaseException:
    """The exception to raise in the driver for one a worker function raised (see
    :func:`tokrate.errors.unwrap_tokrate_error`)."""
    return unwrap_tokrate_error(exc)


def planned_count(scenario: ScenarioPlan) -> int | None:
    """Number of requests a (shard of a) scenario plans, or None when the plan is
    unbounded (duration-bound) or longer than PLAN_COUNT_CAP."""
    if scenario.planned_per_target is None:
        return None  # duration-bound: the count is decided by the clock
    n = sum(1 for _ in itertools.islice(scenario.requests(), PLAN_COUNT_CAP + 1))
    return None if n > PLAN_COUNT_CAP else n


def total_planned(tasks: Sequence[WorkerTask]) -> int | None:
    """Planned requests over all shards of a scenario; None when any is unknown."""
    total = 0
    for task in tasks:
        n = planned_count(task.scenario)
        if n is None:
            return None
        total += n
    return total


@dataclass(slots=True)
class WorkerLedger:
    """Started-but-unfinished requests of one worker in one scenario.

    Invariant: ``in_flight`` holds exactly the RequestStarted events whose
    RequestFinished has not been observed; ``finished`` counts observed finishes.
    """

    task: WorkerTask
    node_id: str = ""
    in_flight: dict[int, RequestStarted] = field(default_factory=dict)
    finished: set[int] = field(default_factory=set)
    done: bool = False

    @property
    def worker_id(self) -> str:
        return str(self.task.worker_id)

    def observe(self, event: Event) -> None:
        """Account one event (call before delivering it)."""
        if isinstance(event, RequestStarted):
            self.in_flight[event.request_index] = event
        elif isinstance(event, RequestFinished):
            self.in_flight.pop(event.record.request_index, None)
            self.finished.add(event.record.request_index)

    def lost_events(self, reason: str, *, scenario_tasks: Sequence[WorkerTask]) -> list[Event]:
        """Events that close the books on a lost worker: one RequestFinished with
        status "error", error_class "worker_lost" per in-flight request, then one
        WorkerWarning. ``scenario_tasks`` are all shards of the scenario, whose planned
        request count (counted only now, when a loss happened) gives the percentage.
        Clears ``in_flight`` and marks the ledger done."""
        scenario_planned = total_planned(scenario_tasks)
        started = dict(self.in_flight)
        records = self._lost_records(started, reason)
        events: list[Event] = [RequestFinished(record=r) for r in records]
        shard_planned = planned_count(self.task.scenario)
        scenario_name = self.task.scenario.name
        if shard_planned is None:
            unsent = "its remaining planned load (duration-bound, count unknown) was not sent"
            share = ""
        else:
            n_unsent = max(0, shard_planned - len(self.finished | set(started)))
            lost = n_unsent + len(set(started) - self.finished)
            unsent = f"{n_unsent} planned requests were never sent"
            share = (
                f" ({lost} of {scenario_planned} planned requests,"
                f" {100.0 * lost / scenario_planned:.1f}% of the scenario's load, lost)"
                if scenario_planned
                else ""
            )
        message = (
            f"worker {self.worker_id} lost in scenario {scenario_name} ({reason}):"
            f" {len(records)} in-flight requests recorded as worker_lost, {unsent}{share};"
            " the other workers went on. Re-run the scenario for full load."
        )
        events.append(WorkerWarning(worker_id=self.worker_id, message=message, kind="worker_lost"))
        self.in_flight.clear()
        self.done = True
        return events

    def _lost_records(self, started: dict[int, RequestStarted], reason: str) -> list[RequestRecord]:
        task = self.task
        sc = task.scenario
        planned = _find_planned(sc.requests(), set(started))
        records = []
        for index in sorted(started):
            ev = started[index]
            pr = planned.get(index)
            target = task.targets[ev.target_index]
            prompt = task.prompts[pr.prompt_index] if pr is not None else None
            records.append(
                RequestRecord(
                    run_id=task.run_id,
                    endpoint=target.endpoint.name,
                    model=target.model.name,
                    scenario=sc.name,
                    prompt_id="" if prompt is None else prompt.id,
                    task="" if prompt is None else prompt.task,
                    request_index=index,
                    started_at=float(ev.started_at),
                    # The driver never saw the worker's clock reading; 0 marks "unknown"
                    # (no latency is derived from a worker_lost record).
                    t0_ns=ev.t0_ns or 0,
                    status="error",
                    scheduled_s=None if pr is None else pr.scheduled_s,
                    error_class="worker_lost",
                    error_message=reason,
                    warmup=pr is not None and pr.warmup,
                    worker=self.worker_id,
                    node_id=self.node_id,
                    api=task.settings.request.api,
                    client=task.settings.client_kind,
                    # The scenario's level, not this shard's share (as the engine
                    # records it), so lost requests group with the rest of the level.
                    concurrency=sc.level_concurrency or sc.concurrency,
                    rate_rps=sc.level_rate_rps or sc.rate_rps,
                )
            )
        return records


def _find_planned(
    requests: Iterable[PlannedRequest], wanted: set[int]
) -> dict[int, PlannedRequest]:
    """The PlannedRequests with the wanted indices (stops as soon as all are found)."""
    found: dict[int, PlannedRequest] = {}
    if not wanted:
        return found
    for pr in itertools.islice(requests, PLAN_COUNT_CAP):
        if pr.index in wanted:
            found[pr.index] = pr
            if len(found) == len(wanted):
                break
    return found
