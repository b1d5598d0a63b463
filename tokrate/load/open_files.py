"""Enough file descriptors for the connections a run plans, checked before the load.

Every stream holds one socket, so a process that runs N streams needs N descriptors
plus what the interpreter, its libraries and the pipes to its workers and to the
simulator hold (:data:`BASE_FDS`). With too few, connections fail with EMFILE in the
middle of the load (the client records those requests as ``not_sent``, never as the
server's ``connect`` errors: tokrate.client.failures). So before anything is sent,
:func:`ensure_open_files` compares ``RLIMIT_NOFILE`` with what the plan needs in each
process that sends (the driver, or each ``--workers`` process, which inherits the
limit; ``"auto"`` counted as the backend will count it): the soft limit is raised to
the hard one when it is short (the soft limit is only a default; any process may
raise it to the hard one), and a closed-loop sweep that needs more than the hard
limit allows is refused in one line naming ``ulimit -n``. An open loop (in flight is what the server's speed makes it) and a
capacity search (which may stop far below its highest level) only get the raise.
Ray workers run under their own node's limits and are not checked here.
"""

from __future__ import annotations

import math
from typing import Final

from tokrate.errors import ConfigError
from tokrate.load.backends.selection import auto_workers
from tokrate.load.plan import Plan
from tokrate.spec.types import RunSpec

__all__ = ["BASE_FDS", "ensure_open_files", "planned_streams"]

#: Descriptors a measuring process holds besides its connections (measured: ~40 after
#: a run's imports, with the simulator's and workers' pipes), with room to spare.
BASE_FDS: Final = 64


def planned_streams(plan: Plan, workers: int) -> int:
    """The most streams one sending process holds at once in a closed-loop sweep
    (streams of a scenario spread over ``workers`` processes; only those with a
    request to send are started, ``streams_per_target``); 0 without one."""
    streams = [
        sc.streams_per_target * len(sc.target_indices)
        for sc in plan.scenarios
        if sc.mode == "closed"
    ]
    return math.ceil(max(streams, default=0) / max(1, workers))


def ensure_open_files(spec: RunSpec, plan: Plan) -> None:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard one when the run may need more
    than it allows (module doc). Raises ConfigError when a closed-loop sweep needs
    more than the hard limit (or the raise is refused)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not a POSIX system
        return
    if spec.distributed.ray:
        return
    workers = auto_workers(plan) if spec.load.workers == "auto" else spec.load.workers
    streams = planned_streams(plan, workers)
    if spec.load.capacity is not None or any(sc.mode == "open" for sc in plan.scenarios):
        # In flight is what the server's speed makes it: at most the open-loop cap.
        streams = max(streams, math.ceil(spec.load.max_in_flight / max(1, workers)))
        strict = False
    else:
        strict = True
    need = streams + BASE_FDS
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    target = hard if hard != resource.RLIM_INFINITY else need
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (OSError, ValueError):
            pass
    if soft < need and strict:
        raise ConfigError(
            f"{spec.source or 'tokrate run'}: {streams:,} streams per process need about"
            f" {need:,} open files, but this process may open at most {soft:,}"
            f" (ulimit -n); raise it (ulimit -n {need}) or lower the concurrency;"
            " nothing was sent"
        )
