"""The backend a spec asks for. Kept apart from the Backend protocol so the seam
module names no implementation; each implementation is imported only when chosen
(Ray is an optional extra)."""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Final

from tokrate.errors import ConfigError
from tokrate.load.backends import Backend
from tokrate.load.plan import Plan
from tokrate.spec.types import RunSpec

__all__ = ["AUTO_STREAMS_PER_WORKER", "auto_workers", "open_backend", "workers_for_streams"]

#: ``--workers auto``: the most streams one worker process is given before another is
#: added (docs/cluster.md; benchmarks/ttft_error.py measures the TTFT error a default
#: run gets at each stream count).
AUTO_STREAMS_PER_WORKER: Final = 512


def auto_workers(plan: Plan, cores: int | None = None) -> int:
    """``load.workers = "auto"``: :func:`workers_for_streams` of the plan's largest
    closed-loop scenario (all its targets together), counting only the streams that
    have a request to send (``streams_per_target``: 100,000 streams for one request
    are one stream). Open loop and capacity searches (whose in-flight count is not
    known up front) get one."""
    streams = max(
        (sc.streams_per_target * len(sc.target_indices) for sc in plan.scenarios), default=0
    )
    return workers_for_streams(streams, cores)


def workers_for_streams(streams: int, cores: int | None = None) -> int:
    """One worker process per :data:`AUTO_STREAMS_PER_WORKER` streams, at most one per
    CPU this process may run on (``cores``; default its affinity), at least one."""
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        cores = cores or os.cpu_count() or 1
    return max(1, min(cores, math.ceil(streams / AUTO_STREAMS_PER_WORKER)))


def open_backend(spec: RunSpec, plan: Plan | None = None) -> Backend:
    """The backend a spec asks for: Ray when ``distributed.ray`` is set (with
    ``load.workers`` actors when that is > 1, else ``distributed.workers``), local
    processes when ``load.workers > 1`` (``"auto"``: :func:`auto_workers` of ``plan``;
    one without a plan), else in-process.

    The workers are started before this returns (see :meth:`Backend.start`).

    Raises: ConfigError for a worker count below 1; UsageError (one line, with the pip
    command) when Ray is asked for but not installed; ConfigError when the Ray cluster
    cannot be reached.
    """
    workers = spec.load.workers
    if workers == "auto":
        workers = 1 if plan is None or spec.distributed.ray else auto_workers(plan)
    if workers < 1:
        raise ConfigError(f"{spec.source or 'config'}: load.workers must be >= 1, got {workers}")
    if spec.distributed.ray:
        from tokrate.load.backends.ray import RayBackend

        # `--ray ADDR --workers N` means N Ray workers; without --workers the
        # [distributed] table's count applies.
        dist = spec.distributed
        if workers > 1:
            dist = dataclasses.replace(dist, workers=workers)
        backend: Backend = RayBackend.connect(dist)
    elif workers == 1:
        from tokrate.load.backends.inprocess import InProcessBackend

        backend = InProcessBackend()
    else:
        from tokrate.load.backends.processes import ProcessBackend

        backend = ProcessBackend(workers)
    try:
        backend.start()
    except BaseException:
        backend.close()
        raise
    return backend
