"""The backend a spec asks for. Kept apart from the Backend protocol so the seam
module names no implementation; each implementation is imported only when chosen
(Ray is an optional extra)."""

from __future__ import annotations

import dataclasses

from tokrate.errors import ConfigError
from tokrate.load.backends import Backend
from tokrate.spec import RunSpec

__all__ = ["open_backend"]


def open_backend(spec: RunSpec) -> Backend:
    """The backend a spec asks for: Ray when ``distributed.ray`` is set (with
    ``load.workers`` actors when that is > 1, else ``distributed.workers``), local
    processes when ``load.workers > 1``, else in-process.

    The workers are started before this returns (see :meth:`Backend.start`).

    Raises: ConfigError for a worker count below 1; UsageError (one line, with the pip
    command) when Ray is asked for but not installed; ConfigError when the Ray cluster
    cannot be reached.
    """
    workers = spec.load.workers
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
