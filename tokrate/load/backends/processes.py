"""``--workers N``: N local worker processes, each with its own event loop and pool.

Processes are started with the "spawn" context (no forked copy of the driver's threads,
event loop or open files) once, kept for every scenario of the run, and replaced when
one dies. Each has two simplex pipes:

- control (driver -> worker): ``("run", task)``, ``("stop",)``, ``("abort",)`` (end the
  grace period), ``("close",)``;
- events (worker -> driver): pickled lists of events, sent by one sender thread that
  drains whatever run_worker emitted since the last send, so records travel as they
  finish in small batches (a batch is whatever piled up while the previous one was
  being written) and the measuring event loop never blocks on the pipe.

A pipe write completes into the kernel buffer before ``send`` returns, so a worker
killed with SIGKILL loses only events it had not yet sent; the driver reads the pipe
to its end before it books the worker as lost (ledger: worker_lost records plus a
WorkerWarning). Workers ignore SIGINT: Ctrl-C reaches the driver, which forwards a
stop, so in-flight requests end as "cancelled" records instead of vanishing. A worker
whose driver dies (control pipe at EOF) aborts at once and exits: it sends nothing
after the driver's death that could not be recorded.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection as mpc
import os
import pickle
import queue
import signal
import threading
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tokrate.load.backends import worker_ids
from tokrate.load.backends._ledger import (
    DEFAULT_WORKER_FN,
    WorkerEnd,
    WorkerLedger,
    driver_error,
    resolve_worker_fn,
)
from tokrate.load.backends.clocks import local_nodes
from tokrate.load.worker.events import Emit
from tokrate.load.worker.stopping import Stop

if TYPE_CHECKING:
    from tokrate.load.worker.engine import WorkerTask
    from tokrate.runfolder.run_info import NodeInfo

__all__ = ["ProcessBackend"]

_POLL_S = 0.1
#: Seconds a new worker may take to import the engine and report ready.
_START_TIMEOUT_S = 120.0
#: Seconds close() waits for a worker to exit before terminating it.
_CLOSE_TIMEOUT_S = 10.0


class _Ready:
    """First message of every worker: it imported the worker function and waits."""

    def __init__(self, pid: int) -> None:
        self.pid = pid


# --- worker side -------------------------------------------------------------------


def _child_main(ctrl: mpc.Connection, events: mpc.Connection, fn_ref: str) -> None:
    """Entry point of a worker process: run tasks from ``ctrl`` until told to close."""
    # The driver owns Ctrl-C and a terminal hang-up (both reach the whole process
    # group); it forwards a stop, so in-flight requests still get recorded.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    outbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
    closing = object()

    def sender() -> None:
        # The only writer of `events`: blocks for one item, then takes everything
        # that piled up meanwhile, so batches grow with load and stay small when idle.
        while True:
            batch = [outbox.get()]
            with contextlib.suppress(queue.Empty):
                while len(batch) < 4096:
                    batch.append(outbox.get_nowait())
            last = batch[-1] is closing
            if last:
                batch.pop()
            if batch:
                try:
                    events.send_bytes(pickle.dumps(batch, pickle.HIGHEST_PROTOCOL))
                except (BrokenPipeError, OSError):
                    return  # the driver is gone; nothing left to report to
            if last:
                return

    send_thread = threading.Thread(target=sender, name="tokrate-sender", daemon=True)
    send_thread.start()
    fn = resolve_worker_fn(fn_ref)
    outbox.put(_Ready(os.getpid()))
    try:
        while True:
            try:
                msg = ctrl.recv()
            except (EOFError, OSError):
                break  # driver died or closed us
            if msg[0] == "close":
                break
            if msg[0] == "run" and not _run_one(fn, msg[1], ctrl, outbox):
                break
    finally:
        outbox.put(closing)
        send_thread.join(timeout=_CLOSE_TIMEOUT_S)


def _run_one(fn: Any, task: Any, ctrl: mpc.Connection, outbox: queue.SimpleQueue[Any]) -> bool:
    """Run one shard, forwarding stop requests; False when the driver asked to close.

    The WorkerEnd marker is queued only after the runner thread ended and this loop
    stopped reading ``ctrl``: the driver sends the next "run" as soon as it sees the
    marker, and that message must reach the main loop, not this one.
    """
    stop = Stop()
    keep_open = True
    outcome: list[WorkerEnd] = []

    def runner() -> None:
        try:
            fn(task, outbox.put, stop)
        except BaseException as exc:  # shipped to the driver, re-raised there
            outcome.append(WorkerEnd(str(task.worker_id), _picklable(exc), traceback.format_exc()))

    th = threading.Thread(target=runner, name=f"tokrate-{task.worker_id}", daemon=True)
    th.start()
    while th.is_alive():
        try:
            if not ctrl.poll(_POLL_S):
                continue
            msg = ctrl.recv()
        except (EOFError, OSError):
            # The driver died (its end of the pipe closed): nothing this worker measures
            # from now on could reach records.jsonl, so stop at once (no grace period,
            # nothing new sent) rather than keep loading the endpoint unrecorded.
            stop.set()
            stop.abort()
            break
        if msg[0] in ("stop", "close"):
            stop.set()
            keep_open = keep_open and msg[0] != "close"
        elif msg[0] == "abort":
            stop.abort()
    else:
        th.join()
        outbox.put(outcome[0] if outcome else WorkerEnd(str(task.worker_id)))
        return keep_open
    th.join(timeout=_CLOSE_TIMEOUT_S)
    return False


def _picklable(exc: BaseException) -> BaseException:
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc


# --- driver side -------------------------------------------------------------------


@dataclass(slots=True)
class _Worker:
    index: int
    process: Any  # multiprocessing.context.SpawnProcess
    ctrl: mpc.Connection
    events: mpc.Connection
    pid: int = 0


class ProcessBackend:
    """N spawned worker processes on this machine.

    ``pids`` lists the live workers' process ids (for diagnostics and fault tests).
    Not thread-safe: one driver thread calls run_scenario and close.
    """

    def __init__(self, workers: int, *, worker_fn: str = DEFAULT_WORKER_FN) -> None:
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self._n = workers
        self._fn_ref = worker_fn
        self._ctx = multiprocessing.get_context("spawn")
        self._slots: list[_Worker | None] = [None] * workers
        self._closed = False

    @property
    def workers(self) -> int:
        return self._n

    @property
    def kind(self) -> str:
        return "processes"

    @property
    def nodes(self) -> tuple[NodeInfo, ...]:
        """This machine: every worker process shares the driver's clock."""
        return local_nodes(worker_ids(self._n))

    @property
    def pids(self) -> tuple[int, ...]:
        return tuple(w.pid for w in self._slots if w is not None)

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        """Start (or replace dead) workers and wait until each has imported the engine,
        so the shards of a scenario start together. Raises RuntimeError when a worker
        does not come up within a generous timeout."""
        if self._closed:
            raise RuntimeError("backend is closed")
        fresh = []
        for i, slot in enumerate(self._slots):
            if slot is not None and slot.process.is_alive():
                continue
            if slot is not None:
                self._discard(slot)
            fresh.append(self._spawn(i))
        deadline = time.monotonic() + _START_TIMEOUT_S
        for w in fresh:
            remaining = max(0.0, deadline - time.monotonic())
            if not w.events.poll(remaining):
                raise RuntimeError(
                    f"worker process {w.index} did not start in {_START_TIMEOUT_S:.0f} s"
                )
            try:
                batch = pickle.loads(w.events.recv_bytes())
            except EOFError:
                raise RuntimeError(
                    f"worker process {w.index} exited while starting (code {w.process.exitcode})"
                ) from None
            ready = batch[0]
            assert isinstance(ready, _Ready), "first worker message must be _Ready"
            w.pid = ready.pid
            self._slots[w.index] = w

    def _spawn(self, index: int) -> _Worker:
        ctrl_recv, ctrl_send = self._ctx.Pipe(duplex=False)
        ev_recv, ev_send = self._ctx.Pipe(duplex=False)
        proc = self._ctx.Process(
            target=_child_main,
            args=(ctrl_recv, ev_send, self._fn_ref),
            name=f"tokrate-worker-{index}",
            daemon=True,
        )
        proc.start()
        # Close our copies of the child's ends, so its death shows as EOF here.
        ctrl_recv.close()
        ev_send.close()
        return _Worker(index, proc, ctrl_send, ev_recv)

    def _discard(self, w: _Worker) -> None:
        for conn in (w.ctrl, w.events):
            with contextlib.suppress(OSError):
                conn.close()
        w.process.join(timeout=1.0)
        if w.process.is_alive():
            w.process.kill()
            w.process.join(timeout=5.0)
        self._slots[w.index] = None

    def close(self) -> None:
        """Ask every worker to exit, then terminate stragglers. Idempotent."""
        if self._closed:
            return
        self._closed = True
        live = [w for w in self._slots if w is not None]
        for w in live:
            with contextlib.suppress(OSError):
                w.ctrl.send(("close",))
        deadline = time.monotonic() + _CLOSE_TIMEOUT_S
        for w in live:
            w.process.join(timeout=max(0.0, deadline - time.monotonic()))
            self._discard(w)

    # -- one scenario ----------------------------------------------------------------

    def run_scenario(self, tasks: Sequence[WorkerTask], on_event: Emit, stop: Stop) -> None:
        """See :meth:`tokrate.load.backends.Backend.run_scenario`. ``tasks[i]`` runs on
        worker process i."""
        if len(tasks) > self._n:
            raise ValueError(f"{len(tasks)} tasks for {self._n} workers")
        self.start()
        ledgers: dict[int, WorkerLedger] = {}
        for i, task in enumerate(tasks):
            w = self._slots[i]
            assert w is not None
            ledgers[i] = WorkerLedger(task, node_id=_hostname())
            # A worker that died since start() is booked as lost by the loop below.
            with contextlib.suppress(OSError):
                w.ctrl.send(("run", task))
        first_error: BaseException | None = None
        stop_sent = abort_sent = False
        interrupted = False
        active = dict(ledgers)
        try:
            while active:
                try:
                    if stop.is_set() and not stop_sent:
                        stop_sent = True
                        self._broadcast(("stop",), active)
                    if stop.aborted and not abort_sent:
                        abort_sent = True
                        self._broadcast(("abort",), active)
                    err = self._pump(active, on_event, tasks)
                    if err is not None and first_error is None:
                        first_error = err
                except KeyboardInterrupt:
                    # First Ctrl-C acts like `stop` and keeps draining so cancelled
                    # records still arrive; a second one aborts.
                    if interrupted:
                        raise
                    interrupted = True
                    stop.set()
        except BaseException:
            stop.set()
            self._broadcast(("stop",), active)
            self.close()
            raise
        if interrupted:
            raise KeyboardInterrupt
        if first_error is not None:
            raise driver_error(first_error)

    def _broadcast(self, msg: tuple[Any, ...], active: dict[int, WorkerLedger]) -> None:
        for i in active:
            w = self._slots[i]
            if w is not None:
                with contextlib.suppress(OSError):
                    w.ctrl.send(msg)

    def _pump(
        self, active: dict[int, WorkerLedger], on_event: Any, tasks: Sequence[Any]
    ) -> BaseException | None:
        """Wait up to _POLL_S for any worker pipe or death; deliver what arrived.
        Removes finished or lost workers from ``active``. Returns a worker's exception."""
        by_conn: dict[Any, int] = {}
        for i in active:
            w = self._slots[i]
            assert w is not None
            by_conn[w.events] = i
            by_conn[w.process.sentinel] = i
        error: BaseException | None = None
        for ready in mpc.wait(list(by_conn), timeout=_POLL_S):
            i = by_conn[ready]
            if i not in active:
                continue  # both its pipe and its sentinel fired this round
            w = self._slots[i]
            assert w is not None
            ledger = active[i]
            # Read what is there; after a death read to EOF so nothing sent is lost.
            dead = ready is w.process.sentinel
            end = self._drain(w, ledger, on_event, to_eof=dead)
            if end is None and (dead or not w.process.is_alive()):
                end = self._drain(w, ledger, on_event, to_eof=True)
            if end is not None:
                del active[i]
                ledger.done = True
                if end.error is not None:
                    error = end.error
                continue
            if dead or not w.process.is_alive():
                del active[i]
                w.process.join(timeout=1.0)  # reap it, so exitcode is known
                for ev in ledger.lost_events(
                    f"worker process {w.pid} {_exit_text(w.process.exitcode)}",
                    scenario_tasks=tasks,
                ):
                    on_event(ev)
                self._discard(w)
        return error

    def _drain(
        self, w: _Worker, ledger: WorkerLedger, on_event: Any, *, to_eof: bool
    ) -> WorkerEnd | None:
        """Deliver every batch waiting on the pipe (all of them, up to EOF, when
        ``to_eof``); returns the WorkerEnd marker when it arrived."""
        end: WorkerEnd | None = None
        while True:
            try:
                if not w.events.poll(0):
                    if not to_eof:
                        break
                    # A dead writer shows as readable-EOF; nothing readable means a
                    # live writer, so stop here.
                    if w.process.is_alive():
                        break
                    if not w.events.poll(0.05):
                        break
                data = w.events.recv_bytes()
            except (EOFError, OSError):
                break
            for ev in pickle.loads(data):
                if isinstance(ev, WorkerEnd):
                    end = ev
                    continue
                if isinstance(ev, _Ready):
                    continue
                ledger.observe(ev)
                on_event(ev)
            if end is not None:
                break
        return end


def _exit_text(code: int | None) -> str:
    if code is None:
        return "stopped answering"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _hostname() -> str:
    import socket

    return socket.gethostname()
