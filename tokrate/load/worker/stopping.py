"""How a run is stopped from outside the event loops: one object, two stages.

:class:`Stop` is a ``threading.Event`` (``set()``: stop scheduling new requests and give
the ones in flight their grace period) with a second stage, :meth:`Stop.abort` (end the
grace period now: what is still in flight is recorded as cancelled at once). Backends
carry both stages to every worker (a thread, a process over its control pipe, a Ray
actor), so a third Ctrl-C or SIGTERM stops waiting everywhere.
"""

from __future__ import annotations

import threading

__all__ = ["Stop"]


class Stop(threading.Event):
    """A stop request (the Event) plus an abort of the grace period."""

    def __init__(self) -> None:
        super().__init__()
        self._abort = threading.Event()

    def abort(self) -> None:
        """Stop now: set the stop and end any grace period."""
        self.set()
        self._abort.set()

    @property
    def aborted(self) -> bool:
        return self._abort.is_set()

    def wait_aborted(self, timeout: float | None = None) -> bool:
        """Block until :meth:`abort` (or ``timeout``); True when aborted."""
        return self._abort.wait(timeout)
