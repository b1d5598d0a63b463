"""``--ray``: one Ray actor per worker, spread over the cluster's nodes.

Each actor runs :func:`tokrate.load.worker.engine.run_worker` for its shard in a thread of its own
process and measures with that node's monotonic clock; only durations travel, so no
cross-machine clock offset enters a latency. Every record is stamped with the Ray node
id of the actor that measured it (``node_id``). When the first actor on a node is
ready, the driver measures that node's wall clock against its own
(:mod:`tokrate.load.backends.clocks`); the actors there subtract the offset (when it is
measurable) from every ``started_at`` before it leaves the node, so records of all
nodes share the driver's wall clock, which timelines and the aggregate window use.

Records stream back by long polling: the driver keeps one ``poll`` call outstanding per
actor; the actor answers as soon as it has events (or after ``_POLL_WAIT_S`` with none),
so a record reaches the driver within one round trip of its request ending. When an
actor or its node dies, the outstanding ``poll`` fails with a RayActorError: the
driver books the worker as lost (its in-flight requests become ``worker_lost`` records,
a WorkerWarning sizes the loss) and the other actors go on. Events the actor had
buffered but not yet returned are the only thing a death can take (at most one poll
interval's worth); every record already returned stays recorded.

Ray is an optional extra; importing this module never imports Ray.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import socket
import threading
import time
import traceback
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tokrate.errors import ConfigError, UsageError
from tokrate.load.backends import worker_ids
from tokrate.load.backends._ledger import (
    DEFAULT_WORKER_FN,
    WorkerEnd,
    WorkerLedger,
    driver_error,
    resolve_worker_fn,
)
from tokrate.load.backends.clocks import measure_clock
from tokrate.load.worker.events import Emit, RequestFinished, RequestStarted
from tokrate.load.worker.stopping import Stop
from tokrate.runfolder.run_info import NodeInfo
from tokrate.spec.types import DistributedSpec

if TYPE_CHECKING:
    from tokrate.load.worker.engine import WorkerTask

__all__ = ["INSTALL_HINT", "RayBackend", "import_ray"]

INSTALL_HINT = "pip install 'tokrate[ray]'"

#: Seconds an actor holds a poll open waiting for events.
_POLL_WAIT_S = 0.2
#: Seconds to wait for all actors to be placed and import the engine.
_START_TIMEOUT_S = 180.0
#: Seconds the driver's ray.wait blocks per round.
_WAIT_S = 0.1


def import_ray() -> Any:
    """Import Ray or raise UsageError with the install command (one line)."""
    try:
        import ray
    except ImportError:
        raise UsageError(f"--ray needs Ray, which is not installed: {INSTALL_HINT}") from None
    return ray


class _WorkerActorImpl:
    """The body of the Ray actor (wrapped with ``ray.remote`` at first use, so this
    module imports without Ray). Threaded (max_concurrency > 1): ``poll`` and ``stop``
    run while the shard runs in its own thread."""

    def __init__(self, fn_ref: str) -> None:
        import ray

        self._fn = resolve_worker_fn(fn_ref)
        self._node_id: str = ray.get_runtime_context().get_node_id()
        self._cond = threading.Condition()
        self._buffer: list[Any] = []
        self._stop = Stop()
        self._thread: threading.Thread | None = None
        self._rewrite_node = False
        self._shift_s = 0.0

    def ready(self) -> dict[str, Any]:
        """Where this actor runs: Ray node id, hostname, pid."""
        return {"node_id": self._node_id, "hostname": socket.gethostname(), "pid": os.getpid()}

    def clock(self) -> float:
        """This node's wall clock (one reading for the driver's offset estimate)."""
        return time.time()

    def run(self, task: Any, shift_s: float = 0.0) -> None:
        """Start the shard in a thread and return at once; results come via poll().
        ``shift_s`` is subtracted from every ``started_at`` this shard emits (this
        node's clock offset against the driver's)."""
        if self._thread is not None:
            # The previous shard's thread pushed its WorkerEnd as its last act; the
            # driver may be here before that thread has fully exited.
            self._thread.join()
        self._stop = Stop()
        self._shift_s = shift_s
        # Records name the Ray node that measured them (hostnames need not be unique
        # across a cluster); the engine stamps task.node_id, else we rewrite records.
        self._rewrite_node = not _has_field(task, "node_id")
        if not self._rewrite_node:
            task = dataclasses.replace(task, node_id=self._node_id)
        self._thread = threading.Thread(
            target=self._run, args=(task,), name=f"tokrate-{task.worker_id}", daemon=True
        )
        self._thread.start()

    def _run(self, task: Any) -> None:
        try:
            self._fn(task, self._emit, self._stop)
        except BaseException as exc:  # shipped to the driver, re-raised there
            self._push(WorkerEnd(str(task.worker_id), _picklable(exc), traceback.format_exc()))
        else:
            self._push(WorkerEnd(str(task.worker_id)))

    def _emit(self, event: Any) -> None:
        shift = self._shift_s
        if isinstance(event, RequestFinished) and (self._rewrite_node or shift):
            record = event.record
            if self._rewrite_node:
                record = dataclasses.replace(record, node_id=self._node_id)
            if shift:
                record = dataclasses.replace(record, started_at=record.started_at - shift)
            event = dataclasses.replace(event, record=record)
        elif shift and isinstance(event, RequestStarted):
            event = dataclasses.replace(event, started_at=event.started_at - shift)
        self._push(event)

    def _push(self, event: Any) -> None:
        with self._cond:
            self._buffer.append(event)
            self._cond.notify_all()

    def poll(self, wait_s: float) -> list[Any]:
        """Every event since the last poll; waits up to ``wait_s`` for the first."""
        with self._cond:
            self._cond.wait_for(lambda: bool(self._buffer), timeout=wait_s)
            out, self._buffer = self._buffer, []
        return out

    def stop(self) -> None:
        self._stop.set()

    def abort(self) -> None:
        self._stop.abort()


def _has_field(obj: Any, name: str) -> bool:
    return dataclasses.is_dataclass(obj) and any(f.name == name for f in dataclasses.fields(obj))


def _picklable(exc: BaseException) -> BaseException:
    import pickle

    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc


_ACTOR_CLASS: Any = None


def _actor_class(ray: Any) -> Any:
    global _ACTOR_CLASS
    if _ACTOR_CLASS is None:
        _ACTOR_CLASS = ray.remote(_WorkerActorImpl)
    return _ACTOR_CLASS


class RayBackend:
    """One actor per worker on a Ray cluster.

    ``actors`` are the live actor handles (index = worker slot), ``worker_nodes`` the
    Ray node id each runs on, ``nodes`` every node that ran a worker with its clock
    offset. Actors are created on first use, reused across scenarios, and replaced when
    one dies (Ray places the replacement wherever resources allow).
    """

    def __init__(
        self,
        workers: int,
        *,
        num_cpus: float = 1.0,
        resources: dict[str, float] | None = None,
        worker_fn: str = DEFAULT_WORKER_FN,
        owns_connection: bool = False,
    ) -> None:
        if workers < 1:
            raise ConfigError(f"distributed.workers must be >= 1, got {workers}")
        self._ray = import_ray()
        self._n = workers
        self._num_cpus = num_cpus
        self._resources = dict(resources or {})
        self._fn_ref = worker_fn
        self._owns = owns_connection
        self._actors: list[Any] = [None] * workers
        self._nodes: list[str] = [""] * workers
        #: Ray node id -> the node and its clock, in the order nodes were first used.
        self._node_info: dict[str, NodeInfo] = {}
        self._closed = False

    @classmethod
    def connect(cls, spec: DistributedSpec, *, worker_fn: str = DEFAULT_WORKER_FN) -> RayBackend:
        """Connect to the cluster ``spec.ray`` names ("auto": the local node's cluster
        or RAY_ADDRESS; "local": start a private single-node cluster;
        "ray://host:10001": a remote head via Ray Client). An already initialised Ray
        (e.g. a notebook's ray.init) is used as is and left running at close().

        Raises UsageError when Ray is not installed, ConfigError when the cluster
        cannot be reached.
        """
        ray = import_ray()
        owns = False
        if not ray.is_initialized():
            # Worker output stays on the nodes: actors ship their exceptions back.
            options: dict[str, Any] = {"log_to_driver": False, "logging_level": "WARNING"}
            if spec.ray == "local":
                # A private cluster on this machine: make room for every worker even
                # on a small box (oversubscribing a core is the user's explicit ask).
                need = math.ceil(spec.workers * spec.num_cpus_per_worker)
                options["num_cpus"] = max(os.cpu_count() or 1, need)
                options["include_dashboard"] = False
                # Private means private: its services listen on loopback only.
                options["_node_ip_address"] = "127.0.0.1"
            if spec.ray != "local":
                _probe(spec.ray)
            try:
                ray.init(address=spec.ray, **options)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise ConfigError(
                    f"distributed.ray: cannot connect to Ray at {spec.ray!r}: {first}"
                ) from None
            owns = True
        return cls(
            spec.workers,
            num_cpus=spec.num_cpus_per_worker,
            resources=dict(spec.resources),
            worker_fn=worker_fn,
            owns_connection=owns,
        )

    @property
    def workers(self) -> int:
        return self._n

    @property
    def kind(self) -> str:
        return "ray"

    @property
    def actors(self) -> tuple[Any, ...]:
        return tuple(self._actors)

    @property
    def worker_nodes(self) -> tuple[str, ...]:
        """The Ray node id each worker slot's current actor runs on."""
        return tuple(self._nodes)

    @property
    def nodes(self) -> tuple[NodeInfo, ...]:
        """Every node that ran a worker so far, with its clock against the driver's."""
        return tuple(self._node_info.values())

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        """Create missing actors (SPREAD over nodes) and wait until each imported the
        engine, so the shards of a scenario start together.

        Raises ConfigError when the actors cannot be placed in time (the cluster lacks
        the CPUs/resources asked for)."""
        ray = self._ray
        cls = _actor_class(ray)
        fresh = []
        for i, actor in enumerate(self._actors):
            if actor is None:
                self._actors[i] = cls.options(
                    num_cpus=self._num_cpus,
                    resources=self._resources or None,
                    scheduling_strategy="SPREAD",
                    max_concurrency=4,
                    name=None,
                ).remote(self._fn_ref)
                fresh.append(i)
        if not fresh:
            return
        refs = {self._actors[i].ready.remote(): i for i in fresh}
        ready, not_ready = ray.wait(list(refs), num_returns=len(refs), timeout=_START_TIMEOUT_S)
        if not_ready:
            raise ConfigError(
                f"distributed: {len(not_ready)} of {self._n} Ray workers could not be placed in"
                f" {_START_TIMEOUT_S:.0f} s (each asks num_cpus={self._num_cpus}"
                f"{', resources=' + repr(self._resources) if self._resources else ''});"
                " lower distributed.workers or num_cpus_per_worker"
            )
        info_by_slot: dict[int, dict[str, Any]] = {}
        for ref in ready:
            try:
                info = ray.get(ref)
            except ray.exceptions.RayError as exc:
                # Typically the node lacks tokrate (or a different version of it).
                first = str(exc).strip().splitlines()[-1][:200] if str(exc).strip() else ""
                raise ConfigError(
                    f"distributed: a Ray worker failed to start ({type(exc).__name__}: {first});"
                    f" install the same tokrate on every node ({INSTALL_HINT})"
                ) from None
            info_by_slot[refs[ref]] = info
            self._nodes[refs[ref]] = str(info["node_id"])
        names = worker_ids(self._n)
        addresses = (
            self._node_addresses()
            if any(str(info_by_slot[i]["node_id"]) not in self._node_info for i in fresh)
            else {}
        )
        for i in fresh:
            info = info_by_slot[i]
            self._place(i, names[i], {**info, "address": addresses.get(str(info["node_id"]))})

    def _node_addresses(self) -> dict[str, str]:
        """Ray node id -> the address the node registered with (its raylet's)."""
        try:
            nodes = self._ray.nodes()
        except Exception:  # an address is for people reading run.json; never fatal
            return {}
        return {
            str(n["NodeID"]): str(n["NodeManagerAddress"])
            for n in nodes
            if n.get("NodeID") and n.get("NodeManagerAddress")
        }

    def _place(self, slot: int, worker_id: str, info: dict[str, Any]) -> None:
        """Book worker ``slot`` on its node; a node seen for the first time gets its
        clock measured through this actor."""
        node_id = str(info["node_id"])
        node = self._node_info.get(node_id)
        if node is None:
            actor = self._actors[slot]
            estimate = measure_clock(lambda: float(self._ray.get(actor.clock.remote())), time.time)
            node = NodeInfo(
                node_id=node_id,
                hostname=str(info.get("hostname") or ""),
                address=str(info.get("address") or "") or None,
                clock_offset_s=round(estimate.offset_s, 6),
                clock_uncertainty_s=round(estimate.uncertainty_s, 6),
                clock_round_trips=estimate.round_trips,
                started_at_shift_s=round(estimate.shift_s, 6),
            )
        if worker_id not in node.workers:
            node = dataclasses.replace(node, workers=(*node.workers, worker_id))
        self._node_info[node_id] = node

    def close(self) -> None:
        """Kill the actors; shut Ray down if this backend connected it. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for actor in self._actors:
            if actor is not None:
                with contextlib.suppress(Exception):
                    self._ray.kill(actor)
        self._actors = [None] * self._n
        if self._owns:
            self._ray.shutdown()

    # -- one scenario ----------------------------------------------------------------

    def run_scenario(self, tasks: Sequence[WorkerTask], on_event: Emit, stop: Stop) -> None:
        """See :meth:`tokrate.load.backends.Backend.run_scenario`. ``tasks[i]`` runs on
        actor i."""
        ray = self._ray
        if len(tasks) > self._n:
            raise ValueError(f"{len(tasks)} tasks for {self._n} workers")
        self.start()
        ledgers = {i: WorkerLedger(t, node_id=self._nodes[i]) for i, t in enumerate(tasks)}
        # run() returns once the shard's thread started; the polls below carry events.
        for i, task in enumerate(tasks):
            self._actors[i].run.remote(task, self._shift(i))
        polls = {self._actors[i].poll.remote(_POLL_WAIT_S): i for i in ledgers}
        active = dict(ledgers)
        first_error: BaseException | None = None
        stop_sent = abort_sent = False
        interrupted = False
        try:
            while active:
                try:
                    stop_sent, abort_sent = self._forward_stop(stop, active, stop_sent, abort_sent)
                    ready, _ = ray.wait(list(polls), num_returns=1, timeout=_WAIT_S)
                    for ref in ready:
                        i = polls.pop(ref)
                        err = self._deliver(i, ref, active, on_event, tasks)
                        if err is not None and first_error is None:
                            first_error = err
                        if i in active:
                            polls[self._actors[i].poll.remote(_POLL_WAIT_S)] = i
                except KeyboardInterrupt:
                    if interrupted:
                        raise
                    interrupted = True
                    stop.set()
        except BaseException:
            stop.set()
            for i in active:
                with contextlib.suppress(Exception):
                    self._actors[i].stop.remote()
            raise
        if interrupted:
            raise KeyboardInterrupt
        if first_error is not None:
            raise driver_error(first_error)

    def _shift(self, slot: int) -> float:
        node = self._node_info.get(self._nodes[slot])
        return node.started_at_shift_s if node is not None else 0.0

    def _forward_stop(
        self, stop: Stop, active: dict[int, WorkerLedger], stop_sent: bool, abort_sent: bool
    ) -> tuple[bool, bool]:
        """Tell the live actors once each that the driver stopped, or aborted."""
        if stop.is_set() and not stop_sent:
            stop_sent = True
            for i in active:
                self._actors[i].stop.remote()
        if stop.aborted and not abort_sent:
            abort_sent = True
            for i in active:
                self._actors[i].abort.remote()
        return stop_sent, abort_sent

    def _deliver(
        self,
        i: int,
        ref: Any,
        active: dict[int, WorkerLedger],
        on_event: Any,
        tasks: Sequence[Any],
    ) -> BaseException | None:
        """Hand one poll's events to the driver; book the worker lost when its actor
        died. Returns the worker function's exception, if it raised."""
        ray = self._ray
        ledger = active[i]
        try:
            events = ray.get(ref)
        except _actor_errors(ray) as exc:
            del active[i]
            node = self._node_info.get(self._nodes[i])
            reason = _death_reason(exc, node.label if node is not None else self._nodes[i][:12])
            for ev in ledger.lost_events(reason, scenario_tasks=tasks):
                on_event(ev)
            with contextlib.suppress(Exception):
                ray.kill(self._actors[i])
            self._actors[i] = None  # replaced at the next scenario's start()
            return None
        for ev in events:
            if isinstance(ev, WorkerEnd):
                del active[i]
                ledger.done = True
                return ev.error
            ledger.observe(ev)
            on_event(ev)
        return None


def _probe(address: str | None) -> None:
    """Fail fast, in one line, when nothing listens where ``address`` points: Ray's own
    ray.init retries a dead address (e.g. a stale "auto" record of a cluster that is
    gone) for minutes. Raises ConfigError; skips the check where the address cannot
    be resolved without Ray internals."""
    if not address:
        return
    if address.startswith("ray://"):
        host_port = address.removeprefix("ray://").split("/", 1)[0]
    elif address == "auto":
        try:
            from ray._private.services import canonicalize_bootstrap_address_or_die
        except ImportError:  # pragma: no cover - a Ray without this helper
            return
        try:
            host_port = canonicalize_bootstrap_address_or_die("auto")
        except ConnectionError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise ConfigError(
                f"distributed.ray: 'auto' found no running Ray cluster ({first[:160]});"
                " start one with `ray start --head` or give --ray ray://HEAD:10001"
            ) from None
    else:
        host_port = address
    host, _, port = host_port.rpartition(":")
    if not host or not port.isdigit():
        return  # let ray.init report the malformed address
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=5.0).close()
    except OSError as exc:
        raise ConfigError(
            f"distributed.ray: no Ray cluster answers at {host_port} (from {address!r}:"
            f" {exc.strerror or type(exc).__name__}); start one with `ray start --head`"
            " or check the address"
        ) from None


def _actor_errors(ray: Any) -> tuple[type[BaseException], ...]:
    """Exceptions that mean "this actor (or its node) is gone"."""
    names = ("RayActorError", "ActorDiedError", "ActorUnavailableError", "NodeDiedError")
    return tuple(getattr(ray.exceptions, n) for n in names if hasattr(ray.exceptions, n))


def _death_reason(exc: BaseException, node: str) -> str:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    kind = type(exc).__name__
    where = f" on node {node}" if node else ""
    return f"Ray actor{where} died ({kind}{': ' + first[:160] if first else ''})"
