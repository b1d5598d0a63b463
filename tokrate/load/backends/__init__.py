"""Worker backends: where the shards of a scenario run.

Every backend runs the same function, :func:`tokrate.load.worker.engine.run_worker`, once per
shard (one :class:`~tokrate.load.worker.engine.WorkerTask` each), and delivers every event to the
driver's ``on_event`` callback *in the thread that called* :meth:`Backend.run_scenario`,
as it happens (records stream back while the scenario runs, never only at the end).

- :class:`~tokrate.load.backends.inprocess.InProcessBackend`: ``workers = 1`` (default); the
  shard runs in a thread of the driver process.
- :class:`~tokrate.load.backends.processes.ProcessBackend`: ``--workers N``; N spawned local
  processes, each with its own event loop and connection pool.
- :class:`~tokrate.load.backends.ray.RayBackend`: ``--ray`` / ``[distributed]``; one Ray
  actor per worker, spread over the cluster's nodes.

A worker that dies mid-scenario (process killed, actor or node lost) does not stop the
run: its started-but-unfinished requests become records with status "error" and
error_class "worker_lost", a WorkerWarning says how much planned load was lost, and the
other workers go on. An *exception* raised by run_worker itself is a bug or a
deliberate :class:`~tokrate.errors.TokrateError`; it is re-raised in the driver once
the other shards of the scenario have finished.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from tokrate.load.worker.events import Emit
from tokrate.load.worker.stopping import Stop

if TYPE_CHECKING:
    from tokrate.load.worker.engine import WorkerTask
    from tokrate.runfolder.run_info import NodeInfo

__all__ = ["Backend", "worker_ids"]


@runtime_checkable
class Backend(Protocol):
    """Runs the shards of one scenario at a time.

    ``workers`` is how many shards the caller should cut each scenario into
    (``tokrate.load.plan.shard(plan, backend.workers)``); ``run_scenario`` accepts up to that
    many tasks. ``kind`` is "inprocess", "processes" or "ray" (recorded in run.json).
    """

    @property
    def workers(self) -> int: ...

    @property
    def kind(self) -> str: ...

    @property
    def nodes(self) -> tuple[NodeInfo, ...]:
        """The machines that ran workers so far, each with its wall clock against the
        driver's (run.json ``nodes``; :mod:`tokrate.load.backends.clocks`). Filled by
        :meth:`start`; a replacement worker on a new node adds one."""
        ...

    def start(self) -> None:
        """Bring every worker up (spawn processes, place actors) and wait until each
        is ready; :func:`tokrate.load.backends.selection.open_backend` calls it, so placement and start-up failures surface
        before any run folder exists. Idempotent; run_scenario also replaces workers
        lost in an earlier scenario through it."""
        ...

    def run_scenario(self, tasks: Sequence[WorkerTask], on_event: Emit, stop: Stop) -> None:
        """Run every task concurrently; return when all have ended.

        ``stop``: once set, workers stop scheduling, give in-flight requests their grace
        period and end (cancelled records arrive as events); once aborted, the grace
        period ends at once everywhere.
        Raises: the first exception a worker function raised (after the others end);
        whatever ``on_event`` raises (workers are stopped first).
        """
        ...

    def close(self) -> None:
        """Release workers (processes, actors, a Ray connection this backend opened).
        Idempotent."""
        ...


def worker_ids(n: int) -> tuple[str, ...]:
    """The conventional worker ids ``w0 .. w{n-1}`` (what records carry in ``worker``)."""
    return tuple(f"w{i}" for i in range(n))
