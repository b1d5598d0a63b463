"""The default backend: each shard runs in a thread of the driver process.

run_worker owns its own event loop, so a thread is all it needs; events cross to the
driver thread over a SimpleQueue, so ``on_event`` (the store's writer, progress) always
runs in one thread whatever the backend. Latencies are stamped inside run_worker, so
the hop through the queue adds nothing to any measured number.
"""

from __future__ import annotations

import queue
import threading
import traceback
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tokrate.load.backends._ledger import (
    DEFAULT_WORKER_FN,
    WorkerEnd,
    driver_error,
    resolve_worker_fn,
)
from tokrate.load.backends.clocks import local_nodes
from tokrate.load.worker.events import Emit
from tokrate.load.worker.stopping import Stop

if TYPE_CHECKING:
    from tokrate.load.worker.engine import WorkerTask
    from tokrate.runfolder.run_info import NodeInfo

__all__ = ["InProcessBackend"]

_POLL_S = 0.1


class InProcessBackend:
    """Runs shards in threads of this process. ``workers`` is 1: one event loop is the
    point of this backend; use ProcessBackend for more cores."""

    def __init__(self, *, worker_fn: str = DEFAULT_WORKER_FN) -> None:
        self._worker_fn_ref = worker_fn

    @property
    def workers(self) -> int:
        return 1

    @property
    def kind(self) -> str:
        return "inprocess"

    @property
    def nodes(self) -> tuple[NodeInfo, ...]:
        """This machine: the shard shares the driver's clock."""
        return local_nodes(("w0",))

    def start(self) -> None:
        """Nothing to start: shards run in threads created per scenario."""

    def run_scenario(self, tasks: Sequence[WorkerTask], on_event: Emit, stop: Stop) -> None:
        """See :meth:`tokrate.load.backends.Backend.run_scenario`."""
        fn = resolve_worker_fn(self._worker_fn_ref)
        events: queue.SimpleQueue[Any] = queue.SimpleQueue()

        def target(task: Any) -> None:
            try:
                fn(task, events.put, stop)
            except BaseException as exc:  # re-raised in the driver thread below
                events.put(WorkerEnd(str(task.worker_id), exc, traceback.format_exc()))
            else:
                events.put(WorkerEnd(str(task.worker_id)))

        threads = [
            threading.Thread(target=target, args=(t,), name=f"tokrate-{t.worker_id}", daemon=True)
            for t in tasks
        ]
        for th in threads:
            th.start()
        try:
            first_error, interrupted = _drain(events, len(threads), on_event, stop)
        except BaseException:
            # on_event failed or a second Ctrl-C: stop the shards so their threads do
            # not keep loading the endpoint behind our back.
            stop.set()
            for th in threads:
                th.join(timeout=30.0)
            raise
        for th in threads:
            th.join()
        if interrupted:
            raise KeyboardInterrupt
        if first_error is not None:
            raise driver_error(first_error)

    def close(self) -> None:
        """Nothing to release."""


def _drain(
    events: queue.SimpleQueue[Any], pending: int, on_event: Emit, stop: Stop
) -> tuple[BaseException | None, bool]:
    """Hand events to ``on_event`` until every shard ended. Returns the first shard
    error and whether a (first) Ctrl-C arrived meanwhile."""
    first_error: BaseException | None = None
    interrupted = False
    while pending:
        try:
            ev = events.get(timeout=_POLL_S)
        except queue.Empty:
            continue
        except KeyboardInterrupt:
            # First Ctrl-C: stop like `stop` was set and keep draining, so the
            # cancelled records still reach the store. A second one aborts.
            if interrupted:
                raise
            interrupted = True
            stop.set()
            continue
        if isinstance(ev, WorkerEnd):
            pending -= 1
            if ev.error is not None and first_error is None:
                first_error = ev.error
            continue
        on_event(ev)
    return first_error, interrupted
