"""How a run is stopped from outside the event loops: one object, two stages.

:class:`Stop` is a ``threading.Event`` (``set()``: stop scheduling new requests and give
the ones in flight their grace period) with a second stage, :meth:`Stop.abort` (end the
grace period now: what is still in flight is recorded as cancelled at once). Backends
carry both stages to every worker (a thread, a process over its control pipe, a Ray
actor), so a third Ctrl-C or SIGTERM stops waiting everywhere.

A Stop may have a *parent* (``Stop(parent)``): it reads as set (and aborted) when its
parent does, so one scenario can be stopped on its own (a stopping rule:
tokrate.load.stop_rules) while a signal, which sets the run's Stop, still stops
everything. Every reader polls :meth:`is_set` / :attr:`aborted`; ``wait()`` (the
Event's own) sees only this Stop's own stage.
"""

from __future__ import annotations

import threading

__all__ = ["Stop"]


class Stop(threading.Event):
    """A stop request (the Event) plus an abort of the grace period; set too when its
    ``parent`` is."""

    def __init__(self, parent: Stop | None = None) -> None:
        super().__init__()
        self._abort = threading.Event()
        self._parent = parent

    def is_set(self) -> bool:
        """Set here, or on the parent."""
        return super().is_set() or (self._parent is not None and self._parent.is_set())

    def abort(self) -> None:
        """Stop now: set the stop and end any grace period."""
        self.set()
        self._abort.set()

    @property
    def aborted(self) -> bool:
        return self._abort.is_set() or (self._parent is not None and self._parent.aborted)

    def wait_aborted(self, timeout: float | None = None) -> bool:
        """Block until :meth:`abort` (or ``timeout``); True when aborted."""
        return self._abort.wait(timeout)
